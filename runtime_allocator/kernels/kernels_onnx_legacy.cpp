// CPU kernels for ONNX ops the backend suites and older CNN exports use: Sum and Mean of any number of
// inputs, LRN (AlexNet, GoogLeNet), InstanceNormalization (GroupNorm as PyTorch exports it) and its gradient.
#include <cmath>

#include "runtime_allocator/kernels/cpu_kernels.hpp"

namespace memplan::runtime::cpu {
namespace {

// y = (x0 + x1 + ... + xn-1) * scale with numpy broadcasting, summed in input order (deterministic).
void sum_scaled(const Op& op, const Refs& in, const Refs& out, bool mean) {
  if (in.empty() || in.size() > kMaxOperands) unsupported(op, "1 to " + std::to_string(kMaxOperands) + " inputs expected");
  std::vector<const std::vector<std::int64_t>*> shapes;
  for (std::size_t k = 0; k < in.size(); ++k) {
    const TensorRef& x = required(op, in, k);
    if (x.dtype != in[0].dtype) unsupported(op, "inputs of different dtypes");
    shapes.push_back(&x.shape);
  }
  visit_dtype(op, in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      unsupported(op, "bool inputs");
    } else {
      T* py = out[0].as<T>();
      const auto n = static_cast<double>(in.size());
      // Outputs may alias a same-shaped input: each element is read from every input before it is written.
      broadcast_loop(out[0].shape, shapes, [&](std::int64_t i, const Offsets& o) {
        T acc = in[0].as<T>()[o[0]];
        for (std::size_t k = 1; k < in.size(); ++k) acc = static_cast<T>(acc + in[k].as<T>()[o[k]]);
        py[i] = mean ? static_cast<T>(static_cast<double>(acc) / n) : acc;
      });
    }
  });
}

void k_sum(const Op& op, const Refs& in, const Refs& out) { sum_scaled(op, in, out, false); }
void k_mean(const Op& op, const Refs& in, const Refs& out) { sum_scaled(op, in, out, true); }

// [N, C, spatial...] as N x C x S.
void channel_geometry(const Op& op, const TensorRef& x, std::int64_t& N, std::int64_t& C, std::int64_t& S) {
  if (x.shape.size() < 2) unsupported(op, "input of rank 2 or more expected");
  N = x.shape[0];
  C = x.shape[1];
  S = 1;
  for (std::size_t d = 2; d < x.shape.size(); ++d) S *= x.shape[d];
}

// ONNX LRN: y = x / (bias + alpha / size * sum of x^2 over channels [c - floor((size-1)/2), c + ceil((size-1)/2)])^beta.
void k_lrn(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  if (x.dtype != DType::f32) unsupported(op, "float32 only");
  const std::int64_t size = op.attr_int("size", 0);
  if (size < 1) unsupported(op, "attribute size must be at least 1");
  const double alpha = op.attr_float("alpha", 1e-4), beta = op.attr_float("beta", 0.75), bias = op.attr_float("bias", 1.0);
  std::int64_t N = 0, C = 0, S = 0;
  channel_geometry(op, x, N, C, S);
  const std::int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  const float* px = x.as<float>();
  std::vector<float> y(static_cast<std::size_t>(x.elements()));  // x is read across channels: never in place
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t c = 0; c < C; ++c)
      for (std::int64_t s = 0; s < S; ++s) {
        double sq = 0.0;
        for (std::int64_t k = std::max<std::int64_t>(0, c - lo); k <= std::min(C - 1, c + hi); ++k) {
          const double v = px[(n * C + k) * S + s];
          sq += v * v;
        }
        const std::int64_t i = (n * C + c) * S + s;
        y[static_cast<std::size_t>(i)] = static_cast<float>(px[i] / std::pow(bias + alpha / static_cast<double>(size) * sq, beta));
      }
  std::memcpy(out[0].data, y.data(), y.size() * sizeof(float));
}

