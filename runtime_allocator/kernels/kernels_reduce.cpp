// CPU reductions and normalisations: Reduce{Mean,Sum,Max,Min,Prod,SumSquare,L1,L2,LogSumExp,LogSum}, Softmax, LogSoftmax, LayerNormalization.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "runtime_allocator/kernels/cpu_kernels.hpp"

namespace memplan::runtime::cpu {
namespace {

enum class Reduce { mean, sum, max, min, prod, sum_square, l1, l2, log_sum_exp, log_sum };

// Axes from the attribute (older opsets) or the optional second input (ReduceSum 13+, all in 18+).
std::vector<bool> reduced_axes(const Op& op, const Refs& in, std::size_t rank) {
  std::vector<std::int64_t> axes = op.attr_ints("axes");
  if (in.size() > 1 && in[1].data) axes = int_values(op, in[1]);
  std::vector<bool> r(rank, axes.empty() && op.attr_int("noop_with_empty_axes", 0) == 0);
  for (auto a : axes) r[static_cast<std::size_t>(normalize_axis(op, a, rank))] = true;
  return r;
}

template <Reduce kKind>
constexpr float reduce_init() {
  if constexpr (kKind == Reduce::max) return -std::numeric_limits<float>::infinity();
  if constexpr (kKind == Reduce::min) return std::numeric_limits<float>::infinity();
  if constexpr (kKind == Reduce::prod) return 1.0f;
  return 0.0f;
}

// One input element into its output's accumulator (`shift`: log_sum_exp's row maximum).
template <Reduce kKind>
inline void accumulate(float& a, float v, float shift) {
  switch (kKind) {
    case Reduce::l1: a += std::fabs(v); break;
    case Reduce::l2: case Reduce::sum_square: a += v * v; break;
    case Reduce::log_sum_exp: a += std::exp(v - shift); break;
    case Reduce::mean: case Reduce::sum: case Reduce::log_sum: a += v; break;
    // NaN propagates (as in numpy and ONNX Runtime): once a is NaN no comparison replaces it.
    case Reduce::max: a = v > a || v != v ? v : a; break;
    case Reduce::min: a = v < a || v != v ? v : a; break;
    case Reduce::prod: a *= v; break;
  }
}

// The output from its accumulator over n_red elements.
template <Reduce kKind>
inline float finish(float a, std::int64_t n_red, float shift) {
  if constexpr (kKind == Reduce::mean) return a / static_cast<float>(n_red);
  if constexpr (kKind == Reduce::l2) return std::sqrt(a);
  if constexpr (kKind == Reduce::log_sum_exp) return std::log(a) + shift;
  if constexpr (kKind == Reduce::log_sum) return std::log(a);
  return a;
}

// Output strides over the input's dims (0 on reduced dims): each input element adds into out[o].
std::vector<std::int64_t> reduce_output_strides(const std::vector<std::int64_t>& shape, const std::vector<bool>& red) {
  std::vector<std::int64_t> kept(shape.size());
  for (std::size_t k = 0; k < kept.size(); ++k) kept[k] = red[k] ? 1 : shape[k];
  std::vector<std::int64_t> ostride = contiguous_strides(kept);
  for (std::size_t k = 0; k < kept.size(); ++k)
    if (red[k]) ostride[k] = 0;
  return ostride;
}

// Each output's maximum (0 where it is not finite): log_sum_exp sums exp(v - max).
std::vector<float> row_maxima(const TensorRef& x, const std::vector<std::int64_t>& ostride, std::int64_t n_out) {
  std::vector<float> shift(static_cast<std::size_t>(n_out), -std::numeric_limits<float>::infinity());
  const float* px = x.as<float>();
  strided_loop(x.shape, {ostride}, [&](std::int64_t i, const Offsets& o) {
    float& m = shift[static_cast<std::size_t>(o[0])];
    m = px[i] > m ? px[i] : m;
  });
  for (float& m : shift) m = std::isfinite(m) ? m : 0.0f;
  return shift;
}

constexpr bool integer_reduce(Reduce k) { return k == Reduce::sum || k == Reduce::max || k == Reduce::min || k == Reduce::prod; }

// Sum, Max, Min and Prod over int64 or int32 (token counts, routing indices): exact integer arithmetic, wrapping
// on overflow as PyTorch's and ONNX Runtime's integer reductions do.
template <Reduce kKind, class T>
void reduce_integer(const TensorRef& x, const std::vector<std::int64_t>& ostride, const TensorRef& y) {
  using U = std::make_unsigned_t<T>;
  const std::int64_t n_out = y.elements();
  T init = 0;
  if constexpr (kKind == Reduce::max) init = std::numeric_limits<T>::lowest();
  if constexpr (kKind == Reduce::min) init = std::numeric_limits<T>::max();
  if constexpr (kKind == Reduce::prod) init = 1;
  std::vector<T> acc(static_cast<std::size_t>(n_out), init);
  const T* px = x.as<T>();
  strided_loop(x.shape, {ostride}, [&](std::int64_t i, const Offsets& o) {
    T& a = acc[static_cast<std::size_t>(o[0])];
    if constexpr (kKind == Reduce::sum) a = static_cast<T>(static_cast<U>(a) + static_cast<U>(px[i]));
    if constexpr (kKind == Reduce::prod) a = static_cast<T>(static_cast<U>(a) * static_cast<U>(px[i]));
    if constexpr (kKind == Reduce::max) a = std::max(a, px[i]);
    if constexpr (kKind == Reduce::min) a = std::min(a, px[i]);
  });
  std::copy(acc.begin(), acc.end(), y.as<T>());
}

template <Reduce kKind>
void k_reduce(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  if constexpr (integer_reduce(kKind)) {
    if (x.dtype == DType::i64 || x.dtype == DType::i32) {
      if (out[0].dtype != x.dtype) unsupported(op, "an integer reduction's output has its input's dtype");
      const auto ostride = reduce_output_strides(x.shape, reduced_axes(op, in, x.shape.size()));
      if (x.dtype == DType::i64) return reduce_integer<kKind, std::int64_t>(x, ostride, out[0]);
      return reduce_integer<kKind, std::int32_t>(x, ostride, out[0]);
    }
  }
  if (x.dtype != DType::f32) unsupported(op, "float32 only");
  const std::vector<std::int64_t> ostride = reduce_output_strides(x.shape, reduced_axes(op, in, x.shape.size()));
  const std::int64_t n_out = out[0].elements(), n_red = n_out ? x.elements() / std::max<std::int64_t>(n_out, 1) : 0;
  std::vector<float> acc(static_cast<std::size_t>(n_out), reduce_init<kKind>());
  const std::vector<float> shift = kKind == Reduce::log_sum_exp ? row_maxima(x, ostride, n_out)
                                                                 : std::vector<float>(static_cast<std::size_t>(n_out), 0.0f);
  const float* px = x.as<float>();
  strided_loop(x.shape, {ostride}, [&](std::int64_t i, const Offsets& o) {
    const auto k = static_cast<std::size_t>(o[0]);
    accumulate<kKind>(acc[k], px[i], shift[k]);
  });
  float* py = out[0].as<float>();
  for (std::int64_t i = 0; i < n_out; ++i)
    py[i] = finish<kKind>(acc[static_cast<std::size_t>(i)], n_red, shift[static_cast<std::size_t>(i)]);
}

// Softmax along one axis (opset 13 semantics) over x viewed as [outer, n, inner].
template <bool kLog>
void k_softmax(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  if (x.dtype != DType::f32) unsupported(op, "float32 only");
  const auto axis = static_cast<std::size_t>(normalize_axis(op, op.attr_int("axis", -1), x.shape.size()));
  const std::int64_t outer = dims_product(x.shape, 0, axis), n = x.shape.empty() ? 1 : x.shape[axis],
                     inner = dims_product(x.shape, axis + 1);
  const float* px = x.as<float>();
  float* py = out[0].as<float>();
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      const std::int64_t base = o * n * inner + i;
      float m = -std::numeric_limits<float>::infinity();
      for (std::int64_t k = 0; k < n; ++k) m = std::max(m, px[base + k * inner]);
      float sum = 0.0f;
      for (std::int64_t k = 0; k < n; ++k) {
        const float e = std::exp(px[base + k * inner] - m);
        sum += e;
        py[base + k * inner] = kLog ? px[base + k * inner] - m : e;
      }
      const float ls = std::log(sum);
      for (std::int64_t k = 0; k < n; ++k) py[base + k * inner] = kLog ? py[base + k * inner] - ls : py[base + k * inner] / sum;
    }
}

// LayerNormalization over the dims from `axis` on; optional outputs Mean and InvStdDev.
void k_layer_norm(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  if (x.dtype != DType::f32) unsupported(op, "float32 only");
  const auto axis = static_cast<std::size_t>(normalize_axis(op, op.attr_int("axis", -1), x.shape.size()));
  const float eps = static_cast<float>(op.attr_float("epsilon", 1e-5));
  const std::int64_t rows = dims_product(x.shape, 0, axis), n = dims_product(x.shape, axis);
  const TensorRef& scale = required(op, in, 1);
  const float* bias = in.size() > 2 && in[2].data ? in[2].as<float>() : nullptr;
  if (scale.elements() != n || (bias && in[2].elements() != n)) unsupported(op, "scale and bias must cover the normalised dims");
  const float* px = x.as<float>();
  float* py = out[0].as<float>();
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * n;
    float mean = 0.0f, var = 0.0f;
    for (std::int64_t j = 0; j < n; ++j) mean += xr[j];
    mean /= static_cast<float>(n);
    for (std::int64_t j = 0; j < n; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    var /= static_cast<float>(n);
    const float inv = 1.0f / std::sqrt(var + eps);
    float* yr = py + r * n;
    for (std::int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - mean) * inv * scale.as<float>()[j] + (bias ? bias[j] : 0.0f);
    if (out.size() > 1 && out[1].data) out[1].as<float>()[r] = mean;
    if (out.size() > 2 && out[2].data) out[2].as<float>()[r] = inv;
  }
}

}  // namespace

