// Spatial geometry of windowed ops (Conv, ConvTranspose, pools and their gradients) over 1 to 3 spatial axes.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "analysis/graph.hpp"

namespace memplan::runtime::cpu {

// The spatial axes are right-aligned in three slots: a 1-D op uses slot 2, a 2-D op slots 1 and 2; unused slots
// are one wide and unpadded. "in" is the convolution's input side, "out" its output side (a gradient's dX and dY,
// ConvTranspose's Y and X).
struct Window {
  static constexpr std::size_t kSlots = 3;
  using Axes = std::array<std::int64_t, kSlots>;
  std::int64_t N = 1, C = 1, OC = 1;
  Axes in{1, 1, 1}, out{1, 1, 1}, k{1, 1, 1}, stride{1, 1, 1}, dil{1, 1, 1}, pad{0, 0, 0}, pad_end{0, 0, 0};
  std::int64_t in_plane() const { return in[0] * in[1] * in[2]; }
  std::int64_t out_plane() const { return out[0] * out[1] * out[2]; }
  std::int64_t kernel_size() const { return k[0] * k[1] * k[2]; }
};

// The window from x's and y's dims ([N, C, spatial...]), kernel extents and pads (begin..., end...); strides and
// dilations from the op's attributes. Unsupported (naming the op) for other than 1 to 3 spatial axes or
// attributes of the wrong length.
Window make_window(const analysis::Op& op, const std::vector<std::int64_t>& x, const std::vector<std::int64_t>& y,
                   const std::vector<std::int64_t>& kernel, const std::vector<std::int64_t>& pads);

// Calls f(tap, o, i) for each kernel tap (flat over k), output position o and input position i (flat over their
// planes) the window pairs, skipping taps that fall into padding. The inner loop runs along the last axis.
template <class F>
void for_each_tap(const Window& w, F&& f) {
  std::int64_t tap = 0;
  for (std::int64_t a = 0; a < w.k[0]; ++a)
    for (std::int64_t r = 0; r < w.k[1]; ++r)
      for (std::int64_t s = 0; s < w.k[2]; ++s, ++tap)
        for (std::int64_t od = 0; od < w.out[0]; ++od) {
          const std::int64_t id = od * w.stride[0] - w.pad[0] + a * w.dil[0];
          if (id < 0 || id >= w.in[0]) continue;
          for (std::int64_t oh = 0; oh < w.out[1]; ++oh) {
            const std::int64_t ih = oh * w.stride[1] - w.pad[1] + r * w.dil[1];
            if (ih < 0 || ih >= w.in[1]) continue;
            const std::int64_t obase = (od * w.out[1] + oh) * w.out[2], ibase = (id * w.in[1] + ih) * w.in[2];
            for (std::int64_t ow = 0; ow < w.out[2]; ++ow) {
              const std::int64_t iw = ow * w.stride[2] - w.pad[2] + s * w.dil[2];
              if (iw >= 0 && iw < w.in[2]) f(tap, obase + ow, ibase + iw);
            }
          }
        }
}

// Calls f(o, i, inside) for output position o and each tap of its window in order, i the input position (flat) or
// -1 in padding; `inside` is false for taps past the end padding (ceil_mode's last windows).
template <class F>
void for_each_window_tap(const Window& w, std::int64_t o, F&& f) {
  const std::int64_t ow = o % w.out[2], oh = o / w.out[2] % w.out[1], od = o / (w.out[2] * w.out[1]);
  for (std::int64_t a = 0; a < w.k[0]; ++a) {
    const std::int64_t id = od * w.stride[0] - w.pad[0] + a * w.dil[0];
    for (std::int64_t r = 0; r < w.k[1]; ++r) {
      const std::int64_t ih = oh * w.stride[1] - w.pad[1] + r * w.dil[1];
      for (std::int64_t s = 0; s < w.k[2]; ++s) {
        const std::int64_t iw = ow * w.stride[2] - w.pad[2] + s * w.dil[2];
        const bool data = id >= 0 && id < w.in[0] && ih >= 0 && ih < w.in[1] && iw >= 0 && iw < w.in[2];
        const bool padded = id < w.in[0] + w.pad_end[0] && ih < w.in[1] + w.pad_end[1] && iw < w.in[2] + w.pad_end[2];
        f(data ? (id * w.in[1] + ih) * w.in[2] + iw : -1, padded);
      }
    }
  }
}

}  // namespace memplan::runtime::cpu