// y = scale[c] * (x - mean) / sqrt(var + epsilon) + B[c], mean and (biased) variance per sample and channel; the
// optional outputs 1 and 2 (a training graph's) take the mean and the inverse std.
void k_instance_norm(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  const TensorRef& scale = required(op, in, 1);
  const TensorRef& bias = required(op, in, 2);
  if (x.dtype != DType::f32 || scale.dtype != DType::f32 || bias.dtype != DType::f32) unsupported(op, "float32 only");
  std::int64_t N = 0, C = 0, S = 0;
  channel_geometry(op, x, N, C, S);
  if (scale.elements() != C || bias.elements() != C) unsupported(op, "scale and B must have C elements");
  const double eps = op.attr_float("epsilon", 1e-5);
  const float* px = x.as<float>();
  float* py = out[0].as<float>();
  float* mean_out = out.size() > 1 && out[1].data ? out[1].as<float>() : nullptr;
  float* inv_out = out.size() > 2 && out[2].data ? out[2].as<float>() : nullptr;
  for (std::int64_t nc = 0; nc < N * C; ++nc) {
    const float* row = px + nc * S;
    double mean = 0.0, var = 0.0;
    for (std::int64_t s = 0; s < S; ++s) mean += row[s];
    mean /= static_cast<double>(S ? S : 1);
    for (std::int64_t s = 0; s < S; ++s) var += (row[s] - mean) * (row[s] - mean);
    var /= static_cast<double>(S ? S : 1);
    const double inv = 1.0 / std::sqrt(var + eps), g = scale.as<float>()[nc % C], b = bias.as<float>()[nc % C];
    if (mean_out) mean_out[nc] = static_cast<float>(mean);
    if (inv_out) inv_out[nc] = static_cast<float>(inv);
    for (std::int64_t s = 0; s < S; ++s) py[nc * S + s] = static_cast<float>((row[s] - mean) * inv * g + b);
  }
}

// InstanceNormGrad (dY, X, scale, mean, invstd) -> dX, dScale, dB, each optional; per sample and channel, with
// xhat = (x - mean) * invstd and g = dY * scale[c]: dX = invstd * (g - mean(g) - xhat * mean(g * xhat)), dScale[c] and
// dB[c] the sums of dY * xhat and dY over the samples and the spatial axes (accumulated in double).
void k_instance_norm_grad(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& dy = required(op, in, 0);
  const TensorRef& x = required(op, in, 1);
  std::int64_t N = 0, C = 0, S = 0;
  channel_geometry(op, x, N, C, S);
  const float* scale = required(op, in, 2).as<float>();
  const float* mean = required(op, in, 3).as<float>();
  const float* inv = required(op, in, 4).as<float>();
  if (in[2].elements() != C || in[3].elements() != N * C || in[4].elements() != N * C)
    unsupported(op, "scale must have C elements and the statistics N * C");
  float* dx = !out.empty() && out[0].data ? out[0].as<float>() : nullptr;
  std::vector<double> dscale(static_cast<std::size_t>(C), 0.0), dbias(static_cast<std::size_t>(C), 0.0);
  for (std::int64_t nc = 0; nc < N * C; ++nc) {
    const float* xr = x.as<float>() + nc * S;
    const float* gr = dy.as<float>() + nc * S;
    const auto c = static_cast<std::size_t>(nc % C);
    double sum_g = 0.0, sum_gx = 0.0;
    for (std::int64_t s = 0; s < S; ++s) {
      const double xhat = (static_cast<double>(xr[s]) - mean[nc]) * inv[nc];
      sum_g += gr[s];
      sum_gx += gr[s] * xhat;
    }
    dscale[c] += sum_gx;
    dbias[c] += sum_g;
    if (!dx) continue;
    const double n = static_cast<double>(S ? S : 1), w = scale[c];
    for (std::int64_t s = 0; s < S; ++s) {
      const double xhat = (static_cast<double>(xr[s]) - mean[nc]) * inv[nc];
      dx[nc * S + s] = static_cast<float>(inv[nc] * w * (gr[s] - sum_g / n - xhat * sum_gx / n));
    }
  }
  for (std::size_t k = 1; k < 3 && k < out.size(); ++k)
    if (out[k].data)
      for (std::int64_t c = 0; c < C; ++c)
        out[k].as<float>()[c] = static_cast<float>((k == 1 ? dscale : dbias)[static_cast<std::size_t>(c)]);
}

}  // namespace

void add_onnx_legacy_kernels(KernelTable& t) {
  t["Sum"] = {k_sum, true, {kVisitedDTypes}};
  t["Mean"] = {k_mean, true, {kVisitedDTypes}};
  t["LRN"] = {k_lrn, false, {kF32, kAnyRank}};
  t["InstanceNormalization"] = {k_instance_norm, true, {kF32, kAnyRank}};
  // dX is written row by row after the row's sums are taken: it may share dY's bytes.
  t["memplan::InstanceNormGrad"] = {k_instance_norm_grad, true, {kF32, kAnyRank}};
}

}  // namespace memplan::runtime::cpu
