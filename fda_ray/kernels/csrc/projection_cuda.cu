// The fused layerwise projection ops on CUDA: the same contracts as the CPU implementation (projection.cpp,
// which defines the schemas; fda_ray/kernels/reference.py is the specification).
//
//   layer_stats(target (M,), sources (N, M), offsets (L+1,)) -> dots (N, L), s_sq (N, L), t_sq (L,)   float64
//   layer_combine(target, sources, offsets, scale (N, L), target_coef) -> out (M,) float32
//   gram(target_steps (B, M), sources (N, M)) -> K_GG (B, B), K_GS (B, N), s_sq (N,)                 float64
//
// Determinism: no floating-point atomics. Every sum is split into fixed pieces (segments of a layer, chunks of
// columns) whose size does not depend on the device; each block writes the partial sums of its piece, reduced
// inside the block in a fixed tree order, and a second kernel adds the partials of each output in index order.
// Products of two float32 values are exact in float64, so only the order of the float64 additions matters.
#include "common.h"

// c10's stream header rather than ATen/cuda/CUDAContext.h (at::cuda::getCurrentCUDAStream is the same function):
// the latter pulls in cuSPARSE/cuBLAS headers, which some toolkit installs (pip CUDA wheels) keep elsewhere.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

namespace fda_ray {

namespace {

constexpr int64_t kChunk = 8192;  // elements per segment: 32 loop trips of a 256-thread block
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kGroup = 8;           // layer_stats: sources per block, their accumulators live in registers
constexpr int kScaleTile = 1024;    // layer_combine: scale values per shared-memory tile (N > 1024 loops)
constexpr int kGramRows = 32;       // gram: output tile of 32 x 32 row pairs, 2 x 2 per thread
constexpr int kGramCols = 32;       // gram: columns staged in shared memory per step (one warp-wide load)
constexpr int64_t kGramMinCols = 8192;  // gram: columns per chunk at least (small M: few, fuller blocks)
constexpr int64_t kGramMaxChunks = 512;  // gram: bounds the partials to 512 * items * 8 KiB

static_assert(kThreads == 16 * 16, "gram maps the 256 threads onto a 16 x 16 grid of 2 x 2 micro-tiles");
static_assert(kThreads == kGramCols * (kGramRows / 4), "gram loads a 32 x 32 tile in 4 passes of 256 threads");

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Host table -> device int64 tensor. Staged through pinned memory so the copy is asynchronous on the current
// stream (a pageable copy would synchronize the stream); the caching host allocator keeps the pinned block
// alive until the copy has run.
at::Tensor upload(const std::vector<int64_t>& host, const at::Device& device) {
  at::Tensor pinned = at::empty({static_cast<int64_t>(host.size())},
                                at::TensorOptions().dtype(at::kLong).pinned_memory(true));
  if (!host.empty()) std::memcpy(pinned.data_ptr<int64_t>(), host.data(), host.size() * sizeof(int64_t));
  return pinned.to(device, at::kLong, /*non_blocking=*/true);
}

// Sums v[j] over the block for every j; the totals end in red[kWarps * kVals + j] (red holds
// kWarps * kVals + kVals doubles), visible to all threads. Fixed order: a shuffle tree inside each warp, then
// the warps in index order.
template <int kVals>
__device__ __forceinline__ void block_sum(double (&v)[kVals], double* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int j = 0; j < kVals; ++j) {
    double x = v[j];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x += __shfl_down_sync(0xffffffffu, x, off);
    if (lane == 0) red[warp * kVals + j] = x;
  }
  __syncthreads();
  if (threadIdx.x < kVals) {
    double total = 0.0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += red[w * kVals + threadIdx.x];
    red[kWarps * kVals + threadIdx.x] = total;
  }
  __syncthreads();
}

// ------------------------------------------------------------------------------------------ layer_stats

// grid (S, ceil(N / kGroup)), kThreads threads. Block (seg, grp) sums over segment seg, for sources
// i0 .. i0 + ng - 1 (i0 = grp * kGroup): <t, s_i>, |s_i|^2 and (group 0 only) |t|^2.
// part_dot, part_sq: (N, S); part_t: (S,).
__global__ void __launch_bounds__(kThreads) layer_stats_partial_kernel(
    const float* __restrict__ target, const float* __restrict__ sources, int64_t n, int64_t m,
    const int64_t* __restrict__ seg_start, const int64_t* __restrict__ seg_end, int64_t num_seg,
    double* __restrict__ part_dot, double* __restrict__ part_sq, double* __restrict__ part_t) {
  constexpr int kVals = 2 * kGroup + 1;  // dots, squares, |t|^2
  __shared__ double red[kWarps * kVals + kVals];
  const int64_t seg = blockIdx.x;
  const int64_t i0 = static_cast<int64_t>(blockIdx.y) * kGroup;
  const int ng = static_cast<int>(min(static_cast<int64_t>(kGroup), n - i0));
  const int64_t lo = seg_start[seg], hi = seg_end[seg];
  const float* __restrict__ src = sources + i0 * m;

  double v[kVals];
#pragma unroll
  for (int j = 0; j < kVals; ++j) v[j] = 0.0;
  // One read of the target element serves all sources of the group; the branch on ng is block-uniform.
  for (int64_t k = lo + threadIdx.x; k < hi; k += kThreads) {
    const double t = target[k];
    v[2 * kGroup] += t * t;
#pragma unroll
    for (int j = 0; j < kGroup; ++j) {
      if (j < ng) {
        const double s = src[j * m + k];
        v[j] += t * s;
        v[kGroup + j] += s * s;
      }
    }
  }
  block_sum<kVals>(v, red);
  const double* total = red + kWarps * kVals;
  if (threadIdx.x < ng) {
    part_dot[(i0 + threadIdx.x) * num_seg + seg] = total[threadIdx.x];
    part_sq[(i0 + threadIdx.x) * num_seg + seg] = total[kGroup + threadIdx.x];
  }
  if (blockIdx.y == 0 && threadIdx.x == 0) part_t[seg] = total[2 * kGroup];
}

// One thread per (row r, layer l), r in 0..N (r == N is the target): adds the layer's segments
// first[l] .. first[l + 1] - 1 in order (none for an empty layer: 0). dots, s_sq: (N, L); t_sq: (L,).
__global__ void __launch_bounds__(kThreads) layer_stats_reduce_kernel(
    const double* __restrict__ part_dot, const double* __restrict__ part_sq, const double* __restrict__ part_t,
    const int64_t* __restrict__ first, int64_t n, int64_t num_layers, int64_t num_seg,
    double* __restrict__ dots, double* __restrict__ s_sq, double* __restrict__ t_sq) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (idx >= (n + 1) * num_layers) return;
  const int64_t r = idx / num_layers, l = idx % num_layers;
  const int64_t g0 = first[l], g1 = first[l + 1];
  if (r < n) {
    double d = 0.0, q = 0.0;
    for (int64_t g = g0; g < g1; ++g) {
      d += part_dot[r * num_seg + g];
      q += part_sq[r * num_seg + g];
    }
    dots[r * num_layers + l] = d;
    s_sq[r * num_layers + l] = q;
  } else {
    double t = 0.0;
    for (int64_t g = g0; g < g1; ++g) t += part_t[g];
    t_sq[l] = t;
  }
}

