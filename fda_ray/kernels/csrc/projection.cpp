// The fused layerwise projection ops: schemas and the CPU implementation.
//
//   layer_stats(target (M,), sources (N, M), offsets (L+1,)) -> dots (N, L), s_sq (N, L), t_sq (L,)   float64
//   layer_combine(target, sources, offsets, scale (N, L), target_coef) -> out (M,) float32
//        out[k] = sum_i scale[i, layer(k)] * sources[i, k] + target_coef * target[k]
//   gram(target_steps (B, M), sources (N, M)) -> K_GG (B, B), K_GS (B, N), s_sq (N,)                 float64
//
// The Python specification is fda_ray/kernels/reference.py. Each op reads its inputs once: layer_stats and
// layer_combine walk the flat vectors segment by segment (a segment lies in one layer, common.h) and keep
// the target's segment in cache while every source streams past it; gram does the same with a tile of
// columns of every row. Sums are float64 (inputs are float32) over fixed segments reduced in a fixed order,
// so results do not depend on the number of threads.
#include "common.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>

namespace fda_ray {

namespace {

constexpr int64_t kChunk = 1 << 14;  // elements per segment: target segment (64 KiB) stays in L2
constexpr int64_t kGramTile = 2048;   // gram: columns per tile, all B + N rows of a tile stay in L2
constexpr int64_t kGramBlocks = 256;  // gram: fixed number of partial sums (independent of the threads)
constexpr int64_t kBlock = 256;  // layer_combine: elements accumulated in registers / L1 across all sources
constexpr int kLanes = 32;  // independent float64 accumulators: enough to hide FMA latency and let the compiler vectorize

// sum_k a[k] * b[k] in float64, with kLanes partial sums (vectorizable without -ffast-math).
inline double dot(const float* a, const float* b, int64_t n) {
  double acc[kLanes] = {0};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += static_cast<double>(a[k + j]) * static_cast<double>(b[k + j]);
  }
  double tail = 0;
  for (; k < n; ++k) tail += static_cast<double>(a[k]) * static_cast<double>(b[k]);
  double s = 0;
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  return s + tail;
}

// (dot(a, t), dot(a, a)) in one read of a.
inline void dot_and_sq(const float* a, const float* t, int64_t n, double* out_dot, double* out_sq) {
  double d[kLanes] = {0}, q[kLanes] = {0};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const double x = a[k + j];
      d[j] += x * static_cast<double>(t[k + j]);
      q[j] += x * x;
    }
  }
  double dt = 0, qt = 0;
  for (; k < n; ++k) {
    const double x = a[k];
    dt += x * static_cast<double>(t[k]);
    qt += x * x;
  }
  for (int j = 0; j < kLanes; ++j) {
    dt += d[j];
    qt += q[j];
  }
  *out_dot = dt;
  *out_sq = qt;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_stats_cpu(const at::Tensor& target, const at::Tensor& sources,
                                                              const at::Tensor& offsets) {
  const at::Tensor o = check_layer_inputs("layer_stats", target, sources, offsets);
  TORCH_CHECK(target.device().is_cpu(), "fda_ray.layer_stats: CPU implementation called with ", target.device());
  const int64_t n = sources.size(0), m = target.size(0), num_layers = o.numel() - 1;
  const Segments seg = make_segments(o, kChunk);
  const int64_t num_seg = static_cast<int64_t>(seg.start.size());
  // Per-segment partials (S, N) and (S,): every segment is owned by one task, no sharing.
  std::vector<double> p_dot(num_seg * n), p_sq(num_seg * n), p_t(num_seg);
  const float* t = target.data_ptr<float>();
  const float* s = sources.data_ptr<float>();
  // Grain: enough segments per task that tiny layers do not cost a task each.
  at::parallel_for(0, num_seg, 4, [&](int64_t a, int64_t b) {
    for (int64_t g = a; g < b; ++g) {
      const int64_t lo = seg.start[g], len = seg.end[g] - lo;
      p_t[g] = dot(t + lo, t + lo, len);
      for (int64_t i = 0; i < n; ++i) dot_and_sq(s + i * m + lo, t + lo, len, &p_dot[g * n + i], &p_sq[g * n + i]);
    }
  });
  auto opts = target.options().dtype(at::kDouble);
  at::Tensor dots = at::zeros({n, num_layers}, opts), s_sq = at::zeros({n, num_layers}, opts);
  at::Tensor t_sq = at::zeros({num_layers}, opts);
  double* pd = dots.data_ptr<double>();
  double* ps = s_sq.data_ptr<double>();
  double* pt = t_sq.data_ptr<double>();
  for (int64_t l = 0; l < num_layers; ++l) {
    for (int64_t g = seg.first[l]; g < seg.first[l + 1]; ++g) {
      pt[l] += p_t[g];
      for (int64_t i = 0; i < n; ++i) {
        pd[i * num_layers + l] += p_dot[g * n + i];
        ps[i * num_layers + l] += p_sq[g * n + i];
      }
    }
  }
  return {dots, s_sq, t_sq};
}

