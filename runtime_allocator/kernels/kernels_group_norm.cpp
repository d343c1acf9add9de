// CPU kernels of InstanceNormalization and GroupNormalization (GroupNorm: PyTorch's native_group_norm) and memplan
// GroupNormGrad, their gradient (norm_groups.hpp's rows: one per sample and group).
#include <cmath>

#include "runtime_allocator/kernels/cpu_kernels.hpp"
#include "runtime_allocator/kernels/norm_groups.hpp"

namespace memplan::runtime::cpu {
namespace {

const float* f32_in(const Op& op, const Refs& in, std::size_t i) {
  const TensorRef& t = required(op, in, i);
  if (t.dtype != DType::f32) unsupported(op, "input " + std::to_string(i) + " must be float32");
  return t.as<float>();
}

float* optional_out(const Refs& out, std::size_t i) { return i < out.size() && out[i].data ? out[i].as<float>() : nullptr; }

// Channel c's index into scale and bias.
std::int64_t param_index(const NormGroups& g, std::int64_t c) { return g.scale_per_group ? c / g.channels_per_group() : c; }

// y = scale[c] * (x - mean) / sqrt(var + epsilon) + B[c], mean and (biased) variance per row (accumulated in double);
// the optional outputs 1 and 2 (a training graph's) take each row's mean and inverse std.
void k_group_norm(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  if (x.dtype != DType::f32) unsupported(op, "float32 only");
  const NormGroups g = norm_groups(op, x.shape, required(op, in, 1).elements());
  const float *scale = f32_in(op, in, 1), *bias = f32_in(op, in, 2);
  const double eps = op.attr_float("epsilon", 1e-5);
  const std::int64_t len = g.row_length(), C = g.channels;
  float* mean_out = optional_out(out, 1);
  float* inv_out = optional_out(out, 2);
  for (std::int64_t r = 0; r < g.rows(); ++r) {
    const float* row = x.as<float>() + r * len;
    double mean = 0.0, var = 0.0;
    for (std::int64_t j = 0; j < len; ++j) mean += row[j];
    mean /= static_cast<double>(len ? len : 1);
    for (std::int64_t j = 0; j < len; ++j) var += (row[j] - mean) * (row[j] - mean);
    var /= static_cast<double>(len ? len : 1);
    const double inv = 1.0 / std::sqrt(var + eps);
    if (mean_out) mean_out[r] = static_cast<float>(mean);
    if (inv_out) inv_out[r] = static_cast<float>(inv);
    float* yr = out[0].as<float>() + r * len;
    for (std::int64_t j = 0; j < len; ++j) {
      const std::int64_t p = param_index(g, (r * g.channels_per_group() + j / g.plane) % C);
      yr[j] = static_cast<float>((row[j] - mean) * inv * scale[p] + bias[p]);
    }
  }
}

// GroupNormGrad (dY, X, scale, mean, invstd; num_groups) -> dX, dScale, dB, each optional. Per sample n and channel c:
// sum_dy[n, c] and sum_dyx[n, c], the sums of dY and dY * xhat over the plane (xhat = (x - mean) * invstd of c's row,
// in double); dScale and dB add them over the samples (and a group's channels for per-group parameters). Per row,
// with g = dY * scale[c]: dX = invstd * (g - mean(g) - xhat * mean(g * xhat)), whose means come from those sums.
void k_group_norm_grad(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& dy = required(op, in, 0);
  const TensorRef& x = required(op, in, 1);
  const NormGroups g = norm_groups(op, x.shape, required(op, in, 2).elements());
  const float *scale = f32_in(op, in, 2), *mean = f32_in(op, in, 3), *inv = f32_in(op, in, 4);
  if (in[3].elements() != g.rows() || in[4].elements() != g.rows()) unsupported(op, "the statistics must have N * num_groups elements");
  const std::int64_t C = g.channels, S = g.plane, K = g.channels_per_group();
  std::vector<double> sum_dy(static_cast<std::size_t>(g.samples * C)), sum_dyx(sum_dy.size());
  for (std::int64_t nc = 0; nc < g.samples * C; ++nc) {
    const std::int64_t r = nc / K;  // the row of (n, c): n * G + c / K
    const float* xr = x.as<float>() + nc * S;
    const float* gr = dy.as<float>() + nc * S;
    for (std::int64_t s = 0; s < S; ++s) {
      sum_dy[static_cast<std::size_t>(nc)] += gr[s];
      sum_dyx[static_cast<std::size_t>(nc)] += gr[s] * ((static_cast<double>(xr[s]) - mean[r]) * inv[r]);
    }
  }
  float* dscale = optional_out(out, 1);
  float* dbias = optional_out(out, 2);
  const std::int64_t params = g.scale_per_group ? g.groups : C;
  for (std::int64_t p = 0; p < params; ++p) {
    double ds = 0.0, db = 0.0;
    for (std::int64_t n = 0; n < g.samples; ++n)
      for (std::int64_t c = g.scale_per_group ? p * K : p; c < (g.scale_per_group ? (p + 1) * K : p + 1); ++c) {
        ds += sum_dyx[static_cast<std::size_t>(n * C + c)];
        db += sum_dy[static_cast<std::size_t>(n * C + c)];
      }
    if (dscale) dscale[p] = static_cast<float>(ds);
    if (dbias) dbias[p] = static_cast<float>(db);
  }
  float* dx = optional_out(out, 0);
  if (!dx) return;
  const double len = static_cast<double>(g.row_length() ? g.row_length() : 1);
  for (std::int64_t r = 0; r < g.rows(); ++r) {
    double mg = 0.0, mgx = 0.0;  // sums over the row of g and g * xhat
    for (std::int64_t c = r * K; c < (r + 1) * K; ++c) {
      const double w = scale[param_index(g, c % C)];
      mg += w * sum_dy[static_cast<std::size_t>(c)];
      mgx += w * sum_dyx[static_cast<std::size_t>(c)];
    }
    mg /= len;
    mgx /= len;
    for (std::int64_t j = r * K * S; j < (r + 1) * K * S; ++j) {
      const double w = scale[param_index(g, (j / S) % C)];
      const double xhat = (static_cast<double>(x.as<float>()[j]) - mean[r]) * inv[r];
      dx[j] = static_cast<float>(inv[r] * (w * dy.as<float>()[j] - mg - xhat * mgx));
    }
  }
}

}  // namespace

void add_group_norm_kernels(KernelTable& t) {
  t["InstanceNormalization"] = {k_group_norm, true, {kF32, kAnyRank}};
  t["GroupNormalization"] = {k_group_norm, true, {kF32, kAnyRank}};
  // dX is written row by row after every sum is taken: it may share dY's bytes.
  t["memplan::GroupNormGrad"] = {k_group_norm_grad, true, {kF32, kAnyRank}};
}

}  // namespace memplan::runtime::cpu
