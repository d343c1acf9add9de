// CPU kernels of Resize and Upsample (nearest on any dtype, n-linear and cubic on floats; resize_index.hpp's index map)
// and memplan::ResizeGrad: each dY element added to the input elements its output read, times their weights (what
// PyTorch's upsample_nearest/upsample_linear/upsample_bicubic backward compute).
#include "runtime_allocator/kernels/cpu_kernels.hpp"
#include "runtime_allocator/kernels/resize_geometry.hpp"

namespace memplan::runtime::cpu {
namespace {

std::vector<double> float_values(const Op& op, const Refs& in, std::size_t i) {
  if (i >= in.size() || !in[i].data || in[i].elements() == 0) return {};
  const TensorRef& t = in[i];
  std::vector<double> v(static_cast<std::size_t>(t.elements()));
  for (std::size_t k = 0; k < v.size(); ++k) {
    if (t.dtype == DType::f32)
      v[k] = t.as<float>()[k];
    else if (t.dtype == DType::f64)
      v[k] = t.as<double>()[k];
    else
      unsupported(op, std::string("roi and scales of dtype ") + analysis::dtype_name(t.dtype));
  }
  return v;
}

ResizeGeometry geometry(const Op& op, const Refs& in, const std::vector<std::int64_t>& x, const std::vector<std::int64_t>& y) {
  const bool legacy = resize_legacy_layout(op);
  return resize_geometry(op, x, y, legacy ? std::vector<double>{} : float_values(op, in, 1),
                         float_values(op, in, resize_scales_input(op)));
}

// Calls f(y_index, x_offset, weight) for every input element each output element reads (outside: x_offset -1).
template <class F>
void for_each_tap(const ResizeGeometry& g, const std::vector<std::int64_t>& x, const std::vector<std::int64_t>& y, F&& f) {
  const std::size_t r = y.size();
  const auto xs = contiguous_strides(x);
  std::vector<std::vector<ResizeTap>> taps(r);
  for (std::size_t d = 0; d < r; ++d)
    for (std::int64_t i = 0; i < y[d]; ++i) taps[d].push_back(resize_tap(g.mode, g.axes[d], i));
  const std::int64_t n = dims_product(y);
  std::vector<std::int64_t> idx(r, 0);
  ResizeTap cur[kResizeMaxRank];
  for (std::int64_t o = 0; o < n; ++o) {
    bool outside = false;
    for (std::size_t d = 0; d < r; ++d) {
      cur[d] = taps[d][static_cast<std::size_t>(idx[d])];
      outside = outside || cur[d].outside;
    }
    if (outside)
      f(o, std::int64_t{-1}, 1.0f);
    else
      resize_for_each_corner(static_cast<int>(r), cur, xs.data(), [&](std::int64_t off, float w) { f(o, off, w); });
    for (std::size_t d = r; d-- > 0;) {
      if (++idx[d] < y[d]) break;
      idx[d] = 0;
    }
  }
}

void k_resize(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  const TensorRef& y = out[0];
  const ResizeGeometry g = geometry(op, in, x.shape, y.shape);
  if (!g.mode.linear && !g.mode.cubic && x.dtype != DType::f32) {  // nearest moves bytes: any dtype (outside reads zeros)
    const auto es = static_cast<std::size_t>(analysis::dtype_bits(x.dtype) / 8);
    for_each_tap(g, x.shape, y.shape, [&](std::int64_t o, std::int64_t off, float) {
      if (off < 0)
        std::memset(y.data + o * static_cast<std::int64_t>(es), 0, es);
      else
        std::memcpy(y.data + o * static_cast<std::int64_t>(es), x.data + off * static_cast<std::int64_t>(es), es);
    });
    return;
  }
  if (x.dtype != DType::f32) unsupported(op, std::string("linear and cubic modes of dtype ") + analysis::dtype_name(x.dtype));
  const float* px = x.as<float>();
  float* py = y.as<float>();
  std::fill_n(py, y.elements(), 0.0f);
  for_each_tap(g, x.shape, y.shape,
               [&](std::int64_t o, std::int64_t off, float w) { py[o] = off < 0 ? g.mode.extrapolation : py[o] + w * px[off]; });
}

// ResizeGrad(dY, roi, scales, sizes) -> dX, the forward's attributes (and `legacy`) kept.
void k_resize_grad(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& dy = required(op, in, 0);
  const TensorRef& dx = out[0];
  const ResizeGeometry g = geometry(op, in, dx.shape, dy.shape);
  float* px = dx.as<float>();
  const float* py = dy.as<float>();
  std::fill_n(px, dx.elements(), 0.0f);
  for_each_tap(g, dx.shape, dy.shape, [&](std::int64_t o, std::int64_t off, float w) {
    if (off >= 0) px[off] += w * py[o];
  });
}

}  // namespace

void add_resize_kernels(KernelTable& t) {
  t["Resize"] = {k_resize, false, {kAnyDType}};
  t["Upsample"] = {k_resize, false, {kAnyDType}};
  t["memplan::ResizeGrad"] = {k_resize_grad, false};
}

}  // namespace memplan::runtime::cpu