// No fused multiply-adds in layer_combine: with -mfma the compiler contracts acc += cf * s (and acc + tc * t) into
// FMAs, which round once where the reference rounds twice, and the kernel moved 25-80 % of the elements by one ulp
// from the reference (and from a build for a CPU without FMA). Contraction off here, the CPU kernel gives the
// reference's numbers bit for bit, as the CUDA kernel does (__fmul_rn / __fadd_rn). layer_stats and gram keep their
// FMAs: their float64 sums are compared to the reference with a tolerance, and they are compute-bound.
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
at::Tensor layer_combine_cpu(const at::Tensor& target, const at::Tensor& sources, const at::Tensor& offsets,
                             const at::Tensor& scale, double target_coef) {
  const at::Tensor o = check_layer_inputs("layer_combine", target, sources, offsets);
  TORCH_CHECK(target.device().is_cpu(), "fda_ray.layer_combine: CPU implementation called with ", target.device());
  const int64_t n = sources.size(0), m = target.size(0), num_layers = o.numel() - 1;
  check_scale("layer_combine", scale, n, num_layers);
  // The multiply is in float32, as in the reference (scale cast to the sources' dtype).
  const at::Tensor sc = scale.to(at::kCPU, at::kFloat).contiguous();
  const float* c = sc.data_ptr<float>();
  const float tc = static_cast<float>(target_coef);
  const Segments seg = make_segments(o, kChunk);
  const int64_t num_seg = static_cast<int64_t>(seg.start.size());
  at::Tensor out = at::empty({m}, target.options());
  float* po = out.data_ptr<float>();
  const float* t = target.data_ptr<float>();
  const float* s = sources.data_ptr<float>();
  at::parallel_for(0, num_seg, 4, [&](int64_t a, int64_t b) {
    for (int64_t g = a; g < b; ++g) {
      const int64_t lo = seg.start[g], len = seg.end[g] - lo, l = seg.layer[g];
      float* dst = po + lo;
      const float* tl = t + lo;
      const float* ci = c + l;  // ci[i * num_layers]: source i's coefficient on this layer
      // Blocks of kBlock elements: the N source streams are read side by side into a register-sized
      // accumulator, so every output element is written once. Summed in order i = 0..N-1, then + tc * t.
      for (int64_t k0 = 0; k0 < len; k0 += kBlock) {
        const int64_t bl = std::min<int64_t>(kBlock, len - k0);
        float acc[kBlock] = {0};
        for (int64_t i = 0; i < n; ++i) {
          const float cf = ci[i * num_layers];
          const float* si = s + i * m + lo + k0;
          for (int64_t j = 0; j < bl; ++j) acc[j] += cf * si[j];
        }
        for (int64_t j = 0; j < bl; ++j) dst[k0 + j] = acc[j] + tc * tl[k0 + j];
      }
    }
  });
  return out;
}
#pragma GCC pop_options

