// CPU elementwise kernels: unary math, broadcasting binary ops and comparisons, Where, IsNaN, Clip, Cast, fused.
#include <cmath>
#include <limits>
#include <vector>

#include "runtime_allocator/kernels/cpu_kernels.hpp"
#include "runtime_allocator/kernels/fused_cpu.hpp"

namespace memplan::runtime::cpu {
namespace {

// Unary float32 kernels: y[i] = F(x[i]) read before written, so y may alias x.
template <class F>
void unary_f32(const Op& op, const Refs& in, const Refs& out, F f) {
  const TensorRef& x = required(op, in, 0);
  if (x.dtype != DType::f32) unsupported(op, std::string("float32 only, got ") + analysis::dtype_name(x.dtype));
  const float* px = x.as<float>();
  float* py = out[0].as<float>();
  const std::int64_t n = x.elements();
  for (std::int64_t i = 0; i < n; ++i) py[i] = f(px[i]);
}

#define MEMPLAN_UNARY(NAME, EXPR)                                                   \
  void NAME(const Op& op, const Refs& in, const Refs& out) {                        \
    unary_f32(op, in, out, [&](float x) -> float { return EXPR; });                 \
  }
MEMPLAN_UNARY(k_relu, x > 0.0f || x != x ? x : 0.0f)  // NaN propagates, as in ONNX Runtime and PyTorch
MEMPLAN_UNARY(k_sigmoid, 1.0f / (1.0f + std::exp(-x)))
MEMPLAN_UNARY(k_tanh, std::tanh(x))
MEMPLAN_UNARY(k_erf, std::erf(x))
MEMPLAN_UNARY(k_sqrt, std::sqrt(x))
MEMPLAN_UNARY(k_exp, std::exp(x))
MEMPLAN_UNARY(k_log, std::log(x))
MEMPLAN_UNARY(k_abs, std::fabs(x))
MEMPLAN_UNARY(k_reciprocal, 1.0f / x)
MEMPLAN_UNARY(k_floor, std::floor(x))
MEMPLAN_UNARY(k_ceil, std::ceil(x))
MEMPLAN_UNARY(k_softplus, std::fmax(x, 0.0f) + std::log1p(std::exp(-std::fabs(x))))  // no overflow
MEMPLAN_UNARY(k_leaky_relu, x >= 0.0f ? x : x * static_cast<float>(op.attr_float("alpha", 0.01)))
MEMPLAN_UNARY(k_elu, x >= 0.0f ? x : static_cast<float>(op.attr_float("alpha", 1.0)) * (std::exp(x) - 1.0f))
MEMPLAN_UNARY(k_hard_sigmoid, x != x ? x
                                      : std::fmax(0.0f, std::fmin(1.0f, static_cast<float>(op.attr_float("alpha", 0.2)) * x +
                                                                            static_cast<float>(op.attr_float("beta", 0.5)))))
MEMPLAN_UNARY(k_hard_swish, x * std::fmax(0.0f, std::fmin(1.0f, x / 6.0f + 0.5f)))
MEMPLAN_UNARY(k_gelu, op.attr_string("approximate", "none") == "tanh"
                          ? 0.5f * x * (1.0f + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x)))
                          : 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)))
MEMPLAN_UNARY(k_round, std::nearbyint(x))
MEMPLAN_UNARY(k_sign, x != x ? x : static_cast<float>((x > 0.0f) - (x < 0.0f)))
MEMPLAN_UNARY(k_sin, std::sin(x))
MEMPLAN_UNARY(k_cos, std::cos(x))
MEMPLAN_UNARY(k_mish, x * std::tanh(std::log1p(std::exp(x))))
MEMPLAN_UNARY(k_swish, x / (1.0f + std::exp(-static_cast<float>(op.attr_float("alpha", 1.0)) * x)))
MEMPLAN_UNARY(k_selu, static_cast<float>(op.attr_float("gamma", 1.0507009873554805)) *
                          (x > 0.0f ? x : static_cast<float>(op.attr_float("alpha", 1.6732632423543772)) * (std::exp(x) - 1.0f)))
