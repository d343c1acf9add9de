// ConvTranspose's padding resolved to explicit pads, shared by its kernels (CPU, cuDNN) and its backward rule.
#pragma once

#include <cstdint>
#include <vector>

#include "analysis/graph.hpp"

namespace memplan::analysis {

// ConvTranspose from X [N, C, in...] to Y [N, M, out...] (Y's shape already inferred) is the input gradient of
// the convolution from Y to X; its pads (begin..., end...) are that convolution's. With output_shape or a SAME
// auto_pad they come from the total padding s*(in-1) + output_padding + (k-1)*d + 1 - out (ONNX's rule: SAME_UPPER
// puts the odd unit at the end, SAME_LOWER and NOTSET at the beginning; a negative total pads nothing at the
// beginning). The end pads may be negative: Y extends past the last window.
std::vector<std::int64_t> conv_transpose_pads(const Op& op, const std::vector<std::int64_t>& x,
                                              const std::vector<std::int64_t>& y, const std::vector<std::int64_t>& kernel);

}  // namespace memplan::analysis