std::tuple<at::Tensor, at::Tensor, at::Tensor> gram_cpu(const at::Tensor& target_steps, const at::Tensor& sources) {
  check_gram_inputs("gram", target_steps, sources);
  TORCH_CHECK(target_steps.device().is_cpu() && sources.device().is_cpu(),
              "fda_ray.gram: CPU implementation called with ", target_steps.device(), " and ", sources.device());
  const int64_t b = target_steps.size(0), n = sources.size(0), m = target_steps.size(1);
  // The pairs needed: G_a.G_c (a <= c), G_a.S_i, S_i.S_i. The columns are cut into tiles small enough that all
  // rows of a tile stay in cache while every pair is formed; a fixed number of blocks of consecutive tiles each
  // keep one partial of all pairs (bounded memory, and an order that does not depend on the threads).
  const int64_t pairs = b * (b + 1) / 2 + b * n + n;
  const int64_t num_tiles = std::max<int64_t>(1, (m + kGramTile - 1) / kGramTile);
  const int64_t num_blocks = std::min<int64_t>(num_tiles, kGramBlocks);
  const int64_t tiles_per_block = (num_tiles + num_blocks - 1) / num_blocks;
  std::vector<double> partial(num_blocks * pairs, 0.0);
  const float* g = target_steps.data_ptr<float>();
  const float* s = sources.data_ptr<float>();
  at::parallel_for(0, num_blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      double* out = partial.data() + blk * pairs;
      for (int64_t tile = blk * tiles_per_block; tile < std::min(num_tiles, (blk + 1) * tiles_per_block); ++tile) {
        const int64_t lo = tile * kGramTile, len = std::min(m, lo + kGramTile) - lo;
        if (len <= 0) continue;
        int64_t p = 0;
        for (int64_t x = 0; x < b; ++x)
          for (int64_t y = x; y < b; ++y) out[p++] += dot(g + x * m + lo, g + y * m + lo, len);
        for (int64_t x = 0; x < b; ++x)
          for (int64_t i = 0; i < n; ++i) out[p++] += dot(g + x * m + lo, s + i * m + lo, len);
        for (int64_t i = 0; i < n; ++i) out[p++] += dot(s + i * m + lo, s + i * m + lo, len);
      }
    }
  });
  std::vector<double> total(pairs, 0.0);
  for (int64_t blk = 0; blk < num_blocks; ++blk)
    for (int64_t p = 0; p < pairs; ++p) total[p] += partial[blk * pairs + p];
  auto opts = target_steps.options().dtype(at::kDouble);
  at::Tensor k_gg = at::empty({b, b}, opts), k_gs = at::empty({b, n}, opts), s_sq = at::empty({n}, opts);
  double* pgg = k_gg.data_ptr<double>();
  double* pgs = k_gs.data_ptr<double>();
  double* pss = s_sq.data_ptr<double>();
  int64_t p = 0;
  for (int64_t x = 0; x < b; ++x)
    for (int64_t y = x; y < b; ++y) pgg[x * b + y] = pgg[y * b + x] = total[p++];
  for (int64_t x = 0; x < b; ++x)
    for (int64_t i = 0; i < n; ++i) pgs[x * n + i] = total[p++];
  for (int64_t i = 0; i < n; ++i) pss[i] = total[p++];
  return {k_gg, k_gs, s_sq};
}

TORCH_LIBRARY(fda_ray, m) {
  m.def("layer_stats(Tensor target, Tensor sources, Tensor offsets) -> (Tensor, Tensor, Tensor)");
  m.def("layer_combine(Tensor target, Tensor sources, Tensor offsets, Tensor scale, float target_coef) -> Tensor");
  m.def("gram(Tensor target_steps, Tensor sources) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(fda_ray, CPU, m) {
  m.impl("layer_stats", &layer_stats_cpu);
  m.impl("layer_combine", &layer_combine_cpu);
  m.impl("gram", &gram_cpu);
}

}  // namespace fda_ray