void add_reduce_kernels(KernelTable& t) {
  t["ReduceMean"] = {k_reduce<Reduce::mean>, false};
  constexpr DTypeMask kWithIntegers = kF32 | dtype_bit(DType::i64) | dtype_bit(DType::i32);
  t["ReduceSum"] = {k_reduce<Reduce::sum>, false, {kWithIntegers}};
  t["ReduceMax"] = {k_reduce<Reduce::max>, false, {kWithIntegers}};
  t["ReduceMin"] = {k_reduce<Reduce::min>, false, {kWithIntegers}};
  t["ReduceProd"] = {k_reduce<Reduce::prod>, false, {kWithIntegers}};
  t["ReduceSumSquare"] = {k_reduce<Reduce::sum_square>, false};
  t["ReduceL1"] = {k_reduce<Reduce::l1>, false};
  t["ReduceL2"] = {k_reduce<Reduce::l2>, false};
  t["ReduceLogSumExp"] = {k_reduce<Reduce::log_sum_exp>, false};
  t["ReduceLogSum"] = {k_reduce<Reduce::log_sum>, false};
  // Each row is read completely (statistics) before its outputs are written.
  t["Softmax"] = {k_softmax<false>, true};
  t["LogSoftmax"] = {k_softmax<true>, true};
  t["LayerNormalization"] = {k_layer_norm, true};
}

}  // namespace memplan::runtime::cpu
