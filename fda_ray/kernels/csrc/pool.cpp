// ReLU then 2x2 max-pooling, forward and backward, on CPU: the simple CNN's pooling (conv - ReLU - pool, twice).
//
//   relu_max_pool2x2(x (N, C, H, W) float32) -> out (N, C, H/2, W/2) float32, route (N, C, H/2, W/2) uint8
//   max_pool2x2(x)                            -> the same without the ReLU (SHOT's LeNet: conv - pool - ReLU)
//   relu_max_pool2x2_backward(grad (N, C, H/2, W/2), route, H, W) -> grad_x (N, C, H, W)    (both ops' backward)
//
// The same numbers as PyTorch's F.max_pool2d(torch.relu(x), 2) and its gradient (the specification:
// fda_ray/kernels/pool.py, tested against it bit for bit). A window's maximum is its first largest element in
// row-major order, or its last NaN (PyTorch's CPU max-pool: `val > maxval || isnan(val)`); the gradient goes to
// that element unless the output is <= 0 (ReLU's gradient there: it passes NaN), and to nowhere else. `route`
// records it: 0-3 the element (2 * dy + dx), 4 nowhere. Windows do not overlap: the backward writes each element
// once.
//
// Why: PyTorch's CPU max-pool walks each NCHW window with a running index, about 0.87 ms for the simple CNN's
// first pooling at batch 64 (64 x 6 x 24 x 24) on one AVX-512 core, more than that layer's convolution (0.25 ms)
// and about a quarter of a training step. This pass reads the map once and writes a quarter of it: 0.05 ms there,
// and the step 1.5x faster (benchmarks/pool.py, docs/kernels.md).
#include "common.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>

namespace fda_ray {

namespace {

constexpr uint8_t kNowhere = 4;

// Maps per thread's share: at least 32 Ki elements, so that threads are woken only for work that outlasts waking
// them (a map takes well under a microsecond).
inline int64_t grain(int64_t map_elements) {
  return std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, map_elements));
}

