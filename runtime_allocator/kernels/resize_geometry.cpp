// Resize's attributes and inputs into per-axis resampling terms (see resize_geometry.hpp).
#include "runtime_allocator/kernels/resize_geometry.hpp"

#include "analysis/error.hpp"

namespace memplan::runtime {
namespace {

[[noreturn]] void refuse(const analysis::Op& op, const std::string& what) {
  fail(ErrorKind::unsupported, "op '" + op.name + "' (" + op.type + "): " + what);
}

ResizeCoord coord_of(const analysis::Op& op) {
  const std::string c = op.attr_string("coordinate_transformation_mode", "half_pixel");
  if (c == "half_pixel") return ResizeCoord::half_pixel;
  if (c == "half_pixel_symmetric") return ResizeCoord::half_pixel_symmetric;
  if (c == "pytorch_half_pixel") return ResizeCoord::pytorch_half_pixel;
  if (c == "align_corners") return ResizeCoord::align_corners;
  if (c == "asymmetric") return ResizeCoord::asymmetric;
  if (c == "tf_half_pixel_for_nn") return ResizeCoord::tf_half_pixel_for_nn;
  if (c == "tf_crop_and_resize") return ResizeCoord::tf_crop_and_resize;
  refuse(op, "coordinate_transformation_mode '" + c + "'");
}

ResizeNearest nearest_of(const analysis::Op& op) {
  const std::string n = op.attr_string("nearest_mode", "round_prefer_floor");
  if (n == "round_prefer_floor") return ResizeNearest::round_prefer_floor;
  if (n == "round_prefer_ceil") return ResizeNearest::round_prefer_ceil;
  if (n == "floor") return ResizeNearest::floor;
  if (n == "ceil") return ResizeNearest::ceil;
  refuse(op, "nearest_mode '" + n + "'");
}

// The interpolation and coordinate rules of the op's attributes (legacy: Upsample's and opset-10 Resize's fixed ones).
ResizeMode mode_of(const analysis::Op& op, bool legacy) {
  ResizeMode m;
  const std::string mode = op.attr_string("mode", "nearest");
  if (mode == "linear" || mode == "bilinear") {
    m.linear = true;
  } else if (mode == "cubic" || mode == "bicubic") {
    m.cubic = true;
    m.cubic_a = static_cast<float>(op.attr_float("cubic_coeff_a", -0.75));
    m.exclude_outside = op.attr_int("exclude_outside", 0) != 0;
  } else if (mode != "nearest") {
    refuse(op, "mode '" + mode + "' (nearest, linear and cubic only)");
  }
  if (legacy) {
    m.coord = ResizeCoord::asymmetric;
    m.nearest = ResizeNearest::simple;
    return m;
  }
  m.coord = coord_of(op);
  m.nearest = nearest_of(op);
  m.extrapolation = static_cast<float>(op.attr_float("extrapolation_value", 0.0));
  if (op.attr_int("antialias", 0) != 0) refuse(op, "antialias");
  if (op.attr_string("keep_aspect_ratio_policy", "stretch") != "stretch") refuse(op, "keep_aspect_ratio_policy other than stretch");
  return m;
}

}  // namespace

bool resize_legacy_layout(const analysis::Op& op) {
  if (op.type == "ResizeGrad") return op.attr_int("legacy", 0) != 0;
  return op.type == "Upsample" || op.inputs.size() == 2;
}

std::size_t resize_scales_input(const analysis::Op& op) { return resize_legacy_layout(op) ? 1 : 2; }

ResizeGeometry resize_geometry(const analysis::Op& op, const std::vector<std::int64_t>& in, const std::vector<std::int64_t>& out,
                               const std::vector<double>& roi, const std::vector<double>& scales) {
  const std::size_t r = in.size();
  if (r > static_cast<std::size_t>(kResizeMaxRank)) refuse(op, "rank above 8");
  if (out.size() != r) refuse(op, "x and y of one rank expected");
  const bool legacy = resize_legacy_layout(op);
  ResizeGeometry g;
  g.mode = mode_of(op, legacy);
  std::vector<double> given = scales;
  if (given.empty() && op.attr("scales")) given = op.attr("scales")->floats;  // Upsample-7
  std::vector<std::size_t> axes;
  for (auto a : op.attr_ints("axes")) axes.push_back(static_cast<std::size_t>(a < 0 ? a + static_cast<std::int64_t>(r) : a));
  if (axes.empty())
    for (std::size_t k = 0; k < r; ++k) axes.push_back(k);
  if (!given.empty() && given.size() != axes.size()) refuse(op, "one scale per resized axis expected");
  if (!roi.empty() && roi.size() != 2 * axes.size()) refuse(op, "roi of a start and an end per resized axis expected");
  g.axes.resize(r);
  for (std::size_t k = 0; k < r; ++k) {
    g.axes[k].in = in[k];
    g.axes[k].out = out[k];
    g.axes[k].scale = in[k] ? static_cast<float>(out[k]) / static_cast<float>(in[k]) : 1.0f;
  }
  for (std::size_t j = 0; j < axes.size(); ++j) {
    if (axes[j] >= r) refuse(op, "axis out of range");
    ResizeAxis& a = g.axes[axes[j]];
    if (!given.empty()) a.scale = static_cast<float>(given[j]);
    if (!roi.empty()) {
      a.roi_start = static_cast<float>(roi[j]);
      a.roi_end = static_cast<float>(roi[j + axes.size()]);
    }
    if (!(a.scale > 0.0f)) refuse(op, "a scale that is not positive");
  }
  return g;
}

}  // namespace memplan::runtime