// max(0, x) + min(0, alpha (exp(x / alpha) - 1)) with NaN propagated (std::fmax/fmin would drop it, ONNX Runtime keeps it).
MEMPLAN_UNARY(k_celu, x > 0.0f ? x : x <= 0.0f ? static_cast<float>(op.attr_float("alpha", 1.0)) *
                                                     (std::exp(x / static_cast<float>(op.attr_float("alpha", 1.0))) - 1.0f)
                                               : x)
#undef MEMPLAN_UNARY

void k_neg(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  visit_dtype(op, x.dtype, [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, std::uint8_t>) unsupported(op, "unsigned or bool input");
    else
      for (std::int64_t i = 0; i < x.elements(); ++i) out[0].as<T>()[i] = static_cast<T>(-x.as<T>()[i]);
  });
}

void k_not(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  if (x.dtype != DType::boolean) unsupported(op, "bool input expected");
  for (std::int64_t i = 0; i < x.elements(); ++i) out[0].as<bool>()[i] = !x.as<bool>()[i];
}

void k_is_nan(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  if (x.dtype != DType::f32) unsupported(op, "float32 input expected");
  for (std::int64_t i = 0; i < x.elements(); ++i) out[0].as<bool>()[i] = std::isnan(x.as<float>()[i]);
}

// Clip of int64 or int32 values (ONNX 12+): bounds of the input's dtype, absent ones the dtype's range.
template <class T>
void clip_integer(const Op& op, const Refs& in, const Refs& out) {
  auto bound = [&](std::size_t i, T fallback) {
    if (i >= in.size() || !in[i].data) return fallback;
    if (in[i].dtype != in[0].dtype || in[i].elements() != 1) unsupported(op, "input " + std::to_string(i) + " must be a scalar of the input's dtype");
    return *in[i].as<T>();
  };
  const T lo = bound(1, std::numeric_limits<T>::lowest()), hi = bound(2, std::numeric_limits<T>::max());
  const T* x = in[0].as<T>();
  T* y = out[0].as<T>();
  for (std::int64_t i = 0; i < in[0].elements(); ++i) y[i] = x[i] < lo ? lo : (x[i] > hi ? hi : x[i]);
}

void k_clip(const Op& op, const Refs& in, const Refs& out) {
  if (required(op, in, 0).dtype == DType::i64) return clip_integer<std::int64_t>(op, in, out);
  if (in[0].dtype == DType::i32) return clip_integer<std::int32_t>(op, in, out);
  // Bounds not given are the float range's ends (ONNX: numeric_limits lowest() and max()), so +-inf clip to them.
  const float lo = scalar_value(op, in, 1, static_cast<float>(op.attr_float("min", std::numeric_limits<float>::lowest())));
  const float hi = scalar_value(op, in, 2, static_cast<float>(op.attr_float("max", std::numeric_limits<float>::max())));
  unary_f32(op, in, out, [&](float x) { return x < lo ? lo : (x > hi ? hi : x); });
}

// Binary ops with numpy broadcasting over the numeric dtypes; `Out` is T, or bool for comparisons.
template <bool kCompare, class F>
void binary(const Op& op, const Refs& in, const Refs& out, F f) {
  const TensorRef& a = required(op, in, 0);
  const TensorRef& b = required(op, in, 1);
  if (a.dtype != b.dtype) unsupported(op, "operands of different dtypes");
  visit_dtype(op, a.dtype, [&](auto tag) {
    using T = decltype(tag);
    using Out = std::conditional_t<kCompare, bool, T>;
    const T* pa = a.as<T>();
    const T* pb = b.as<T>();
    Out* py = out[0].as<Out>();
    broadcast_loop(out[0].shape, {&a.shape, &b.shape},
                   [&](std::int64_t i, const Offsets& o) { py[i] = static_cast<Out>(f(op, pa[o[0]], pb[o[1]])); });
  });
}

