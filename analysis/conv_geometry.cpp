// ConvTranspose's explicit pads from its attributes and the shapes of X and Y (see conv_geometry.hpp).
#include "analysis/conv_geometry.hpp"

#include <algorithm>

#include "analysis/error.hpp"

namespace memplan::analysis {

std::vector<std::int64_t> conv_transpose_pads(const Op& op, const std::vector<std::int64_t>& x,
                                              const std::vector<std::int64_t>& y, const std::vector<std::int64_t>& kernel) {
  const std::size_t n = kernel.size();
  auto bad = [&](const std::string& what) -> std::vector<std::int64_t> {
    fail(ErrorKind::shape, "op '" + op.name + "' (ConvTranspose): " + what);
  };
  if (x.size() != n + 2 || y.size() != n + 2) return bad("X and Y must have " + std::to_string(n) + " spatial dims");
  const std::string mode = op.attr_string("auto_pad", "NOTSET");
  const auto strides = op.attr_ints("strides", std::vector<std::int64_t>(n, 1)), dil = op.attr_ints("dilations", std::vector<std::int64_t>(n, 1));
  const auto out_pad = op.attr_ints("output_padding", std::vector<std::int64_t>(n, 0));
  if (strides.size() != n || dil.size() != n || out_pad.size() != n) return bad("strides/dilations/output_padding length");
  std::vector<std::int64_t> pads(2 * n, 0);
  if (mode == "VALID") return pads;
  const bool same = mode == "SAME_UPPER" || mode == "SAME_LOWER";
  if (!same && op.attr_ints("output_shape").empty()) {
    pads = op.attr_ints("pads", pads);
    if (pads.size() != 2 * n) return bad("pads has the wrong length");
    return pads;
  }
  for (std::size_t k = 0; k < n; ++k) {
    const std::int64_t total = strides[k] * (x[2 + k] - 1) + out_pad[k] + (kernel[k] - 1) * dil[k] + 1 - y[2 + k];
    const std::int64_t begin = total <= 0 ? 0 : mode == "SAME_UPPER" ? total / 2 : total - total / 2;
    pads[k] = begin;
    pads[k + n] = total - begin;
  }
  return pads;
}

}  // namespace memplan::analysis