// ------------------------------------------------------------------------------------------ layer_combine

// grid (S,), kThreads threads. Block seg writes out[lo .. hi) of its segment; its layer is fixed, so the N
// scale values of that layer go to shared memory (in tiles of kScaleTile sources when N is larger, carrying the
// running sum through out[] between tiles; each thread revisits only its own elements, so no race).
// scale: (N, L) float32. out[k] = ((0 + c_0 s_0k) + c_1 s_1k) + ... + tc * t_k, each step rounded to float32:
// __fmul_rn / __fadd_rn keep the compiler from fusing into FMAs, which would round differently from the
// reference's separate multiply and add.
__global__ void __launch_bounds__(kThreads) layer_combine_kernel(
    const float* __restrict__ target, const float* __restrict__ sources, const float* __restrict__ scale,
    const int64_t* __restrict__ seg_start, const int64_t* __restrict__ seg_end,
    const int64_t* __restrict__ seg_layer, int64_t n, int64_t m, int64_t num_layers, float target_coef,
    float* __restrict__ out) {
  __shared__ float sc[kScaleTile];
  const int64_t seg = blockIdx.x;
  const int64_t lo = seg_start[seg], hi = seg_end[seg], layer = seg_layer[seg];
  for (int64_t i0 = 0; i0 < n; i0 += kScaleTile) {
    const int cnt = static_cast<int>(min(static_cast<int64_t>(kScaleTile), n - i0));
    __syncthreads();  // the previous tile's readers are done with sc
    for (int j = threadIdx.x; j < cnt; j += kThreads) sc[j] = scale[(i0 + j) * num_layers + layer];
    __syncthreads();
    const bool first_tile = i0 == 0, last_tile = i0 + cnt >= n;
    for (int64_t k = lo + threadIdx.x; k < hi; k += kThreads) {
      float acc = first_tile ? 0.0f : out[k];
      const float* __restrict__ s = sources + i0 * m + k;
      // Unrolled so the independent loads of several sources are in flight together.
#pragma unroll 8
      for (int j = 0; j < cnt; ++j) acc = __fadd_rn(acc, __fmul_rn(sc[j], s[j * m]));
      if (last_tile) acc = __fadd_rn(acc, __fmul_rn(target_coef, target[k]));
      out[k] = acc;
    }
  }
}