void check_map(const char* op, const at::Tensor& t, const char* name, at::ScalarType dtype) {
  TORCH_CHECK(t.device().is_cpu(), "fda_ray.", op, ": ", name, " must be on the CPU, got ", t.device());
  TORCH_CHECK(t.dim() == 4, "fda_ray.", op, ": ", name, " must be a 4-D (N, C, H, W) tensor, got shape ", t.sizes());
  TORCH_CHECK(t.scalar_type() == dtype, "fda_ray.", op, ": ", name, " must be ", dtype, ", got ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "fda_ray.", op, ": ", name, " must be contiguous (call .contiguous())");
}

// One window, without a jump: the comparisons depend on the data, and compiled as jumps they were mispredicted
// about half the time on a trained network's maps (1.0 ms for the map above against 0.09 ms on a constant one).
// Every choice is a bit mask; `t ? a : b` on the bits of floats.
inline float select(uint32_t t, float a, float b) {
  uint32_t ab, bb;
  std::memcpy(&ab, &a, 4);
  std::memcpy(&bb, &b, 4);
  const uint32_t mask = 0u - t, out = (ab & mask) | (bb & ~mask);
  float r;
  std::memcpy(&r, &out, 4);
  return r;
}

// torch.relu (clamp_min(v, 0)): a negative v is +0; the rest passes, NaN and -0.0 included.
inline float relu(float v) { return select(static_cast<uint32_t>(!(v < 0.f)), v, 0.f); }

// kRelu: ReLU on the inputs first (relu_max_pool2x2), or the plain max-pool (max_pool2x2).
template <bool kRelu>
inline float prepare(float v) { return kRelu ? relu(v) : v; }

template <bool kRelu>
inline void window(float a, float b, float c, float d, float* out, uint8_t* route) {
  const float v0 = prepare<kRelu>(a), v1 = prepare<kRelu>(b), v2 = prepare<kRelu>(c), v3 = prepare<kRelu>(d);
  float m = v0;  // the first element is always taken (PyTorch starts from -inf)
  uint32_t q = 0;
  const uint32_t t1 = (v1 > m) | (v1 != v1);
  m = select(t1, v1, m);
  q = (q & (t1 - 1)) | (1 & (0u - t1));
  const uint32_t t2 = (v2 > m) | (v2 != v2);
  m = select(t2, v2, m);
  q = (q & (t2 - 1)) | (2 & (0u - t2));
  const uint32_t t3 = (v3 > m) | (v3 != v3);
  m = select(t3, v3, m);
  q = (q & (t3 - 1)) | (3 & (0u - t3));
  *out = m;
  if (kRelu) {
    // ReLU's gradient passes where its output is not <= 0: above 0, and NaN (torch's threshold_backward)
    const uint32_t pos = !(m <= 0.f);
    *route = static_cast<uint8_t>((q & (0u - pos)) | (kNowhere & (pos - 1)));
  } else {
    *route = static_cast<uint8_t>(q);  // the max-pool's gradient always reaches its element
  }
}

#if defined(__GNUC__) || defined(__clang__)
// The same steps on L windows at once (GNU vector extensions: GCC and Clang compile them to the SSE/AVX
// instructions the build's flags allow). A row pair's 2L floats are loaded as two vectors and split into the
// windows' four corners (even and odd columns of each row). A comparison gives all-ones lanes where true.
template <int L>
struct Lanes {
  typedef float F __attribute__((vector_size(4 * L)));
  typedef int32_t I __attribute__((vector_size(4 * L)));
  typedef uint8_t B __attribute__((vector_size(L)));
};

template <int L>
inline typename Lanes<L>::F vselect(typename Lanes<L>::I t, typename Lanes<L>::F a, typename Lanes<L>::F b) {
  using F = typename Lanes<L>::F;
  using I = typename Lanes<L>::I;
  return (F)(((I)a & t) | ((I)b & ~t));
}

template <int L>
inline typename Lanes<L>::F vrelu(typename Lanes<L>::F v) {
  using F = typename Lanes<L>::F;
  using I = typename Lanes<L>::I;
  return (F)((I)v & ~(v < 0.f));  // as relu(): NaN < 0 and -0.0 < 0 are false, so both pass
}

// (even, odd) columns of 2L consecutive floats.
template <int L>
inline void split(const float* p, typename Lanes<L>::F* even, typename Lanes<L>::F* odd);

template <>
inline void split<4>(const float* p, Lanes<4>::F* even, Lanes<4>::F* odd) {
  Lanes<4>::F lo, hi;
  std::memcpy(&lo, p, 16);
  std::memcpy(&hi, p + 4, 16);
#if defined(__clang__)
  *even = __builtin_shufflevector(lo, hi, 0, 2, 4, 6);
  *odd = __builtin_shufflevector(lo, hi, 1, 3, 5, 7);
#else
  *even = __builtin_shuffle(lo, hi, Lanes<4>::I{0, 2, 4, 6});
  *odd = __builtin_shuffle(lo, hi, Lanes<4>::I{1, 3, 5, 7});
#endif
}

template <>
inline void split<8>(const float* p, Lanes<8>::F* even, Lanes<8>::F* odd) {
  Lanes<8>::F lo, hi;
  std::memcpy(&lo, p, 32);
  std::memcpy(&hi, p + 8, 32);
#if defined(__clang__)
  *even = __builtin_shufflevector(lo, hi, 0, 2, 4, 6, 8, 10, 12, 14);
  *odd = __builtin_shufflevector(lo, hi, 1, 3, 5, 7, 9, 11, 13, 15);
#else
  *even = __builtin_shuffle(lo, hi, Lanes<8>::I{0, 2, 4, 6, 8, 10, 12, 14});
  *odd = __builtin_shuffle(lo, hi, Lanes<8>::I{1, 3, 5, 7, 9, 11, 13, 15});
#endif
}

// Windows j .. j + L - 1 of one output row (row0, row1: the input rows 2i and 2i + 1).
template <int L, bool kRelu>
inline void windows(const float* row0, const float* row1, float* out, uint8_t* route) {
  using F = typename Lanes<L>::F;
  using I = typename Lanes<L>::I;
  F a, b, c, d;
  split<L>(row0, &a, &b);
  split<L>(row1, &c, &d);
  const F v0 = kRelu ? vrelu<L>(a) : a, v1 = kRelu ? vrelu<L>(b) : b;
  const F v2 = kRelu ? vrelu<L>(c) : c, v3 = kRelu ? vrelu<L>(d) : d;
  F m = v0;
  I q = {};  // window corner 0
  const I t1 = (v1 > m) | (v1 != v1);
  m = vselect<L>(t1, v1, m);
  q = (q & ~t1) | (1 & t1);
  const I t2 = (v2 > m) | (v2 != v2);
  m = vselect<L>(t2, v2, m);
  q = (q & ~t2) | (2 & t2);
  const I t3 = (v3 > m) | (v3 != v3);
  m = vselect<L>(t3, v3, m);
  q = (q & ~t3) | (3 & t3);
  if (kRelu) {
    const I pos = ~(m <= 0.f);
    q = (q & pos) | (static_cast<int32_t>(kNowhere) & ~pos);
  }
  std::memcpy(out, &m, 4 * L);
  const typename Lanes<L>::B rb = __builtin_convertvector(q, typename Lanes<L>::B);
  std::memcpy(route, &rb, L);
}
#endif

// One output row: w windows from the input rows row0 and row1.
template <bool kRelu>
inline void pool_row(const float* row0, const float* row1, float* out, uint8_t* route, int64_t w) {
  int64_t j = 0;
#if defined(__GNUC__) || defined(__clang__)
#if defined(__AVX__)
  for (; j + 8 <= w; j += 8) windows<8, kRelu>(row0 + 2 * j, row1 + 2 * j, out + j, route + j);
#endif
  // 4 lanes is SSE, which every x86-64 has (8 lanes without AVX would be emulated: 6x slower)
  for (; j + 4 <= w; j += 4) windows<4, kRelu>(row0 + 2 * j, row1 + 2 * j, out + j, route + j);
#endif
  for (; j < w; ++j) window<kRelu>(row0[2 * j], row0[2 * j + 1], row1[2 * j], row1[2 * j + 1], out + j, route + j);
}

// The backward of one window: its 2 x 2 gradients, g at the routed corner and 0 elsewhere. 0 + g, as PyTorch's
// max-pool backward accumulates into zeros (so a -0.0 arrives as +0.0, as there).
inline void unroute(float g, uint8_t q, float* row0, float* row1) {
  const float v = 0.f + g;
  row0[0] = select(q == 0, v, 0.f);
  row0[1] = select(q == 1, v, 0.f);
  row1[0] = select(q == 2, v, 0.f);
  row1[1] = select(q == 3, v, 0.f);
}

#if defined(__GNUC__) || defined(__clang__)
// (lo, hi): a and b interleaved, a0 b0 a1 b1 ... (the inverse of split).
template <int L>
inline void interleave(typename Lanes<L>::F a, typename Lanes<L>::F b, float* p);

template <>
inline void interleave<4>(Lanes<4>::F a, Lanes<4>::F b, float* p) {
#if defined(__clang__)
  const Lanes<4>::F lo = __builtin_shufflevector(a, b, 0, 4, 1, 5), hi = __builtin_shufflevector(a, b, 2, 6, 3, 7);
#else
  const Lanes<4>::F lo = __builtin_shuffle(a, b, Lanes<4>::I{0, 4, 1, 5});
  const Lanes<4>::F hi = __builtin_shuffle(a, b, Lanes<4>::I{2, 6, 3, 7});
#endif
  std::memcpy(p, &lo, 16);
  std::memcpy(p + 4, &hi, 16);
}

template <>
inline void interleave<8>(Lanes<8>::F a, Lanes<8>::F b, float* p) {
#if defined(__clang__)
  const Lanes<8>::F lo = __builtin_shufflevector(a, b, 0, 8, 1, 9, 2, 10, 3, 11);
  const Lanes<8>::F hi = __builtin_shufflevector(a, b, 4, 12, 5, 13, 6, 14, 7, 15);
#else
  const Lanes<8>::F lo = __builtin_shuffle(a, b, Lanes<8>::I{0, 8, 1, 9, 2, 10, 3, 11});
  const Lanes<8>::F hi = __builtin_shuffle(a, b, Lanes<8>::I{4, 12, 5, 13, 6, 14, 7, 15});
#endif
  std::memcpy(p, &lo, 32);
  std::memcpy(p + 8, &hi, 32);
}

// The backward of windows j .. j + L - 1 of one output row.
template <int L>
inline void unroute_windows(const float* g, const uint8_t* route, float* row0, float* row1) {
  using F = typename Lanes<L>::F;
  using I = typename Lanes<L>::I;
  F v;
  std::memcpy(&v, g, 4 * L);
  v = v + 0.f;
  typename Lanes<L>::B rb;
  std::memcpy(&rb, route, L);
  const I r = __builtin_convertvector(rb, I);
  const F zero = {};
  interleave<L>(vselect<L>(r == 0, v, zero), vselect<L>(r == 1, v, zero), row0);
  interleave<L>(vselect<L>(r == 2, v, zero), vselect<L>(r == 3, v, zero), row1);
}
#endif

// The backward of one output row: w windows into the input rows row0 and row1.
inline void unroute_row(const float* g, const uint8_t* route, float* row0, float* row1, int64_t w) {
  int64_t j = 0;
#if defined(__GNUC__) || defined(__clang__)
#if defined(__AVX__)
  for (; j + 8 <= w; j += 8) unroute_windows<8>(g + j, route + j, row0 + 2 * j, row1 + 2 * j);
#endif
  for (; j + 4 <= w; j += 4) unroute_windows<4>(g + j, route + j, row0 + 2 * j, row1 + 2 * j);
#endif
  for (; j < w; ++j) unroute(g[j], route[j], row0 + 2 * j, row1 + 2 * j);
}

}  // namespace