template <class T>
T divide(const Op& op, T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b == 0) fail(ErrorKind::runtime, "op '" + op.name + "' (Div): integer division by zero");
    if constexpr (std::is_signed_v<T>)
      if (a == std::numeric_limits<T>::min() && b == T(-1)) return a;
  }
  return static_cast<T>(a / b);
}

template <class T>
bool negative(T x) {
  if constexpr (std::is_signed_v<T>) return x < T(0);
  else return false;
}

#define MEMPLAN_BINARY(NAME, CMP, EXPR)                                             \
  void NAME(const Op& op, const Refs& in, const Refs& out) {                        \
    binary<CMP>(op, in, out, [](const Op& o, auto x, auto y) { (void)o; return EXPR; }); \
  }
MEMPLAN_BINARY(k_add, false, x + y)
MEMPLAN_BINARY(k_sub, false, x - y)
MEMPLAN_BINARY(k_mul, false, x * y)
MEMPLAN_BINARY(k_div, false, divide(o, x, y))
MEMPLAN_BINARY(k_pow, false, std::pow(x, y))
// NaN from either operand propagates (numpy's maximum/minimum, ONNX Runtime); x != x is false for integers.
MEMPLAN_BINARY(k_max2, false, x != x ? x : y != y ? y : x < y ? y : x)
MEMPLAN_BINARY(k_min2, false, x != x ? x : y != y ? y : y < x ? y : x)
MEMPLAN_BINARY(k_equal, true, x == y)
MEMPLAN_BINARY(k_less, true, x < y)
MEMPLAN_BINARY(k_less_equal, true, x <= y)
MEMPLAN_BINARY(k_greater, true, x > y)
MEMPLAN_BINARY(k_greater_equal, true, x >= y)
MEMPLAN_BINARY(k_prelu, false, negative(x) ? y * x : x)
MEMPLAN_BINARY(k_and, false, x && y)
MEMPLAN_BINARY(k_or, false, x || y)
#undef MEMPLAN_BINARY

// Max/Min of one or more inputs folded left to right (two-input form is the common one).
template <KernelFn F2>
void variadic(const Op& op, const Refs& in, const Refs& out) {
  if (in.size() == 1) return copy_if_moved(out[0].data, required(op, in, 0).data, out[0].bytes);
  if (in.size() == 2) return F2(op, in, out);
  // Three or more: folded in a buffer of the output's shape, copied out last (the output may share the bytes of
  // any input, which a fold straight into it would overwrite before reading).
  std::vector<std::byte> acc(out[0].bytes);
  TensorRef a = out[0];
  a.data = acc.data();
  const Refs folded{a};
  F2(op, {required(op, in, 0), required(op, in, 1)}, folded);
  for (std::size_t k = 2; k < in.size(); ++k) F2(op, {a, required(op, in, k)}, folded);
  copy_if_moved(out[0].data, acc.data(), out[0].bytes);
}

void k_where(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& c = required(op, in, 0);
  const TensorRef& x = required(op, in, 1);
  const TensorRef& y = required(op, in, 2);
  if (c.dtype != DType::boolean || x.dtype != y.dtype) unsupported(op, "bool condition and equal value dtypes expected");
  const std::uint64_t esize = analysis::dtype_bits(x.dtype) / 8;
  const bool* pc = c.as<bool>();
  broadcast_loop(out[0].shape, {&c.shape, &x.shape, &y.shape}, [&](std::int64_t i, const Offsets& o) {
    const std::byte* src = pc[o[0]] ? x.data + o[1] * static_cast<std::int64_t>(esize) : y.data + o[2] * static_cast<std::int64_t>(esize);
    std::memmove(out[0].data + i * static_cast<std::int64_t>(esize), src, esize);
  });
}