// ------------------------------------------------------------------------------------------ gram

// The rows are X = [G; S] (R = B + N rows), cut into tiles of kGramRows rows. An item (ta, tc), ta <= tc, is
// the 32 x 32 block of pairs (a, c), a in tile ta, c in tile tc. Items: every (ta, tc >= ta) where tile ta
// holds a G row, and (ta, ta) for the remaining all-S tiles (their diagonal is s_sq): S S^T off the diagonal
// tiles is never formed.
__device__ __forceinline__ const float* gram_row(const float* g, const float* s, int64_t b, int64_t rows,
                                                 int64_t m, int64_t r) {
  if (r >= rows) return nullptr;
  return r < b ? g + r * m : s + (r - b) * m;
}

// grid (num_items, num_chunks), kThreads threads; blockIdx.x is the item so the blocks of one chunk run side by
// side and share its columns in L2. Block (item, chunk) sums the pairs over columns
// [chunk * cols_per_chunk, min(M, (chunk + 1) * cols_per_chunk)), staged kGramCols at a time in shared memory as
// float64 (converted once, reused by 32 threads). Thread (ty, tx) owns the pairs (a0 + ty + 16 i, c0 + tx + 16 j),
// i, j in {0, 1}. items: (num_items, 2) tile indices; partial: (num_chunks, num_items, 32 * 32).
// Min 4 blocks per SM lets ptxas use 64 registers; with the plain bound it capped itself at 48 and spilled.
__global__ void __launch_bounds__(kThreads, 4) gram_partial_kernel(
    const float* __restrict__ g, const float* __restrict__ s, int64_t b, int64_t n, int64_t m,
    const int64_t* __restrict__ items, int64_t num_items, int64_t cols_per_chunk, double* __restrict__ partial) {
  // +1 column of padding: the transposed stores (one row, 32 consecutive columns per warp) hit distinct banks.
  __shared__ double xa[kGramCols][kGramRows + 1];
  __shared__ double xc[kGramCols][kGramRows + 1];
  const int64_t item = blockIdx.x, chunk = blockIdx.y;
  const int64_t rows = b + n;
  const int64_t a0 = items[2 * item] * kGramRows, c0 = items[2 * item + 1] * kGramRows;
  const bool same = a0 == c0;  // diagonal item: one tile serves both sides
  const int64_t lo = chunk * cols_per_chunk, hi = min(m, lo + cols_per_chunk);
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  // Loader: thread reads column lw of rows lr + 8 q, q = 0..3 (a warp reads 32 consecutive floats of a row).
  const int lw = threadIdx.x % kGramCols, lr = threadIdx.x / kGramCols;
  const float* pa[4];
  const float* pc[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    pa[q] = gram_row(g, s, b, rows, m, a0 + lr + 8 * q);
    pc[q] = gram_row(g, s, b, rows, m, c0 + lr + 8 * q);
  }
  const double(*xcs)[kGramRows + 1] = same ? xa : xc;
  // A thread whose first pair is outside X owns no valid pair (its other rows are 16 further): it only loads.
  const bool active = a0 + ty < rows && c0 + tx < rows;
  double acc[2][2] = {{0.0, 0.0}, {0.0, 0.0}};
  for (int64_t col0 = lo; col0 < hi; col0 += kGramCols) {
    const int64_t col = col0 + lw;
    const bool in = col < hi;
    // Rows past R and columns past the chunk are staged as 0: they add exact zeros.
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      xa[lw][lr + 8 * q] = (in && pa[q] != nullptr) ? static_cast<double>(pa[q][col]) : 0.0;
      if (!same) xc[lw][lr + 8 * q] = (in && pc[q] != nullptr) ? static_cast<double>(pc[q][col]) : 0.0;
    }
    __syncthreads();
    if (active) {
#pragma unroll 8
      for (int w = 0; w < kGramCols; ++w) {
        const double x0 = xa[w][ty], x1 = xa[w][ty + 16];
        const double y0 = xcs[w][tx], y1 = xcs[w][tx + 16];
        acc[0][0] += x0 * y0;
        acc[0][1] += x0 * y1;
        acc[1][0] += x1 * y0;
        acc[1][1] += x1 * y1;
      }
    }
    __syncthreads();  // the tile is overwritten by the next step
  }
  double* dst = partial + (chunk * num_items + item) * (kGramRows * kGramRows);
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) dst[(ty + 16 * i) * kGramRows + tx + 16 * j] = acc[i][j];
}

