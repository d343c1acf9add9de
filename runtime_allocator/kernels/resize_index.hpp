// Resize's index map along one axis, shared by the CPU and CUDA kernels and their gradients (host and device code):
// an output coordinate's source coordinate (ONNX Resize's coordinate_transformation_mode, computed in float as
// ONNX Runtime does), and from it the nearest input element (nearest_mode), the two linear taps or the four cubic
// taps and their weights.
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
  bool linear = false;  // else nearest (or cubic)
  bool cubic = false;
  float cubic_a = -0.75f;        // cubic_coeff_a: PyTorch's bicubic (and ONNX's default)
  bool exclude_outside = false;  // cubic: taps outside the input weigh 0, the others renormalized
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

// The input elements output coordinate x reads: i[k] with weight w[k] for k < n (nearest and an axis not resized:
// one; linear: two; cubic: four, floor(src) - 1 to floor(src) + 2 clamped to the input as ONNX Runtime and PyTorch
// read the edge); `outside` where tf_crop_and_resize samples outside the input (the extrapolation value).
struct ResizeTap {
  std::int64_t i[4] = {0, 0, 0, 0};
  float w[4] = {1.0f, 0.0f, 0.0f, 0.0f};
  int n = 1;
  bool outside = false;
};

// Keys' cubic convolution weights of the four taps at distances 1 + s, s, 1 - s, 2 - s (ONNX Resize's cubic mode).
MEMPLAN_HOST_DEVICE inline void resize_cubic_taps(const ResizeMode& m, const ResizeAxis& a, float src, ResizeTap& t) {
  const float f = floorf(src), s = src - f, A = m.cubic_a;
  const float d[4] = {1.0f + s, s, 1.0f - s, 2.0f - s};
  float sum = 0.0f;
  for (int k = 0; k < 4; ++k) {
    const float x = d[k];
    t.w[k] = x <= 1.0f ? ((A + 2.0f) * x - (A + 3.0f)) * x * x + 1.0f : ((A * x - 5.0f * A) * x + 8.0f * A) * x - 4.0f * A;
    std::int64_t i = static_cast<std::int64_t>(f) - 1 + k;
    if (m.exclude_outside && (i < 0 || i > a.in - 1)) t.w[k] = 0.0f;
    sum += t.w[k];
    t.i[k] = i < 0 ? 0 : i > a.in - 1 ? a.in - 1 : i;
  }
  if (m.exclude_outside && sum != 0.0f)
    for (int k = 0; k < 4; ++k) t.w[k] /= sum;
  t.n = 4;
}

MEMPLAN_HOST_DEVICE inline ResizeTap resize_tap(const ResizeMode& m, const ResizeAxis& a, std::int64_t x) {
  ResizeTap t;
  if (a.scale == 1.0f && a.in == a.out && m.coord != ResizeCoord::tf_crop_and_resize) {  // an axis not resized: itself
    t.i[0] = x;
    return t;
  }
  float src = resize_source(m.coord, a, x);
  const float last = static_cast<float>(a.in - 1);
  if (m.coord == ResizeCoord::tf_crop_and_resize && (src < 0.0f || src > last)) {
    t.outside = true;
    return t;
  }
  if (m.cubic) {
    resize_cubic_taps(m, a, src, t);
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
    t.i[0] = i < 0 ? 0 : i > a.in - 1 ? a.in - 1 : i;
    return t;
  }
  src = src < 0.0f ? 0.0f : src > last ? last : src;
  t.n = 2;
  t.i[0] = static_cast<std::int64_t>(src);
  if (t.i[0] > a.in - 1) t.i[0] = a.in - 1;
  t.i[1] = t.i[0] + 1 > a.in - 1 ? a.in - 1 : t.i[0] + 1;
  if (t.i[0] == t.i[1]) {
    t.w[0] = t.w[1] = 0.5f;
  } else {
    t.w[0] = fabsf(src - static_cast<float>(t.i[1]));
    t.w[1] = fabsf(src - static_cast<float>(t.i[0]));
  }
  return t;
}

// Calls f(offset, weight) for each combination of the axes' taps (axis 0's varying fastest) whose weight is nonzero:
// the input offset it reads (`xs`: the input's strides) and the product of the taps' weights.
template <typename F>
MEMPLAN_HOST_DEVICE inline void resize_for_each_corner(int rank, const ResizeTap* taps, const std::int64_t* xs, F&& f) {
  std::int64_t corners = 1;
  for (int d = 0; d < rank; ++d) corners *= taps[d].n;
  for (std::int64_t c = 0; c < corners; ++c) {
    std::int64_t rest = c, off = 0;
    float w = 1.0f;
    for (int d = 0; d < rank && w != 0.0f; ++d) {
      const int k = static_cast<int>(rest % taps[d].n);
      rest /= taps[d].n;
      off += taps[d].i[k] * xs[d];
      w *= taps[d].w[k];
    }
    if (w != 0.0f) f(off, w);
  }
}

}  // namespace memplan::runtime