// Casts from or to bf16/f16 go through f32 (rounded to nearest even on the way down), as PyTorch's .to() does
// for float sources; a float64 source is rounded twice (to f32, then to the 16-bit type).
void cast_low_precision(const Op& op, const TensorRef& x, const TensorRef& y) {
  const auto n = static_cast<std::size_t>(x.elements());
  std::vector<float> f(n);
  if (is_low_precision(x)) {
    widen(x, f.data());
  } else {
    visit_dtype(op, x.dtype, [&](auto from) {
      using From = decltype(from);
      for (std::size_t i = 0; i < n; ++i) f[i] = static_cast<float>(x.as<From>()[i]);
    });
  }
  if (is_low_precision(y)) return narrow(f.data(), y);
  visit_dtype(op, y.dtype, [&](auto to) {
    using To = decltype(to);
    for (std::size_t i = 0; i < n; ++i) y.as<To>()[i] = static_cast<To>(f[i]);
  });
}

void k_cast(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  if (is_low_precision(x) || is_low_precision(out[0])) return cast_low_precision(op, x, out[0]);
  const std::int64_t n = x.elements();
  visit_dtype(op, x.dtype, [&](auto from) {
    using From = decltype(from);
    visit_dtype(op, out[0].dtype, [&](auto to) {
      using To = decltype(to);
      // Element i is read before it is written; a wider output never aliases its input (sizes differ).
      for (std::int64_t i = 0; i < n; ++i) out[0].as<To>()[i] = static_cast<To>(x.as<From>()[i]);
    });
  });
}

}  // namespace

void add_elementwise_kernels(KernelTable& t) {
  for (auto [name, fn] : std::initializer_list<std::pair<const char*, KernelFn>>{
           {"Relu", k_relu}, {"Sigmoid", k_sigmoid}, {"Tanh", k_tanh}, {"Erf", k_erf}, {"Sqrt", k_sqrt},
           {"Exp", k_exp}, {"Log", k_log}, {"Abs", k_abs}, {"Reciprocal", k_reciprocal}, {"Floor", k_floor},
           {"Ceil", k_ceil}, {"Softplus", k_softplus}, {"LeakyRelu", k_leaky_relu}, {"Elu", k_elu},
           {"HardSigmoid", k_hard_sigmoid}, {"HardSwish", k_hard_swish}, {"Gelu", k_gelu}, {"Clip", k_clip},
           {"Round", k_round}, {"Sign", k_sign}, {"Sin", k_sin}, {"Cos", k_cos}, {"Mish", k_mish}, {"Selu", k_selu},
           {"Celu", k_celu}, {"memplan::FusedElementwise", run_fused_cpu}, {"Swish", k_swish}})
    t[name] = {fn, true, {kF32}};  // float32 only
  // numpy broadcasting over the dtypes visit_dtype knows.
  for (auto [name, fn] : std::initializer_list<std::pair<const char*, KernelFn>>{
           {"Add", k_add}, {"Sub", k_sub}, {"Mul", k_mul}, {"Div", k_div}, {"Pow", k_pow}, {"Equal", k_equal},
           {"Less", k_less}, {"LessOrEqual", k_less_equal}, {"Greater", k_greater}, {"GreaterOrEqual", k_greater_equal},
           {"And", k_and}, {"Or", k_or}, {"PRelu", k_prelu}})
    t[name] = {fn, true, {kVisitedDTypes}};
  // One input is copied whatever its dtype; two are compared over visit_dtype's dtypes.
  t["Clip"] = {k_clip, true, {kF32 | dtype_bit(DType::i64) | dtype_bit(DType::i32)}};  // integer bounds too
  t["Max"] = {variadic<k_max2>, true, {kAnyDType}};
  t["Min"] = {variadic<k_min2>, true, {kAnyDType}};
  t["Neg"] = {k_neg, true, {kF32 | dtype_bit(DType::f64) | dtype_bit(DType::i64) | dtype_bit(DType::i32)}};
  t["Not"] = {k_not, true, {kBool}};
  t["Where"] = {k_where, true, {kBool}};  // input 0 is the condition; values of any fixed-size dtype
  t["Cast"] = {k_cast, true, {kVisitedDTypes | kLowFloat}, true};  // exact aliasing only happens between equal element sizes
  t["IsNaN"] = {k_is_nan, false, {kF32}};
}

}  // namespace memplan::runtime::cpu
