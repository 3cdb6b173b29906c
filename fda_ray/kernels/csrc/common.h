// Shared by the CPU and the CUDA implementation: input checks and the segment table.
//
// The flat vectors are split into segments: each layer [offsets[l], offsets[l+1]) is cut into pieces of at
// most `chunk` elements. A segment belongs to exactly one layer, so per-segment partial sums reduce to
// per-layer sums in a fixed order: results do not depend on the number of threads or blocks.
#pragma once

// ATen and the operator registry only: the ops are registered with TORCH_LIBRARY and loaded as a plain library
// (no Python module), so torch/extension.h (all of torch's C++ API and pybind11) is not needed, and including it
// made the first build take 2.5 times as long (20 s against 7 s for the C++ kernel, on a 2-core machine).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstdint>
#include <vector>

namespace fda_ray {

struct Segments {
  std::vector<int64_t> start;  // (S,) first flat index
  std::vector<int64_t> end;    // (S,) one past the last
  std::vector<int64_t> layer;  // (S,) layer of the segment
  std::vector<int64_t> first;  // (L + 1,) segments of layer l are first[l] .. first[l + 1] - 1
};

inline void check_flat(const char* op, const at::Tensor& t, const char* name, int64_t dim) {
  TORCH_CHECK(t.dim() == dim, "fda_ray.", op, ": ", name, " must be a ", dim, "-D tensor, got shape ", t.sizes());
  TORCH_CHECK(t.scalar_type() == at::kFloat, "fda_ray.", op, ": ", name, " must be float32, got ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "fda_ray.", op, ": ", name, " must be contiguous (call .contiguous())");
}

// target (M,), sources (N, M), offsets (L + 1,) int64: validated, returns the offsets on the CPU.
inline at::Tensor check_layer_inputs(const char* op, const at::Tensor& target, const at::Tensor& sources,
                                     const at::Tensor& offsets) {
  check_flat(op, target, "target", 1);
  check_flat(op, sources, "sources", 2);
  TORCH_CHECK(sources.size(1) == target.size(0), "fda_ray.", op, ": sources has M=", sources.size(1),
              " parameters per row but target has M=", target.size(0));
  TORCH_CHECK(sources.size(0) >= 1, "fda_ray.", op, ": sources must hold at least one source (N >= 1)");
  TORCH_CHECK(sources.device() == target.device(), "fda_ray.", op, ": target and sources must be on one device, got ",
              target.device(), " and ", sources.device());
  TORCH_CHECK(offsets.dim() == 1 && offsets.scalar_type() == at::kLong, "fda_ray.", op,
              ": offsets must be a 1-D int64 tensor (L + 1,), got ", offsets.scalar_type(), " of shape ", offsets.sizes());
  TORCH_CHECK(offsets.numel() >= 2, "fda_ray.", op, ": offsets must hold at least 2 entries (one layer), got ",
              offsets.numel());
  at::Tensor o = offsets.to(at::kCPU).contiguous();
  const int64_t* p = o.data_ptr<int64_t>();
  const int64_t m = target.size(0), n_off = o.numel();
  TORCH_CHECK(p[0] == 0 && p[n_off - 1] == m, "fda_ray.", op, ": offsets must start at 0 and end at M=", m,
              ", got first ", p[0], " and last ", p[n_off - 1]);
  for (int64_t l = 1; l < n_off; ++l) {
    TORCH_CHECK(p[l] >= p[l - 1], "fda_ray.", op, ": offsets must be non-decreasing, got ", p[l - 1], " then ", p[l],
                " at index ", l);
  }
  return o;
}

// target_steps (B, M), sources (N, M): float32, contiguous, one device, B, N >= 1.
inline void check_gram_inputs(const char* op, const at::Tensor& target_steps, const at::Tensor& sources) {
  check_flat(op, target_steps, "target_steps", 2);
  check_flat(op, sources, "sources", 2);
  TORCH_CHECK(sources.size(1) == target_steps.size(1), "fda_ray.", op, ": sources has M=", sources.size(1),
              " parameters per row but target_steps has M=", target_steps.size(1));
  TORCH_CHECK(target_steps.size(0) >= 1 && sources.size(0) >= 1, "fda_ray.", op,
              ": need B >= 1 target steps and N >= 1 sources, got B=", target_steps.size(0), ", N=", sources.size(0));
  TORCH_CHECK(sources.device() == target_steps.device(), "fda_ray.", op,
              ": target_steps and sources must be on one device, got ", target_steps.device(), " and ",
              sources.device());
}

// scale (N, L), floating point.
inline void check_scale(const char* op, const at::Tensor& scale, int64_t n, int64_t num_layers) {
  TORCH_CHECK(scale.dim() == 2 && scale.size(0) == n && scale.size(1) == num_layers, "fda_ray.", op,
              ": scale must have shape (N, L) = (", n, ", ", num_layers, "), got ", scale.sizes());
  TORCH_CHECK(at::isFloatingType(scale.scalar_type()), "fda_ray.", op, ": scale must be floating point, got ",
              scale.scalar_type());
}

inline Segments make_segments(const at::Tensor& offsets_cpu, int64_t chunk) {
  const int64_t* p = offsets_cpu.data_ptr<int64_t>();
  const int64_t num_layers = offsets_cpu.numel() - 1;
  Segments s;
  s.first.reserve(num_layers + 1);
  for (int64_t l = 0; l < num_layers; ++l) {
    s.first.push_back(static_cast<int64_t>(s.start.size()));
    for (int64_t a = p[l]; a < p[l + 1]; a += chunk) {
      s.start.push_back(a);
      s.end.push_back(std::min(a + chunk, p[l + 1]));
      s.layer.push_back(l);
    }
  }
  s.first.push_back(static_cast<int64_t>(s.start.size()));
  return s;
}

}  // namespace fda_ray
