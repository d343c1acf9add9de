// CPU kernels of RandomNormalLike, RandomNormal, RandomUniform and Bernoulli: each element a function of the
// op's step key (dropout_mask.hpp: seed and training step) and its index only, as the CUDA kernels compute it,
// so a backward or a recomputed forward of the same step replays the values bit for bit.
#include "runtime_allocator/kernels/cpu_kernels.hpp"
#include "runtime_allocator/kernels/random_normal.hpp"

namespace memplan::runtime::cpu {
namespace {

std::uint64_t op_key(const Op& op) {
  return step_key(static_cast<std::uint64_t>(op.attr_int("seed", static_cast<std::int64_t>(kDefaultRandomSeed))));
}

void k_random_normal(const Op& op, const Refs&, const Refs& out) {
  const TensorRef& y = out[0];
  const std::uint64_t key = op_key(op);
  const double mean = op.attr_float("mean", 0.0), scale = op.attr_float("scale", 1.0);
  const auto n = static_cast<std::uint64_t>(y.elements());
  if (y.dtype == DType::f32) {
    for (std::uint64_t i = 0; i < n; ++i) y.as<float>()[i] = normal_f32(key, i, mean, scale);
  } else if (y.dtype == DType::f64) {
    for (std::uint64_t i = 0; i < n; ++i) y.as<double>()[i] = normal_f64(key, i, mean, scale);
  } else {
    unsupported(op, std::string("dtype ") + analysis::dtype_name(y.dtype) + " (float32 and float64 only)");
  }
}

void k_random_uniform(const Op& op, const Refs&, const Refs& out) {
  const TensorRef& y = out[0];
  const std::uint64_t key = op_key(op);
  const double low = op.attr_float("low", 0.0), high = op.attr_float("high", 1.0);
  const auto n = static_cast<std::uint64_t>(y.elements());
  if (y.dtype == DType::f32) {
    for (std::uint64_t i = 0; i < n; ++i) y.as<float>()[i] = uniform_f32(key, i, static_cast<float>(low), static_cast<float>(high));
  } else if (y.dtype == DType::f64) {
    for (std::uint64_t i = 0; i < n; ++i) y.as<double>()[i] = uniform_f64(key, i, low, high);
  } else {
    unsupported(op, std::string("dtype ") + analysis::dtype_name(y.dtype) + " (float32 and float64 only)");
  }
}

void k_bernoulli(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& p = required(op, in, 0);
  const TensorRef& y = out[0];
  const std::uint64_t key = op_key(op);
  const auto n = static_cast<std::uint64_t>(y.elements());
  visit_dtype(op, p.dtype, [&](auto ptag) {
    using P = decltype(ptag);
    if constexpr (!std::is_floating_point_v<P>) {
      unsupported(op, "probabilities must be float32 or float64");
    } else {
      visit_dtype(op, y.dtype, [&](auto ytag) {
        using Y = decltype(ytag);
        for (std::uint64_t i = 0; i < n; ++i)
          y.as<Y>()[i] = static_cast<Y>(bernoulli_draw(key, i, static_cast<double>(p.as<P>()[i])) ? 1 : 0);
      });
    }
  });
}

}  // namespace

void add_random_kernels(KernelTable& t) {
  t["RandomNormalLike"] = {k_random_normal, false, {kAnyDType}};
  t["RandomNormal"] = {k_random_normal, false, {kAnyDType}};
  t["RandomUniform"] = {k_random_uniform, false, {kAnyDType}};
  t["Bernoulli"] = {k_bernoulli, false, {kF32 | dtype_bit(DType::f64)}};
}

}  // namespace memplan::runtime::cpu
