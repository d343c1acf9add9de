// Pad's index map along one axis, shared by the CPU and CUDA kernels (host and device code). ONNX Pad crops first
// (negative pads) and then pads the cropped tensor: along an axis of n elements with pads (begin, end), the cropped
// range is [lo, lo + m) with lo = max(-begin, 0), m = n - lo - max(-end, 0), and output coordinate i reads cropped
// element s = i - max(begin, 0), mapped into [0, m) by the mode. pad_preimage inverts that map (PadGrad).
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

// The output coordinates along axis `a` (of out_len elements) that read input index x: pad_source's preimage, which
// PadGrad sums. At most two ascending arithmetic progressions (a reflection reads an inner element from
// both directions); empty for an element that was cropped away.
struct PadPreimage {
  std::int64_t first[2] = {0, 0}, step[2] = {1, 1}, count[2] = {0, 0};
  MEMPLAN_HOST_DEVICE std::int64_t size() const { return count[0] + count[1]; }
  MEMPLAN_HOST_DEVICE std::int64_t at(std::int64_t k) const {
    return k < count[0] ? first[0] + k * step[0] : first[1] + (k - count[0]) * step[1];
  }
};

namespace pad_detail {
// The s = r + k * period (k any integer) in [s0, s1), as output coordinates s + shift, into part `p` of `pre`.
MEMPLAN_HOST_DEVICE inline void congruent(PadPreimage& pre, int p, std::int64_t r, std::int64_t period, std::int64_t s0,
                                          std::int64_t s1, std::int64_t shift) {
  std::int64_t k = s0 - r;  // smallest s >= s0 with s == r (mod period)
  k = k >= 0 ? (k + period - 1) / period : -((-k) / period);
  const std::int64_t s = r + k * period;
  pre.first[p] = s + shift;
  pre.step[p] = period;
  pre.count[p] = s < s1 ? (s1 - 1 - s) / period + 1 : 0;
}
}  // namespace pad_detail

MEMPLAN_HOST_DEVICE inline PadPreimage pad_preimage(PadMode mode, const PadAxis& a, std::int64_t out_len, std::int64_t x) {
  PadPreimage pre;
  const std::int64_t t = x - a.lo, s0 = -a.shift, s1 = out_len - a.shift;  // cropped index; s ranges over [s0, s1)
  if (t < 0 || t >= a.m) return pre;
  const bool whole = a.m == 1 && mode != PadMode::constant;  // one element: every coordinate reads it
  if (mode == PadMode::constant || whole || (mode == PadMode::edge && t > 0 && t < a.m - 1)) {
    pre.first[0] = whole ? 0 : t + a.shift;
    pre.count[0] = whole ? out_len : 1;
  } else if (mode == PadMode::edge) {  // a border: itself and every coordinate beyond it
    pre.first[0] = t == 0 ? 0 : t + a.shift;
    pre.count[0] = t == 0 ? a.shift + 1 : out_len - (t + a.shift);
  } else if (mode == PadMode::wrap) {
    pad_detail::congruent(pre, 0, t, a.m, s0, s1, a.shift);
  } else {  // reflect: period 2 (m - 1), read as t and as its mirror
    const std::int64_t period = 2 * (a.m - 1);
    pad_detail::congruent(pre, 0, t, period, s0, s1, a.shift);
    if (t > 0 && t < a.m - 1) pad_detail::congruent(pre, 1, period - t, period, s0, s1, a.shift);
  }
  return pre;
}

}  // namespace memplan::runtime
