// CPU pools over 1 to 3 spatial axes: MaxPool (with Indices in either storage order), AveragePool, LpPool,
// GlobalLpPool, and the MaxPool and AveragePool gradients.
#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime_allocator/kernels/cpu_kernels.hpp"

namespace memplan::runtime::cpu {
namespace {

// ONNX Indices with storage_order 1 (column-major): the spatial position with the first spatial axis fastest
// (unused leading slots are one wide, so one formula serves every rank).
std::int64_t column_major(const Window& w, std::int64_t i) {
  const std::int64_t c2 = i % w.in[2], c1 = i / w.in[2] % w.in[1], c0 = i / (w.in[2] * w.in[1]);
  return c0 + (c1 + c2 * w.in[1]) * w.in[0];
}

std::int64_t row_major(const Window& w, std::int64_t col) {
  const std::int64_t c0 = col % w.in[0], c1 = col / w.in[0] % w.in[1], c2 = col / (w.in[0] * w.in[1]);
  return (c0 * w.in[1] + c1) * w.in[2] + c2;
}

bool column_major_indices(const Op& op) {
  const std::int64_t order = op.attr_int("storage_order", 0);
  if (order != 0 && order != 1) unsupported(op, "storage_order must be 0 or 1");
  return order == 1;
}

enum class PoolKind { max, average, lp };

// One window's reduction: its maximum and where it first is, its sum and the taps counted, or its sum of |x|^p.
template <PoolKind kKind>
struct WindowReduce {
  bool include_pad = false;
  double p = 1.0;
  double acc = 0.0;
  float best = -std::numeric_limits<float>::infinity();
  std::int64_t count = 0, arg = -1;

  void tap(const float* px, std::int64_t i, bool padded) {
    if constexpr (kKind == PoolKind::average) count += (include_pad && padded) || (i >= 0 && !include_pad) ? 1 : 0;
    if (i < 0) return;
    const float v = px[i];
    if constexpr (kKind == PoolKind::max) {
      if (arg < 0 || v > best) {  // the first maximum in window order
        best = v;
        arg = i;
      }
    }
    if constexpr (kKind == PoolKind::average) acc += v;
    if constexpr (kKind == PoolKind::lp) acc += std::pow(std::fabs(static_cast<double>(v)), p);
  }
  float value() const {
    if constexpr (kKind == PoolKind::max) return best;
    if constexpr (kKind == PoolKind::average) return count ? static_cast<float>(acc / static_cast<double>(count)) : 0.0f;
    return static_cast<float>(std::pow(acc, 1.0 / p));
  }
};

template <PoolKind kKind>
void pool(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  const Window w = window(op, x, out[0], op.attr_ints("kernel_shape"));
  std::int64_t* indices = kKind == PoolKind::max && out.size() > 1 && out[1].data ? out[1].as<std::int64_t>() : nullptr;
  const bool column = kKind == PoolKind::max && column_major_indices(op);
  const bool include_pad = op.attr_int("count_include_pad", 0) != 0;
  const double p = kKind == PoolKind::lp ? static_cast<double>(op.attr_int("p", 2)) : 1.0;
  if (p < 1.0) unsupported(op, "p must be >= 1");
  const std::int64_t in_plane = w.in_plane(), out_plane = w.out_plane();
  for (std::int64_t nc = 0; nc < w.N * w.C; ++nc) {
    const float* px = x.as<float>() + nc * in_plane;
    for (std::int64_t o = 0; o < out_plane; ++o) {
      WindowReduce<kKind> r;
      r.include_pad = include_pad;
      r.p = p;
      for_each_window_tap(w, o, [&](std::int64_t i, bool padded) { r.tap(px, i, padded); });
      const std::int64_t at = nc * out_plane + o;
      out[0].as<float>()[at] = r.value();
      if (indices) indices[at] = nc * in_plane + (r.arg < 0 ? 0 : column ? column_major(w, r.arg) : r.arg);
    }
  }
}

// (sum |x|^p)^(1/p) over all spatial axes.
void k_global_lp_pool(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  if (x.shape.size() < 2) unsupported(op, "[N, C, ...] input expected");
  const double p = static_cast<double>(op.attr_int("p", 2));
  if (p < 1.0) unsupported(op, "p must be >= 1");
  const std::int64_t nc = x.shape[0] * x.shape[1], plane = dims_product(x.shape, 2);
  for (std::int64_t i = 0; i < nc; ++i) {
    double acc = 0.0;
    for (std::int64_t j = 0; j < plane; ++j) acc += std::pow(std::fabs(static_cast<double>(x.as<float>()[i * plane + j])), p);
    out[0].as<float>()[i] = static_cast<float>(std::pow(acc, 1.0 / p));
  }
}

// dX = dY scattered to the Indices (flat over all of X; column-major spatial positions when storage_order is 1).
void k_max_pool_grad(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& dy = required(op, in, 0);
  const auto idx = int_values(op, required(op, in, 2));
  const bool column = column_major_indices(op);
  const Window w = column ? window(op, out[0], dy, op.attr_ints("kernel_shape")) : Window{};
  const std::int64_t plane = column ? w.in_plane() : 1;
  std::fill_n(out[0].as<float>(), out[0].elements(), 0.0f);
  for (std::size_t o = 0; o < idx.size(); ++o) {
    const std::int64_t at = column ? idx[o] / plane * plane + row_major(w, idx[o] % plane) : idx[o];
    if (at < 0 || at >= out[0].elements()) fail(ErrorKind::runtime, "op '" + op.name + "' (MaxPoolGrad): index out of range");
    out[0].as<float>()[at] += dy.as<float>()[o];
  }
}

void k_average_pool_grad(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& dy = required(op, in, 0);
  const Window w = window(op, out[0], dy, op.attr_ints("kernel_shape"));
  const bool include_pad = op.attr_int("count_include_pad", 0) != 0;
  std::fill_n(out[0].as<float>(), out[0].elements(), 0.0f);
  const std::int64_t in_plane = w.in_plane(), out_plane = w.out_plane();
  for (std::int64_t nc = 0; nc < w.N * w.C; ++nc) {
    float* dx = out[0].as<float>() + nc * in_plane;
    for (std::int64_t o = 0; o < out_plane; ++o) {
      std::int64_t count = 0;
      for_each_window_tap(w, o, [&](std::int64_t i, bool padded) { count += include_pad ? padded : i >= 0; });
      if (count == 0) continue;
      const float g = dy.as<float>()[nc * out_plane + o] / static_cast<float>(count);
      for_each_window_tap(w, o, [&](std::int64_t i, bool) {
        if (i >= 0) dx[i] += g;
      });
    }
  }
}

}  // namespace

void add_pool_kernels(KernelTable& t) {
  // [N, C, W], [N, C, H, W] or [N, C, D, H, W].
  t["MaxPool"] = {pool<PoolKind::max>, false, {kF32, 5}};
  t["AveragePool"] = {pool<PoolKind::average>, false, {kF32, 5}};
  t["LpPool"] = {pool<PoolKind::lp>, false, {kF32, 5}};
  t["GlobalLpPool"] = {k_global_lp_pool, false};
  t["memplan::MaxPoolGrad"] = {k_max_pool_grad, false, {kF32, 5}};
  t["memplan::AveragePoolGrad"] = {k_average_pool_grad, false, {kF32, 5}};
}

}  // namespace memplan::runtime::cpu
