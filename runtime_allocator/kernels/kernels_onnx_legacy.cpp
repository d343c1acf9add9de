// CPU kernels for ONNX ops the backend suites and older CNN exports use: Sum and Mean of any number of
// inputs, LRN (AlexNet, GoogLeNet).
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

}  // namespace

void add_onnx_legacy_kernels(KernelTable& t) {
  t["Sum"] = {k_sum, true, {kVisitedDTypes}};
  t["Mean"] = {k_mean, true, {kVisitedDTypes}};
  t["LRN"] = {k_lrn, false, {kF32, kAnyRank}};
}

}  // namespace memplan::runtime::cpu
