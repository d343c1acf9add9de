// CPU kernels of memplan's RMSNormalization and RMSNormGrad (semantics in analysis/fused_ops.hpp).
#include <algorithm>
#include <cmath>

#include "runtime_allocator/kernels/cpu_kernels.hpp"

namespace memplan::runtime::cpu {
namespace {

struct Rows {
  std::int64_t rows = 0, n = 0;
};

// X viewed as [rows, n] with n the product of the normalized axes (from `axis` on); the scale, when
// present, covers those n elements.
Rows rows_of(const Op& op, const TensorRef& x, const Refs& in, std::size_t scale_slot) {
  if (x.dtype != DType::f32) unsupported(op, "float32 only");
  const auto axis = static_cast<std::size_t>(normalize_axis(op, op.attr_int("axis", -1), x.shape.size()));
  const Rows r{dims_product(x.shape, 0, axis), dims_product(x.shape, axis)};
  if (scale_slot < in.size() && in[scale_slot].data && in[scale_slot].elements() != r.n)
    unsupported(op, "the scale must cover the normalized dims");
  return r;
}

const float* optional_in(const Refs& v, std::size_t i) { return i < v.size() && v[i].data ? v[i].as<float>() : nullptr; }
float* optional_out(const Refs& v, std::size_t i) { return i < v.size() && v[i].data ? v[i].as<float>() : nullptr; }

// Y = X * rstd * scale, rstd = 1 / sqrt(mean(X^2) + epsilon) per row (accumulated in double).
void k_rms_norm(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  const Rows d = rows_of(op, x, in, 1);
  const float eps = static_cast<float>(op.attr_float("epsilon", 1e-6));
  const float* scale = optional_in(in, 1);
  float* inv_out = optional_out(out, 1);
  for (std::int64_t r = 0; r < d.rows; ++r) {
    const float* xr = x.as<float>() + r * d.n;
    double ss = 0.0;
    for (std::int64_t j = 0; j < d.n; ++j) ss += static_cast<double>(xr[j]) * xr[j];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(d.n)) + eps);
    float* yr = out[0].as<float>() + r * d.n;
    for (std::int64_t j = 0; j < d.n; ++j) yr[j] = xr[j] * inv * (scale ? scale[j] : 1.0f);
    if (inv_out) inv_out[r] = inv;
  }
}

// dX = rstd * (dY * scale) - X * rstd^3 * mean(dY * scale * X); dScale = sum over rows of dY * X * rstd.
void k_rms_norm_grad(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& dy = required(op, in, 0);
  const TensorRef& x = required(op, in, 1);
  const Rows d = rows_of(op, x, in, 2);
  const float* scale = optional_in(in, 2);
  const float* inv = required(op, in, 3).as<float>();
  float* dx = optional_out(out, 0);
  float* dscale = optional_out(out, 1);
  if (dscale) std::fill_n(dscale, d.n, 0.0f);
  for (std::int64_t r = 0; r < d.rows; ++r) {
    const float* xr = x.as<float>() + r * d.n;
    const float* gr = dy.as<float>() + r * d.n;
    const float iv = inv[r];
    double dot = 0.0;
    for (std::int64_t j = 0; j < d.n; ++j) {
      dot += static_cast<double>(gr[j]) * (scale ? scale[j] : 1.0f) * xr[j];
      if (dscale) dscale[j] += gr[j] * xr[j] * iv;
    }
    const float c = static_cast<float>(dot / static_cast<double>(d.n)) * iv * iv * iv;
    if (dx)
      for (std::int64_t j = 0; j < d.n; ++j) dx[r * d.n + j] = iv * gr[j] * (scale ? scale[j] : 1.0f) - xr[j] * c;
  }
}

}  // namespace

void add_norm_kernels(KernelTable& t) {
  // Each row is read completely (its statistics) before its outputs are written.
  t["memplan::RMSNormalization"] = {k_rms_norm, true};
  t["memplan::RMSNormGrad"] = {k_rms_norm_grad, false};
}

}  // namespace memplan::runtime::cpu