template <bool kRelu>
std::tuple<at::Tensor, at::Tensor> pool2x2_cpu(const char* name, const at::Tensor& x) {
  check_map(name, x, "x", at::kFloat);
  const int64_t n = x.size(0), c = x.size(1), H = x.size(2), W = x.size(3), h = H / 2, w = W / 2;
  TORCH_CHECK(h >= 1 && w >= 1, "fda_ray.", name, ": x must be at least 2 x 2 per map, got ", H, " x ", W);
  at::Tensor out = at::empty({n, c, h, w}, x.options());
  at::Tensor route = at::empty({n, c, h, w}, x.options().dtype(at::kByte));
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  uint8_t* rp = route.data_ptr<uint8_t>();
  at::parallel_for(0, n * c, grain(H * W), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const float* src = xp + p * H * W;
      float* dst = op + p * h * w;
      uint8_t* r = rp + p * h * w;
      for (int64_t i = 0; i < h; ++i) {
        const float* row0 = src + 2 * i * W;
        pool_row<kRelu>(row0, row0 + W, dst + i * w, r + i * w, w);
      }
    }
  });
  return {out, route};
}

std::tuple<at::Tensor, at::Tensor> relu_max_pool2x2_cpu(const at::Tensor& x) {
  return pool2x2_cpu<true>("relu_max_pool2x2", x);
}

