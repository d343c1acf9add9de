// Pad's index map along one axis, shared by the CPU and CUDA kernels (host and device code). ONNX Pad crops first
// (negative pads) and then pads the cropped tensor: along an axis of n elements with pads (begin, end), the cropped
// range is [lo, lo + m) with lo = max(-begin, 0), m = n - lo - max(-end, 0), and output coordinate i reads cropped
// element s = i - max(begin, 0), mapped into [0, m) by the mode.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "runtime_allocator/kernels/dropout_mask.hpp"  // MEMPLAN_HOST_DEVICE

namespace memplan::runtime {

enum class PadMode : std::uint8_t { constant, reflect, edge, wrap };

struct PadAxis {
  std::int64_t lo = 0;     // first input element kept
  std::int64_t m = 0;      // input elements kept (after cropping)
  std::int64_t shift = 0;  // output elements before the first kept one: max(begin, 0)
};

inline PadAxis pad_axis(std::int64_t n, std::int64_t begin, std::int64_t end) {
  PadAxis a;
  a.lo = begin < 0 ? -begin : 0;
  a.m = n - a.lo - (end < 0 ? -end : 0);
  if (a.m < 0) a.m = 0;
  a.shift = begin > 0 ? begin : 0;
  return a;
}

// The mode attribute's value; false for an unknown mode.
inline bool parse_pad_mode(std::string_view s, PadMode& mode) {
  if (s == "constant") mode = PadMode::constant;
  else if (s == "reflect") mode = PadMode::reflect;
  else if (s == "edge") mode = PadMode::edge;
  else if (s == "wrap") mode = PadMode::wrap;
  else return false;
  return true;
}

// Every axis of an input of dims `in` given `pads` ([begin..., end...] over `axes`, all axes when empty; axes already
// normalized to [0, rank)); empty when pads and axes do not match.
inline std::vector<PadAxis> pad_axes(const std::vector<std::int64_t>& in, const std::vector<std::int64_t>& pads,
                                     std::vector<std::int64_t> axes) {
  if (axes.empty())
    for (std::size_t k = 0; k < in.size(); ++k) axes.push_back(static_cast<std::int64_t>(k));
  if (pads.size() != 2 * axes.size()) return {};
  std::vector<std::int64_t> begin(in.size(), 0), end(in.size(), 0);
  for (std::size_t k = 0; k < axes.size(); ++k) {
    begin[static_cast<std::size_t>(axes[k])] = pads[k];
    end[static_cast<std::size_t>(axes[k])] = pads[k + axes.size()];
  }
  std::vector<PadAxis> out;
  for (std::size_t k = 0; k < in.size(); ++k) out.push_back(pad_axis(in[k], begin[k], end[k]));
  return out;
}

// The input index that output coordinate i reads along axis `a`, or -1 where constant mode writes the pad value.
// reflect mirrors without repeating the edge (m == 1 repeats it), edge repeats the border, wrap is periodic.
// The caller rejects m == 0 outside constant mode.
MEMPLAN_HOST_DEVICE inline std::int64_t pad_source(PadMode mode, const PadAxis& a, std::int64_t i) {
  std::int64_t s = i - a.shift;
  if (s >= 0 && s < a.m) return a.lo + s;
  switch (mode) {
    case PadMode::constant: return -1;
    case PadMode::edge: s = s < 0 ? 0 : a.m - 1; break;
    case PadMode::wrap: s = ((s % a.m) + a.m) % a.m; break;
    case PadMode::reflect:
      if (a.m == 1) {
        s = 0;
        break;
      }
      s = s % (2 * (a.m - 1));  // period of the mirror
      if (s < 0) s += 2 * (a.m - 1);
      if (s >= a.m) s = 2 * (a.m - 1) - s;
      break;
  }
  return a.lo + s;
}

}  // namespace memplan::runtime
