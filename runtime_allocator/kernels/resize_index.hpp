// Resize's index map along one axis, shared by the CPU and CUDA kernels and their gradients (host and device code):
// an output coordinate's source coordinate (ONNX Resize's coordinate_transformation_mode, computed in float as
// ONNX Runtime does), and from it the nearest input element (nearest_mode) or the two linear taps and their weights.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime_allocator/kernels/dropout_mask.hpp"  // MEMPLAN_HOST_DEVICE

namespace memplan::runtime {

inline constexpr int kResizeMaxRank = 8;

enum class ResizeCoord : std::uint8_t {
  half_pixel,
  half_pixel_symmetric,
  pytorch_half_pixel,
  align_corners,
  asymmetric,
  tf_half_pixel_for_nn,
  tf_crop_and_resize
};
// `simple` is Upsample's (and opset 10 Resize's) rule: ceil when downsampling, else truncation.
enum class ResizeNearest : std::uint8_t { round_prefer_floor, round_prefer_ceil, floor, ceil, simple };

struct ResizeAxis {
  std::int64_t in = 1, out = 1;
  float scale = 1.0f;                      // output over input length: the scales input, or out / in from sizes
  float roi_start = 0.0f, roi_end = 1.0f;  // tf_crop_and_resize's region, normalized
};

struct ResizeMode {
  bool linear = false;  // else nearest
  ResizeCoord coord = ResizeCoord::half_pixel;
  ResizeNearest nearest = ResizeNearest::round_prefer_floor;
  float extrapolation = 0.0f;  // tf_crop_and_resize's value outside the input
};

// Output coordinate x's position in the input.
MEMPLAN_HOST_DEVICE inline float resize_source(ResizeCoord c, const ResizeAxis& a, std::int64_t x) {
  const float xr = static_cast<float>(x), s = a.scale, in = static_cast<float>(a.in), out = static_cast<float>(a.out);
  switch (c) {
    case ResizeCoord::half_pixel:
      return (xr + 0.5f) / s - 0.5f;
    case ResizeCoord::half_pixel_symmetric: {  // in double, then rounded once: ONNX Runtime's results at .5 ties
      const double sd = s, ind = in, adjustment = static_cast<double>(out) / (sd * ind);
      return static_cast<float>(ind / 2.0 * (1.0 - adjustment) + (static_cast<double>(xr) + 0.5) / sd - 0.5);
    }
    case ResizeCoord::pytorch_half_pixel:
      return a.out > 1 ? (xr + 0.5f) / s - 0.5f : 0.0f;
    case ResizeCoord::align_corners:
      return a.out == 1 ? 0.0f : xr * (in - 1.0f) / (out - 1.0f);
    case ResizeCoord::asymmetric:
      return xr / s;
    case ResizeCoord::tf_half_pixel_for_nn:
      return (xr + 0.5f) / s;
    case ResizeCoord::tf_crop_and_resize:
      return a.out > 1 ? a.roi_start * (in - 1.0f) + xr * (a.roi_end - a.roi_start) * (in - 1.0f) / (out - 1.0f)
                       : static_cast<float>(0.5 * static_cast<double>(a.roi_start + a.roi_end) * static_cast<double>(in - 1.0f));
  }
  return 0.0f;
}

// The input elements output coordinate x reads: i0 with weight w0 and i1 with weight w1 (nearest: i1 = i0, w1 = 0);
// `outside` where tf_crop_and_resize samples outside the input (the extrapolation value).
struct ResizeTap {
  std::int64_t i0 = 0, i1 = 0;
  float w0 = 1.0f, w1 = 0.0f;
  bool outside = false;
};

MEMPLAN_HOST_DEVICE inline ResizeTap resize_tap(const ResizeMode& m, const ResizeAxis& a, std::int64_t x) {
  ResizeTap t;
  if (a.scale == 1.0f && a.in == a.out && m.coord != ResizeCoord::tf_crop_and_resize) {  // an axis not resized: itself
    t.i0 = t.i1 = x;
    return t;
  }
  float src = resize_source(m.coord, a, x);
  const float last = static_cast<float>(a.in - 1);
  if (m.coord == ResizeCoord::tf_crop_and_resize && (src < 0.0f || src > last)) {
    t.outside = true;
    return t;
  }
  if (!m.linear) {
    std::int64_t i = 0;
    switch (m.nearest) {
      case ResizeNearest::round_prefer_floor:
        i = src == static_cast<float>(static_cast<std::int64_t>(src)) + 0.5f ? static_cast<std::int64_t>(floorf(src))
                                                                             : static_cast<std::int64_t>(roundf(src));
        break;
      case ResizeNearest::round_prefer_ceil:
        i = static_cast<std::int64_t>(roundf(src));
        break;
      case ResizeNearest::floor:
        i = static_cast<std::int64_t>(floorf(src));
        break;
      case ResizeNearest::ceil:
        i = static_cast<std::int64_t>(ceilf(src));
        break;
      case ResizeNearest::simple:
        i = a.scale < 1.0f ? static_cast<std::int64_t>(ceilf(src)) : static_cast<std::int64_t>(src);
        break;
    }
    i = i < 0 ? 0 : i > a.in - 1 ? a.in - 1 : i;
    t.i0 = t.i1 = i;
    return t;
  }
  src = src < 0.0f ? 0.0f : src > last ? last : src;
  t.i0 = static_cast<std::int64_t>(src);
  if (t.i0 > a.in - 1) t.i0 = a.in - 1;
  t.i1 = t.i0 + 1 > a.in - 1 ? a.in - 1 : t.i0 + 1;
  if (t.i0 == t.i1) {
    t.w0 = t.w1 = 0.5f;
  } else {
    t.w0 = fabsf(src - static_cast<float>(t.i1));
    t.w1 = fabsf(src - static_cast<float>(t.i0));
  }
  return t;
}

}  // namespace memplan::runtime