std::tuple<at::Tensor, at::Tensor> max_pool2x2_cpu(const at::Tensor& x) { return pool2x2_cpu<false>("max_pool2x2", x); }

at::Tensor relu_max_pool2x2_backward_cpu(const at::Tensor& grad, const at::Tensor& route, int64_t H, int64_t W) {
  check_map("relu_max_pool2x2_backward", grad, "grad", at::kFloat);
  check_map("relu_max_pool2x2_backward", route, "route", at::kByte);
  TORCH_CHECK(grad.sizes() == route.sizes(), "fda_ray.relu_max_pool2x2_backward: grad has shape ", grad.sizes(),
              " but route has ", route.sizes());
  const int64_t n = grad.size(0), c = grad.size(1), h = grad.size(2), w = grad.size(3);
  TORCH_CHECK(H / 2 == h && W / 2 == w, "fda_ray.relu_max_pool2x2_backward: an input of ", H, " x ", W,
              " pools to ", H / 2, " x ", W / 2, ", not ", h, " x ", w);
  // every element of a window is written; an odd map's last row or column belongs to none, and is 0
  at::Tensor gx = (H % 2 || W % 2) ? at::zeros({n, c, H, W}, grad.options()) : at::empty({n, c, H, W}, grad.options());
  const float* gp = grad.data_ptr<float>();
  const uint8_t* rp = route.data_ptr<uint8_t>();
  float* xp = gx.data_ptr<float>();
  at::parallel_for(0, n * c, grain(H * W), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const float* g = gp + p * h * w;
      const uint8_t* r = rp + p * h * w;
      float* dst = xp + p * H * W;
      for (int64_t i = 0; i < h; ++i) {
        float* row0 = dst + 2 * i * W;
        unroute_row(g + i * w, r + i * w, row0, row0 + W, w);
      }
    }
  });
  return gx;
}

TORCH_LIBRARY_FRAGMENT(fda_ray, m) {
  m.def("relu_max_pool2x2(Tensor x) -> (Tensor, Tensor)");
  m.def("max_pool2x2(Tensor x) -> (Tensor, Tensor)");
  m.def("relu_max_pool2x2_backward(Tensor grad, Tensor route, int H, int W) -> Tensor");
}

TORCH_LIBRARY_IMPL(fda_ray, CPU, m) {
  m.impl("relu_max_pool2x2", &relu_max_pool2x2_cpu);
  m.impl("max_pool2x2", &max_pool2x2_cpu);
  m.impl("relu_max_pool2x2_backward", &relu_max_pool2x2_backward_cpu);
}

}  // namespace fda_ray
