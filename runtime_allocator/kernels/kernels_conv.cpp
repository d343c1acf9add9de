// CPU global pools and BatchNormalization (windowed ops: kernels_conv_nd.cpp, kernels_pool_nd.cpp).
#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime_allocator/kernels/cpu_kernels.hpp"

namespace memplan::runtime::cpu {

namespace {

template <bool kMax>
void global_pool(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  if (x.dtype != DType::f32 || x.shape.size() < 2) unsupported(op, "float32 [N, C, ...] input expected");
  const std::int64_t nc = x.shape[0] * x.shape[1], plane = dims_product(x.shape, 2);
  for (std::int64_t i = 0; i < nc; ++i) {
    const float* p = x.as<float>() + i * plane;
    float acc = kMax ? -std::numeric_limits<float>::infinity() : 0.0f;
    // A NaN in the plane is its max (as ONNX Runtime and numpy): once acc is NaN no comparison replaces it.
    for (std::int64_t j = 0; j < plane; ++j) acc = kMax ? (p[j] > acc || p[j] != p[j] ? p[j] : acc) : acc + p[j];
    out[0].as<float>()[i] = kMax ? acc : acc / static_cast<float>(plane);
  }
}

// Inference form: y = scale * (x - mean) / sqrt(var + eps) + bias, per channel (axis 1). Training form
// (training_mode=1): batch statistics, plus the updated running mean and variance as outputs 1 and 2.
void k_batch_norm(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  if (x.dtype != DType::f32 || x.shape.size() < 2) unsupported(op, "float32 [N, C, ...] input expected");
  const float eps = static_cast<float>(op.attr_float("epsilon", 1e-5)), momentum = static_cast<float>(op.attr_float("momentum", 0.9));
  const std::int64_t N = x.shape[0], C = x.shape[1], plane = dims_product(x.shape, 2);
  const float* scale = required(op, in, 1).as<float>();
  const float* bias = required(op, in, 2).as<float>();
  const float* rmean = required(op, in, 3).as<float>();
  const float* rvar = required(op, in, 4).as<float>();
  const bool training = op.attr_int("training_mode", 0) != 0;
  const float* px = x.as<float>();
  std::vector<float> mean(rmean, rmean + C), var(rvar, rvar + C);
  if (training) {
    const float count = static_cast<float>(N * plane);
    for (std::int64_t c = 0; c < C; ++c) {
      double s = 0.0, s2 = 0.0;
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t j = 0; j < plane; ++j) s += px[(n * C + c) * plane + j];
      const double m = s / count;
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t j = 0; j < plane; ++j) {
          const double d = px[(n * C + c) * plane + j] - m;
          s2 += d * d;
        }
      mean[static_cast<std::size_t>(c)] = static_cast<float>(m);
      var[static_cast<std::size_t>(c)] = static_cast<float>(s2 / count);
    }
    for (std::size_t k = 1; k < 3 && k < out.size(); ++k)
      if (out[k].data)
        for (std::int64_t c = 0; c < C; ++c) {
          const float running = (k == 1 ? rmean : rvar)[c], batch = (k == 1 ? mean : var)[static_cast<std::size_t>(c)];
          out[k].as<float>()[c] = running * momentum + batch * (1.0f - momentum);
        }
  }
  float* py = out[0].as<float>();
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t c = 0; c < C; ++c) {
      const float k = scale[c] / std::sqrt(var[static_cast<std::size_t>(c)] + eps), m = mean[static_cast<std::size_t>(c)];
      const std::int64_t base = (n * C + c) * plane;
      for (std::int64_t j = 0; j < plane; ++j) py[base + j] = (px[base + j] - m) * k + bias[c];
    }
}

}  // namespace

void add_conv_kernels(KernelTable& t) {
  t["GlobalAveragePool"] = {global_pool<false>, false};
  t["GlobalMaxPool"] = {global_pool<true>, false};
  t["BatchNormalization"] = {k_batch_norm, true};  // statistics are read before any output is written
}

}  // namespace memplan::runtime::cpu