// One thread per slot (item, la, lc) of the 32 x 32 item blocks: the needed pairs (a <= c, and a a G row or
// a == c) add their chunks in order 0 .. num_chunks - 1 and go to K_GG (both halves: the same value, so the
// matrix is exactly symmetric), K_GS or s_sq. Every needed pair lies in exactly one item slot.
__global__ void __launch_bounds__(kThreads) gram_reduce_kernel(
    const double* __restrict__ partial, const int64_t* __restrict__ items, int64_t num_items, int64_t num_chunks,
    int64_t b, int64_t n, double* __restrict__ k_gg, double* __restrict__ k_gs, double* __restrict__ s_sq) {
  constexpr int64_t kSlots = kGramRows * kGramRows;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (idx >= num_items * kSlots) return;
  const int64_t item = idx / kSlots, slot = idx % kSlots;
  const int64_t a = items[2 * item] * kGramRows + slot / kGramRows;
  const int64_t c = items[2 * item + 1] * kGramRows + slot % kGramRows;
  const int64_t rows = b + n;
  if (a >= rows || c >= rows || a > c || (a >= b && a != c)) return;
  double total = 0.0;
  for (int64_t chunk = 0; chunk < num_chunks; ++chunk) total += partial[(chunk * num_items + item) * kSlots + slot];
  if (c < b) {
    k_gg[a * b + c] = total;
    k_gg[c * b + a] = total;
  } else if (a < b) {
    k_gs[a * n + (c - b)] = total;
  } else {
    s_sq[a - b] = total;
  }
}

inline unsigned int grid_1d(int64_t threads, const char* op) {
  const int64_t blocks = ceil_div(threads, kThreads);
  TORCH_CHECK(blocks <= INT_MAX, "fda_ray.", op, ": problem too large for one launch (", threads, " threads)");
  return static_cast<unsigned int>(blocks);
}

