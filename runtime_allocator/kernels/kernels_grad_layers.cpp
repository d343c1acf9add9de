// CPU kernels of memplan's layer gradients (conv bias, matmul, norms, softmax) and BatchNormTraining.
#include <algorithm>
#include <cmath>

#include "runtime_allocator/kernels/cpu_kernels.hpp"

namespace memplan::runtime::cpu {
namespace {

void zero(const TensorRef& t) { std::fill_n(t.as<float>(), t.elements(), 0.0f); }

void k_conv_grad_bias(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& dy = required(op, in, 0);
  const std::int64_t N = dy.shape[0], C = dy.shape[1], plane = dims_product(dy.shape, 2);
  zero(out[0]);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t c = 0; c < C; ++c)
      for (std::int64_t j = 0; j < plane; ++j) out[0].as<float>()[c] += dy.as<float>()[(n * C + c) * plane + j];
}

// dA = dY B^T (or dB = A^T dY) per batch, summed over the batch axes the operand was broadcast along.
template <bool kGradA>
void k_matmul_grad(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& a = kGradA ? out[0] : required(op, in, 0);  // A's shape (dA has it)
  const TensorRef& b = kGradA ? required(op, in, 1) : out[0];
  const TensorRef& dy = required(op, in, kGradA ? 0 : 1);
  const TensorRef& other = required(op, in, kGradA ? 1 : 0);
  std::vector<std::int64_t> as = a.shape, bs = b.shape;
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  const std::int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  const std::vector<std::int64_t> abatch(as.begin(), as.end() - 2), bbatch(bs.begin(), bs.end() - 2);
  std::vector<std::int64_t> batch(std::max(abatch.size(), bbatch.size()), 1);
  for (std::size_t k = 0; k < batch.size(); ++k) {
    const std::size_t ia = abatch.size() + k, ib = bbatch.size() + k;
    batch[k] = std::max(ia >= batch.size() ? abatch[ia - batch.size()] : 1, ib >= batch.size() ? bbatch[ib - batch.size()] : 1);
  }
  zero(out[0]);
  float* g = out[0].as<float>();
  broadcast_loop(batch, {&abatch, &bbatch}, [&](std::int64_t i, const Offsets& o) {
    const float* pdy = dy.as<float>() + i * M * N;
    if (kGradA) gemm_acc(M, K, N, pdy, N, 1, other.as<float>() + o[1] * K * N, 1, N, g + o[0] * M * K);
    else gemm_acc(K, N, M, other.as<float>() + o[0] * M * K, 1, K, pdy, N, 1, g + o[1] * K * N);
  });
}

// Per-channel mean and biased variance of x (N, C, ...), accumulated in double.
void channel_stats(const TensorRef& x, std::vector<float>& mean, std::vector<float>& var) {
  const std::int64_t N = x.shape[0], C = x.shape[1], plane = dims_product(x.shape, 2);
  const float* px = x.as<float>();
  mean.assign(static_cast<std::size_t>(C), 0.0f);
  var.assign(static_cast<std::size_t>(C), 0.0f);
  for (std::int64_t c = 0; c < C; ++c) {
    double s = 0.0, s2 = 0.0;
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t j = 0; j < plane; ++j) s += px[(n * C + c) * plane + j];
    const double m = s / static_cast<double>(N * plane);
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t j = 0; j < plane; ++j) s2 += (px[(n * C + c) * plane + j] - m) * (px[(n * C + c) * plane + j] - m);
    mean[static_cast<std::size_t>(c)] = static_cast<float>(m);
    var[static_cast<std::size_t>(c)] = static_cast<float>(s2 / static_cast<double>(N * plane));
  }
}

void k_batch_norm_training(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  const float eps = static_cast<float>(op.attr_float("epsilon", 1e-5)), mom = static_cast<float>(op.attr_float("momentum", 0.9));
  const std::int64_t N = x.shape[0], C = x.shape[1], plane = dims_product(x.shape, 2);
  std::vector<float> mean, var;
  channel_stats(x, mean, var);
  const float* scale = required(op, in, 1).as<float>();
  const float* bias = required(op, in, 2).as<float>();
  for (std::int64_t c = 0; c < C; ++c) {
    const auto k = static_cast<std::size_t>(c);
    const float invstd = 1.0f / std::sqrt(var[k] + eps);
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t j = 0; j < plane; ++j) {
        const std::int64_t i = (n * C + c) * plane + j;
        out[0].as<float>()[i] = (x.as<float>()[i] - mean[k]) * invstd * scale[c] + bias[c];
      }
    if (out.size() > 1 && out[1].data) out[1].as<float>()[c] = required(op, in, 3).as<float>()[c] * mom + mean[k] * (1.0f - mom);
    if (out.size() > 2 && out[2].data) out[2].as<float>()[c] = required(op, in, 4).as<float>()[c] * mom + var[k] * (1.0f - mom);
    if (out.size() > 3 && out[3].data) out[3].as<float>()[c] = mean[k];
    if (out.size() > 4 && out[4].data) out[4].as<float>()[c] = invstd;
  }
}

