// Resize and Upsample read from their attributes and inputs (ONNX opsets 7-19) into resize_index.hpp's per-axis
// terms, for the CPU and CUDA kernels and memplan::ResizeGrad.
#pragma once

#include <cstdint>
#include <vector>

#include "analysis/graph.hpp"
#include "runtime_allocator/kernels/resize_index.hpp"

namespace memplan::runtime {

struct ResizeGeometry {
  ResizeMode mode;
  std::vector<ResizeAxis> axes;  // one per axis of x
};

// Upsample and opset-10 Resize (two inputs) read scales from input 1 (or Upsample-7's attribute), use asymmetric
// coordinates and the `simple` nearest rule; memplan::ResizeGrad says so with its attribute `legacy`.
bool resize_legacy_layout(const analysis::Op& op);
// The input holding scales (1 legacy, 2 from opset 11), roi's (1, or none when legacy).
std::size_t resize_scales_input(const analysis::Op& op);
// `roi` and `scales`: those inputs' values (empty when absent or empty). ErrorKind::unsupported naming the op for what
// the kernels do not compute: antialias, keep_aspect_ratio_policy other than stretch, rank above 8.
ResizeGeometry resize_geometry(const analysis::Op& op, const std::vector<std::int64_t>& in, const std::vector<std::int64_t>& out,
                               const std::vector<double>& roi, const std::vector<double>& scales);

}  // namespace memplan::runtime