void check_cuda(const char* op, const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), "fda_ray.", op, ": CUDA implementation called with ", name, " on ", t.device());
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_stats_cuda(const at::Tensor& target, const at::Tensor& sources,
                                                               const at::Tensor& offsets) {
  check_cuda("layer_stats", target, "target");
  const at::Tensor o = check_layer_inputs("layer_stats", target, sources, offsets);
  c10::cuda::CUDAGuard device_guard(target.device());
  const int64_t n = sources.size(0), m = target.size(0), num_layers = o.numel() - 1;
  const Segments seg = make_segments(o, kChunk);
  const int64_t num_seg = static_cast<int64_t>(seg.start.size());
  const int64_t num_groups = ceil_div(n, kGroup);
  TORCH_CHECK(num_seg <= INT_MAX, "fda_ray.layer_stats: too many segments (", num_seg, ")");
  TORCH_CHECK(num_groups <= 65535, "fda_ray.layer_stats: too many sources (N=", n, ")");

  // One upload: [start (S), end (S), first (L + 1)].
  std::vector<int64_t> table;
  table.reserve(2 * num_seg + num_layers + 1);
  table.insert(table.end(), seg.start.begin(), seg.start.end());
  table.insert(table.end(), seg.end.begin(), seg.end.end());
  table.insert(table.end(), seg.first.begin(), seg.first.end());
  const at::Tensor table_d = upload(table, target.device());
  const int64_t* d_start = table_d.data_ptr<int64_t>();
  const int64_t* d_end = d_start + num_seg;
  const int64_t* d_first = d_end + num_seg;

  auto opts = target.options().dtype(at::kDouble);
  at::Tensor dots = at::empty({n, num_layers}, opts), s_sq = at::empty({n, num_layers}, opts);
  at::Tensor t_sq = at::empty({num_layers}, opts);
  at::Tensor part_dot = at::empty({n, num_seg}, opts), part_sq = at::empty({n, num_seg}, opts);
  at::Tensor part_t = at::empty({num_seg}, opts);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();

  if (num_seg > 0) {  // M == 0: no segments, every layer is empty and sums to 0 below
    const dim3 grid(static_cast<unsigned int>(num_seg), static_cast<unsigned int>(num_groups));
    layer_stats_partial_kernel<<<grid, kThreads, 0, stream>>>(
        target.data_ptr<float>(), sources.data_ptr<float>(), n, m, d_start, d_end, num_seg,
        part_dot.data_ptr<double>(), part_sq.data_ptr<double>(), part_t.data_ptr<double>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  layer_stats_reduce_kernel<<<grid_1d((n + 1) * num_layers, "layer_stats"), kThreads, 0, stream>>>(
      part_dot.data_ptr<double>(), part_sq.data_ptr<double>(), part_t.data_ptr<double>(), d_first, n, num_layers,
      num_seg, dots.data_ptr<double>(), s_sq.data_ptr<double>(), t_sq.data_ptr<double>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {dots, s_sq, t_sq};
}

at::Tensor layer_combine_cuda(const at::Tensor& target, const at::Tensor& sources, const at::Tensor& offsets,
                              const at::Tensor& scale, double target_coef) {
  check_cuda("layer_combine", target, "target");
  const at::Tensor o = check_layer_inputs("layer_combine", target, sources, offsets);
  c10::cuda::CUDAGuard device_guard(target.device());
  const int64_t n = sources.size(0), m = target.size(0), num_layers = o.numel() - 1;
  check_scale("layer_combine", scale, n, num_layers);
  // The multiply is in float32, as in the reference (scale cast to the sources' dtype).
  const at::Tensor sc = scale.to(target.device(), at::kFloat).contiguous();  // (N, L)
  at::Tensor out = at::empty({m}, target.options());
  const Segments seg = make_segments(o, kChunk);
  const int64_t num_seg = static_cast<int64_t>(seg.start.size());
  if (num_seg == 0) return out;  // M == 0
  TORCH_CHECK(num_seg <= INT_MAX, "fda_ray.layer_combine: too many segments (", num_seg, ")");

  // One upload: [start (S), end (S), layer (S)].
  std::vector<int64_t> table;
  table.reserve(3 * num_seg);
  table.insert(table.end(), seg.start.begin(), seg.start.end());
  table.insert(table.end(), seg.end.begin(), seg.end.end());
  table.insert(table.end(), seg.layer.begin(), seg.layer.end());
  const at::Tensor table_d = upload(table, target.device());
  const int64_t* d_start = table_d.data_ptr<int64_t>();

  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  layer_combine_kernel<<<static_cast<unsigned int>(num_seg), kThreads, 0, stream>>>(
      target.data_ptr<float>(), sources.data_ptr<float>(), sc.data_ptr<float>(), d_start, d_start + num_seg,
      d_start + 2 * num_seg, n, m, num_layers, static_cast<float>(target_coef), out.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> gram_cuda(const at::Tensor& target_steps, const at::Tensor& sources) {
  check_gram_inputs("gram", target_steps, sources);
  check_cuda("gram", target_steps, "target_steps");
  c10::cuda::CUDAGuard device_guard(target_steps.device());
  const int64_t b = target_steps.size(0), n = sources.size(0), m = target_steps.size(1);
  auto opts = target_steps.options().dtype(at::kDouble);
  if (m == 0) return {at::zeros({b, b}, opts), at::zeros({b, n}, opts), at::zeros({n}, opts)};

  const int64_t tiles = ceil_div(b + n, kGramRows);
  std::vector<int64_t> items;  // (num_items, 2): (ta, tc)
  for (int64_t ta = 0; ta < tiles; ++ta) {
    const int64_t tc_end = ta * kGramRows < b ? tiles : ta + 1;
    for (int64_t tc = ta; tc < tc_end; ++tc) {
      items.push_back(ta);
      items.push_back(tc);
    }
  }
  const int64_t num_items = static_cast<int64_t>(items.size()) / 2;
  // Chunks: a whole number of kGramCols steps each, as many as M allows up to kGramMaxChunks; the last chunk
  // is the only short one and none is empty.
  const int64_t steps = ceil_div(m, kGramCols);
  const int64_t want = std::min(kGramMaxChunks, std::max<int64_t>(1, ceil_div(m, kGramMinCols)));
  const int64_t cols_per_chunk = ceil_div(steps, want) * kGramCols;
  const int64_t num_chunks = ceil_div(m, cols_per_chunk);
  TORCH_CHECK(num_items <= INT_MAX, "fda_ray.gram: too many rows (B + N = ", b + n, ")");

  const at::Tensor items_d = upload(items, target_steps.device());
  at::Tensor partial = at::empty({num_chunks, num_items, kGramRows * kGramRows}, opts);
  at::Tensor k_gg = at::empty({b, b}, opts), k_gs = at::empty({b, n}, opts), s_sq = at::empty({n}, opts);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const dim3 grid(static_cast<unsigned int>(num_items), static_cast<unsigned int>(num_chunks));
  gram_partial_kernel<<<grid, kThreads, 0, stream>>>(target_steps.data_ptr<float>(), sources.data_ptr<float>(), b, n,
                                                     m, items_d.data_ptr<int64_t>(), num_items, cols_per_chunk,
                                                     partial.data_ptr<double>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  gram_reduce_kernel<<<grid_1d(num_items * kGramRows * kGramRows, "gram"), kThreads, 0, stream>>>(
      partial.data_ptr<double>(), items_d.data_ptr<int64_t>(), num_items, num_chunks, b, n, k_gg.data_ptr<double>(),
      k_gs.data_ptr<double>(), s_sq.data_ptr<double>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {k_gg, k_gs, s_sq};
}

TORCH_LIBRARY_IMPL(fda_ray, CUDA, m) {
  m.impl("layer_stats", &layer_stats_cuda);
  m.impl("layer_combine", &layer_combine_cuda);
  m.impl("gram", &gram_cuda);
}

}  // namespace fda_ray