void k_batch_norm_grad(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& dy = required(op, in, 0);
  const TensorRef& x = required(op, in, 1);
  const float* scale = required(op, in, 2).as<float>();
  const float* mean = required(op, in, 3).as<float>();
  const float* invstd = required(op, in, 4).as<float>();
  const std::int64_t N = x.shape[0], C = x.shape[1], plane = dims_product(x.shape, 2);
  const float m = static_cast<float>(N * plane);
  for (std::int64_t c = 0; c < C; ++c) {
    float dbias = 0.0f, dscale = 0.0f;
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t j = 0; j < plane; ++j) {
        const std::int64_t i = (n * C + c) * plane + j;
        dbias += dy.as<float>()[i];
        dscale += dy.as<float>()[i] * (x.as<float>()[i] - mean[c]) * invstd[c];
      }
    if (out[0].data)
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t j = 0; j < plane; ++j) {
          const std::int64_t i = (n * C + c) * plane + j;
          const float xhat = (x.as<float>()[i] - mean[c]) * invstd[c];
          out[0].as<float>()[i] = scale[c] * invstd[c] / m * (m * dy.as<float>()[i] - dbias - xhat * dscale);
        }
    if (out.size() > 1 && out[1].data) out[1].as<float>()[c] = dscale;
    if (out.size() > 2 && out[2].data) out[2].as<float>()[c] = dbias;
  }
}

void k_layer_norm_grad(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& dy = required(op, in, 0);
  const TensorRef& x = required(op, in, 1);
  const float* scale = required(op, in, 2).as<float>();
  const float* mean = required(op, in, 3).as<float>();
  const float* inv = required(op, in, 4).as<float>();
  const auto axis = static_cast<std::size_t>(normalize_axis(op, op.attr_int("axis", -1), x.shape.size()));
  const std::int64_t rows = dims_product(x.shape, 0, axis), H = dims_product(x.shape, axis);
  for (std::size_t k = 1; k < 3 && k < out.size(); ++k)
    if (out[k].data) zero(out[k]);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x.as<float>() + r * H;
    const float* gr = dy.as<float>() + r * H;
    float mg = 0.0f, mgx = 0.0f;
    for (std::int64_t j = 0; j < H; ++j) {
      const float xhat = (xr[j] - mean[r]) * inv[r];
      mg += gr[j] * scale[j];
      mgx += gr[j] * scale[j] * xhat;
      if (out.size() > 1 && out[1].data) out[1].as<float>()[j] += gr[j] * xhat;
      if (out.size() > 2 && out[2].data) out[2].as<float>()[j] += gr[j];
    }
    mg /= static_cast<float>(H);
    mgx /= static_cast<float>(H);
    if (out[0].data)
      for (std::int64_t j = 0; j < H; ++j)
        out[0].as<float>()[r * H + j] = inv[r] * (gr[j] * scale[j] - mg - (xr[j] - mean[r]) * inv[r] * mgx);
  }
}

template <bool kLog>
void k_softmax_grad(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& dy = required(op, in, 0);
  const TensorRef& y = required(op, in, 1);
  const auto axis = static_cast<std::size_t>(normalize_axis(op, op.attr_int("axis", -1), y.shape.size()));
  const bool coerce = op.attr_int("coerce_2d", 0) != 0;
  const std::int64_t outer = dims_product(y.shape, 0, axis), n = coerce ? dims_product(y.shape, axis) : y.shape[axis],
                     inner = coerce ? 1 : dims_product(y.shape, axis + 1);
  const float* g = dy.as<float>();
  const float* p = y.as<float>();
  float* dx = out[0].as<float>();
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      const std::int64_t base = o * n * inner + i;
      float s = 0.0f;
      for (std::int64_t k = 0; k < n; ++k) s += kLog ? g[base + k * inner] : g[base + k * inner] * p[base + k * inner];
      for (std::int64_t k = 0; k < n; ++k) {
        const std::int64_t e = base + k * inner;
        dx[e] = kLog ? g[e] - std::exp(p[e]) * s : p[e] * (g[e] - s);
      }
    }
}

}  // namespace

void add_gradient_layer_kernels(KernelTable& t) {
  t["memplan::ConvGradBias"] = {k_conv_grad_bias, false};
  t["memplan::MatMulGradA"] = {k_matmul_grad<true>, false};
  t["memplan::MatMulGradB"] = {k_matmul_grad<false>, false};
  t["memplan::BatchNormTraining"] = {k_batch_norm_training, false};
  t["memplan::BatchNormGrad"] = {k_batch_norm_grad, false};
  t["memplan::LayerNormGrad"] = {k_layer_norm_grad, false};
  t["memplan::SoftmaxGrad"] = {k_softmax_grad<false>, true};
  t["memplan::LogSoftmaxGrad"] = {k_softmax_grad<true>, true};
}

}  // namespace memplan::runtime::cpu
