// CPU convolutions over 1 to 3 spatial axes: Conv, ConvTranspose and the Conv gradients (ConvGradInput/Weight).
#include <algorithm>

#include "analysis/conv_geometry.hpp"
#include "runtime_allocator/kernels/cpu_kernels.hpp"

namespace memplan::runtime::cpu {

Window make_window(const Op& op, const std::vector<std::int64_t>& x, const std::vector<std::int64_t>& y,
                   const std::vector<std::int64_t>& kernel, const std::vector<std::int64_t>& pads) {
  const std::size_t rank = x.size();
  if (rank < 3 || rank > 5 || y.size() != rank) unsupported(op, "only 1-D, 2-D and 3-D spatial inputs are supported");
  const std::size_t sp = rank - 2;
  if (kernel.size() != sp) unsupported(op, "kernel_shape rank does not match the input");
  auto get = [&](const char* key) {
    auto v = op.attr_ints(key, std::vector<std::int64_t>(sp, 1));
    if (v.size() != sp) unsupported(op, std::string("attribute ") + key + " has the wrong length");
    return v;
  };
  const auto strides = get("strides"), dil = get("dilations");
  if (pads.size() != 2 * sp) unsupported(op, "attribute pads has the wrong length");
  Window w;
  w.N = x[0];
  w.C = x[1];
  w.OC = y[1];
  const std::size_t o = Window::kSlots - sp;  // right-aligned: 1-D fills only the last slot
  for (std::size_t k = 0; k < sp; ++k) {
    if (kernel[k] < 1 || strides[k] < 1 || dil[k] < 1) unsupported(op, "kernel, strides and dilations must be >= 1");
    w.in[o + k] = x[2 + k];
    w.out[o + k] = y[2 + k];
    w.k[o + k] = kernel[k];
    w.stride[o + k] = strides[k];
    w.dil[o + k] = dil[k];
    w.pad[o + k] = pads[k];
    w.pad_end[o + k] = pads[sp + k];
  }
  return w;
}

Window window(const Op& op, const TensorRef& x, const TensorRef& y, std::vector<std::int64_t> kernel) {
  const std::size_t sp = x.shape.size() >= 2 ? x.shape.size() - 2 : 0;
  const std::string mode = op.attr_string("auto_pad", "NOTSET");
  std::vector<std::int64_t> pads(2 * sp, 0);
  if (mode == "SAME_UPPER" || mode == "SAME_LOWER") {
    const auto strides = op.attr_ints("strides", std::vector<std::int64_t>(sp, 1));
    const auto dil = op.attr_ints("dilations", std::vector<std::int64_t>(sp, 1));
    if (strides.size() != sp || dil.size() != sp || kernel.size() != sp || y.shape.size() != x.shape.size())
      unsupported(op, "window attributes do not match the input's rank");
    for (std::size_t k = 0; k < sp; ++k) {
      const std::int64_t total =
          std::max<std::int64_t>(0, (y.shape[2 + k] - 1) * strides[k] + (kernel[k] - 1) * dil[k] + 1 - x.shape[2 + k]);
      pads[k] = mode == "SAME_LOWER" ? total - total / 2 : total / 2;  // the odd unit at the end for SAME_UPPER
      pads[sp + k] = total - pads[k];
    }
  } else if (mode != "VALID") {
    pads = op.attr_ints("pads", pads);
  }
  return make_window(op, x.shape, y.shape, kernel, pads);
}

namespace {

std::vector<std::int64_t> spatial(const TensorRef& w) { return {w.shape.begin() + 2, w.shape.end()}; }

struct Groups {
  std::int64_t in_per_group, out_per_group;
};
Groups groups(const Op& op, const Window& w) {
  const std::int64_t group = op.attr_int("group", 1);
  if (group < 1 || w.C % group || w.OC % group) unsupported(op, "channels do not divide into groups");
  return {w.C / group, w.OC / group};
}

// Calls f(x, y, k) for every (n, output channel, input channel) pair of the convolution over window w: the element
// offsets of the input channel's plane, the output channel's plane and the weight's kernel of that pair.
template <class F>
void for_each_channel_pair(const Op& op, const Window& w, F&& f) {
  const Groups g = groups(op, w);
  for (std::int64_t n = 0; n < w.N; ++n)
    for (std::int64_t oc = 0; oc < w.OC; ++oc)
      for (std::int64_t ic = 0; ic < g.in_per_group; ++ic)
        f((n * w.C + oc / g.out_per_group * g.in_per_group + ic) * w.in_plane(), (n * w.OC + oc) * w.out_plane(),
          (oc * g.in_per_group + ic) * w.kernel_size());
}

// y (the window's output side) += conv(x, wt).
void conv_forward(const Op& op, const Window& w, const float* x, const float* wt, float* y) {
  for_each_channel_pair(op, w, [&](std::int64_t xp, std::int64_t yp, std::int64_t wp) {
    for_each_tap(w, [&](std::int64_t tap, std::int64_t o, std::int64_t i) { y[yp + o] += wt[wp + tap] * x[xp + i]; });
  });
}

// dx (the window's input side) += the transposed convolution of dy with wt: Conv's input gradient and
// ConvTranspose's forward.
void conv_backward_data(const Op& op, const Window& w, const float* dy, const float* wt, float* dx) {
  for_each_channel_pair(op, w, [&](std::int64_t xp, std::int64_t yp, std::int64_t wp) {
    for_each_tap(w, [&](std::int64_t tap, std::int64_t o, std::int64_t i) { dx[xp + i] += wt[wp + tap] * dy[yp + o]; });
  });
}

// dwt += the correlation of x (input side) with dy (output side): Conv's weight gradient, and ConvTranspose's with
// the roles of X and dY swapped.
void conv_backward_filter(const Op& op, const Window& w, const float* x, const float* dy, float* dwt) {
  for_each_channel_pair(op, w, [&](std::int64_t xp, std::int64_t yp, std::int64_t wp) {
    for_each_tap(w, [&](std::int64_t tap, std::int64_t o, std::int64_t i) { dwt[wp + tap] += dy[yp + o] * x[xp + i]; });
  });
}

// Y = bias[c] broadcast over [N, C, plane...] (zeros without a bias).
void fill_bias(const Op& op, const Refs& in, std::size_t slot, const TensorRef& y) {
  const float* bias = in.size() > slot && in[slot].data ? in[slot].as<float>() : nullptr;
  const std::int64_t plane = dims_product(y.shape, 2), channels = y.shape[1];
  if (bias && in[slot].elements() != channels) unsupported(op, "the bias must hold one value per output channel");
  float* py = y.as<float>();
  for (std::int64_t nc = 0; nc < y.shape[0] * channels; ++nc) std::fill_n(py + nc * plane, plane, bias ? bias[nc % channels] : 0.0f);
}

void k_conv(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  const TensorRef& wt = required(op, in, 1);
  const Window w = window(op, x, out[0], spatial(wt));
  fill_bias(op, in, 2, out[0]);
  conv_forward(op, w, x.as<float>(), wt.as<float>(), out[0].as<float>());
}

// Y = ConvTranspose(X, W): the input gradient of the convolution from Y to X, whose weight is W [C, M/group, k...].
void k_conv_transpose(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  const TensorRef& wt = required(op, in, 1);
  const auto pads = analysis::conv_transpose_pads(op, x.shape, out[0].shape, spatial(wt));
  const Window w = make_window(op, out[0].shape, x.shape, spatial(wt), pads);
  fill_bias(op, in, 2, out[0]);
  conv_backward_data(op, w, x.as<float>(), wt.as<float>(), out[0].as<float>());
}

void k_conv_grad_input(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& dy = required(op, in, 0);
  const TensorRef& wt = required(op, in, 1);
  std::fill_n(out[0].as<float>(), out[0].elements(), 0.0f);
  conv_backward_data(op, window(op, out[0], dy, spatial(wt)), dy.as<float>(), wt.as<float>(), out[0].as<float>());
}

void k_conv_grad_weight(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& dy = required(op, in, 0);
  const TensorRef& x = required(op, in, 1);
  std::fill_n(out[0].as<float>(), out[0].elements(), 0.0f);
  conv_backward_filter(op, window(op, x, dy, spatial(out[0])), x.as<float>(), dy.as<float>(), out[0].as<float>());
}

}  // namespace

void add_conv_nd_kernels(KernelTable& t) {
  // [N, C, W], [N, C, H, W] or [N, C, D, H, W].
  t["Conv"] = {k_conv, false, {kF32, 5}};
  t["ConvTranspose"] = {k_conv_transpose, false, {kF32, 5}};
  t["memplan::ConvGradInput"] = {k_conv_grad_input, false, {kF32, 5}};
  t["memplan::ConvGradWeight"] = {k_conv_grad_weight, false, {kF32, 5}};
}

}  // namespace memplan::runtime::cpu
