// Constant folding of arithmetic: elementwise (int64 wrap-around or double), Cast, Range, NonZero and reductions.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <string>

#include "analysis/shape_rules.hpp"

namespace memplan::analysis::shape_detail {
namespace {

std::int64_t to_int(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 9.2e18) return std::numeric_limits<std::int64_t>::max();
  if (v <= -9.2e18) return std::numeric_limits<std::int64_t>::min();
  return static_cast<std::int64_t>(v);
}

template <typename T>
void put(std::vector<std::byte>& b, std::size_t k, T v) {
  std::memcpy(b.data() + k * sizeof(T), &v, sizeof(T));
}

// Integers are stored with C++20's modular conversion, never through double (which loses int64 range).
TensorData make_ints(const OpContext& c, DType t, const Shape& dims, const std::vector<std::int64_t>& v) {
  if (dtype_is_float(t)) {
    std::vector<double> d(v.begin(), v.end());
    return TensorData::from_double(t, dims, d);
  }
  TensorData d{t, dims, {}};
  d.bytes.resize(v.size() * element_bytes(c, t));
  for (std::size_t k = 0; k < v.size(); ++k) {
    switch (t) {
      case DType::boolean: put<std::uint8_t>(d.bytes, k, v[k] != 0); break;
      case DType::i8: put(d.bytes, k, static_cast<std::int8_t>(v[k])); break;
      case DType::u8: put(d.bytes, k, static_cast<std::uint8_t>(v[k])); break;
      case DType::i16: put(d.bytes, k, static_cast<std::int16_t>(v[k])); break;
      case DType::u16: put(d.bytes, k, static_cast<std::uint16_t>(v[k])); break;
      case DType::i32: put(d.bytes, k, static_cast<std::int32_t>(v[k])); break;
      case DType::u32: put(d.bytes, k, static_cast<std::uint32_t>(v[k])); break;
      case DType::i64: put(d.bytes, k, v[k]); break;
      case DType::u64: put(d.bytes, k, static_cast<std::uint64_t>(v[k])); break;
      default: fail(ErrorKind::unsupported, c.where() + ": cannot fold values of dtype " + dtype_name(t));
    }
  }
  return d;
}

TensorData make_doubles(const OpContext& c, DType t, const Shape& dims, const std::vector<double>& v) {
  if (dtype_is_float(t)) return TensorData::from_double(t, dims, v);
  std::vector<std::int64_t> i(v.size());
  if (t == DType::boolean) std::transform(v.begin(), v.end(), i.begin(), [](double x) -> std::int64_t { return x != 0.0; });
  else std::transform(v.begin(), v.end(), i.begin(), to_int);
  return make_ints(c, t, dims, i);
}

std::uint64_t wrap(std::int64_t v) { return static_cast<std::uint64_t>(v); }

// Min, Max and comparisons mean the same on integers and floats; false when `op` is none of them.
template <typename T>
bool same_on_ints_and_floats(const std::string& op, T a, T b, T& r) {
  if (op == "Min") r = std::min(a, b);
  else if (op == "Max") r = std::max(a, b);
  else if (op == "Equal") r = a == b;
  else if (op == "Less") r = a < b;
  else if (op == "Greater") r = a > b;
  else if (op == "LessOrEqual") r = a <= b;
  else if (op == "GreaterOrEqual") r = a >= b;
  else return false;
  return true;
}

std::int64_t int_binary(const OpContext& c, const std::string& op, std::int64_t a, std::int64_t b) {
  if (op == "Add" || op == "Sum") return static_cast<std::int64_t>(wrap(a) + wrap(b));
  if (op == "Sub") return static_cast<std::int64_t>(wrap(a) - wrap(b));
  if (op == "Mul") return static_cast<std::int64_t>(wrap(a) * wrap(b));
  if (std::int64_t r; same_on_ints_and_floats(op, a, b, r)) return r;
  if (op == "And") return a && b;
  if (op == "Or") return a || b;
  if (op == "Xor") return (a != 0) != (b != 0);
  if (b == 0) c.fail_shape("division by zero while folding constants");
  if (b == -1) return op == "Div" ? static_cast<std::int64_t>(0 - wrap(a)) : 0;
  if (op == "Div") return a / b;
  const std::int64_t r = a % b;  // Mod: fmod=1 keeps the dividend's sign, fmod=0 the divisor's (Python)
  if (c.op().attr_int("fmod", 0) != 0) return r;
  return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}

double float_binary(const std::string& op, double a, double b) {
  if (op == "Add" || op == "Sum") return a + b;
  if (op == "Sub") return a - b;
  if (op == "Mul") return a * b;
  if (op == "Div") return a / b;
  if (op == "Mod") return std::fmod(a, b);
  if (op == "Pow") return std::pow(a, b);
  double r = 0.0;
  same_on_ints_and_floats(op, a, b, r);
  return r;
}

bool any_float_input(const OpContext& c) {
  for (std::size_t i = 0; i < c.num_inputs(); ++i)
    if (c.has_input(i) && dtype_is_float(c.in_dtype(i))) return true;
  return false;
}

// Variadic broadcasting elementwise op, folded left to right (Sum, Min, Max take any number of inputs).
std::vector<TensorData> binary_eval(const OpContext& c) {
  const Shape out = c.out_shape(0);
  const std::string& op = c.op().type;
  const bool fp = any_float_input(c) || op == "Pow";
  std::vector<std::vector<std::uint64_t>> strides;
  for (std::size_t i = 0; i < c.num_inputs(); ++i) strides.push_back(broadcast_strides(c.in_shape(i), out.size()));
  std::vector<std::vector<std::int64_t>> iv;
  std::vector<std::vector<double>> dv;
  for (std::size_t i = 0; i < c.num_inputs(); ++i)
    if (fp) dv.push_back(c.in_value(i)->as_double());
    else iv.push_back(c.in_value(i)->as_int64());
  std::vector<std::int64_t> ri;
  std::vector<double> rd;
  for_each_index(out, [&](const std::vector<std::int64_t>& o, std::uint64_t) {
    std::uint64_t at0 = 0;
    for (std::size_t k = 0; k < o.size(); ++k) at0 += static_cast<std::uint64_t>(o[k]) * strides[0][k];
    std::int64_t ai = fp ? 0 : iv[0][at0];
    double ad = fp ? dv[0][at0] : 0.0;
    for (std::size_t i = 1; i < c.num_inputs(); ++i) {
      std::uint64_t at = 0;
      for (std::size_t k = 0; k < o.size(); ++k) at += static_cast<std::uint64_t>(o[k]) * strides[i][k];
      if (fp) ad = float_binary(op, ad, dv[i][at]);
      else ai = int_binary(c, op, ai, iv[i][at]);
    }
    if (fp) rd.push_back(ad);
    else ri.push_back(ai);
  });
  return {fp ? make_doubles(c, c.out_dtype(0), out, rd) : make_ints(c, c.out_dtype(0), out, ri)};
}

std::vector<TensorData> unary_eval(const OpContext& c) {
  const std::string& op = c.op().type;
  if (!dtype_is_float(c.in_dtype(0))) {
    auto v = c.in_value(0)->as_int64();
    for (auto& x : v) {
      if (op == "Neg") x = static_cast<std::int64_t>(0 - wrap(x));
      else if (op == "Abs") x = x < 0 ? static_cast<std::int64_t>(0 - wrap(x)) : x;
      else if (op == "Not") x = x == 0;
      else if (op == "Sign") x = (x > 0) - (x < 0);
    }
    return {make_ints(c, c.out_dtype(0), c.out_shape(0), v)};
  }
  static const std::map<std::string, double (*)(double)> fns = {
      {"Neg", [](double x) { return -x; }},   {"Abs", [](double x) { return std::fabs(x); }},
      {"Floor", [](double x) { return std::floor(x); }}, {"Ceil", [](double x) { return std::ceil(x); }},
      {"Sqrt", [](double x) { return std::sqrt(x); }},   {"Reciprocal", [](double x) { return 1.0 / x; }},
      {"Sign", [](double x) { return static_cast<double>((x > 0) - (x < 0)); }},
      {"Round", [](double x) { return std::nearbyint(x); }}, {"Not", [](double x) { return x == 0.0 ? 1.0 : 0.0; }}};
  auto v = c.in_value(0)->as_double();
  const auto fn = fns.at(op);
  for (auto& x : v) x = fn(x);
  return {make_doubles(c, c.out_dtype(0), c.out_shape(0), v)};
}

std::vector<TensorData> cast_eval(const OpContext& c) {
  const TensorData& in = *c.in_value(0);
  if (dtype_is_float(in.dtype)) return {make_doubles(c, c.out_dtype(0), c.out_shape(0), in.as_double())};
  return {make_ints(c, c.out_dtype(0), c.out_shape(0), in.as_int64())};
}

std::vector<TensorData> range_eval(const OpContext& c) {
  const auto n = static_cast<std::size_t>(c.out_shape(0)[0]);
  if (dtype_is_float(c.out_dtype(0))) {
    const double s = c.in_value(0)->as_double()[0], d = c.in_value(2)->as_double()[0];
    std::vector<double> v(n);
    for (std::size_t k = 0; k < n; ++k) v[k] = s + static_cast<double>(k) * d;
    return {make_doubles(c, c.out_dtype(0), c.out_shape(0), v)};
  }
  const std::int64_t s = c.in_value(0)->as_int64()[0], d = c.in_value(2)->as_int64()[0];
  std::vector<std::int64_t> v(n);
  for (std::size_t k = 0; k < n; ++k) v[k] = static_cast<std::int64_t>(wrap(s) + k * wrap(d));
  return {make_ints(c, c.out_dtype(0), c.out_shape(0), v)};
}

// OneHot of known indices: values[1] where an index (negative ones from depth) names the position along axis.
std::vector<TensorData> one_hot_eval(const OpContext& c) {
  const Shape out = c.out_shape(0);
  const auto idx = c.in_value(0)->as_double();
  const auto values = c.in_value(2)->as_double();
  const std::size_t axis = c.axis(c.op().attr_int("axis", -1), out.size(), "axis");
  const std::int64_t depth = out[axis];
  std::int64_t inner = 1;
  for (std::size_t k = axis + 1; k < out.size(); ++k) inner *= out[k];
  std::vector<double> v(idx.size() * static_cast<std::size_t>(depth), values.at(0));
  for (std::size_t i = 0; i < idx.size(); ++i) {
    const double at = idx[i] < 0 ? idx[i] + static_cast<double>(depth) : idx[i];
    if (at < 0 || at >= static_cast<double>(depth)) continue;
    const auto o = static_cast<std::int64_t>(i) / inner, r = static_cast<std::int64_t>(i) % inner;
    v[static_cast<std::size_t>((o * depth + static_cast<std::int64_t>(at)) * inner + r)] = values.at(1);
  }
  return {make_doubles(c, c.out_dtype(0), out, v)};
}

// NonZero of a known x: the indices of its nonzero elements in row-major order, one row per axis.
std::vector<TensorData> non_zero_eval(const OpContext& c) {
  const Shape x = c.in_shape(0);
  const auto v = c.in_value(0)->as_double();
  const auto n = static_cast<std::size_t>(c.out_shape(0).at(1));
  std::vector<std::int64_t> out(x.size() * n);
  std::size_t k = 0;
  for (std::size_t flat = 0; flat < v.size(); ++flat) {
    if (v[flat] == 0.0) continue;
    std::size_t rest = flat;
    for (std::size_t d = x.size(); d-- > 0;) {
      out[d * n + k] = static_cast<std::int64_t>(rest % static_cast<std::size_t>(x[d]));
      rest /= static_cast<std::size_t>(x[d]);
    }
    ++k;
  }
  return {make_ints(c, DType::i64, c.out_shape(0), out)};
}

// Reductions in double (exact for the small integers of shape arithmetic).
std::vector<TensorData> reduce_eval(const OpContext& c) {
  bool keepdims = true;
  const auto axes = reduce_axes(c, keepdims);
  const Shape in = c.in_shape(0);
  Shape kept = in;  // the output with keepdims=1, which has the same element order
  for (auto a : axes) kept[a] = 1;
  const std::string& op = c.op().type;
  const auto st = broadcast_strides(kept, in.size());
  const auto v = c.in_value(0)->as_double();
  const std::uint64_t n = static_cast<std::uint64_t>(c.product(kept));
  const double init = op == "ReduceProd" ? 1.0 : op == "ReduceMax" ? -HUGE_VAL : op == "ReduceMin" ? HUGE_VAL : 0.0;
  std::vector<double> acc(n, init);
  for_each_index(in, [&](const std::vector<std::int64_t>& idx, std::uint64_t flat) {
    std::uint64_t at = 0;
    for (std::size_t k = 0; k < idx.size(); ++k) at += static_cast<std::uint64_t>(idx[k]) * st[k];
    double& a = acc[at];
    if (op == "ReduceProd") a *= v[flat];
    else if (op == "ReduceMax") a = std::max(a, v[flat]);
    else if (op == "ReduceMin") a = std::min(a, v[flat]);
    else a += v[flat];
  });
  if (op == "ReduceMean" && n > 0) {
    const double per = static_cast<double>(v.size() / n);
    for (auto& a : acc) a /= per;
  }
  return {make_doubles(c, c.out_dtype(0), c.out_shape(0), acc)};
}

}  // namespace

void add_fold_rules(RuleTable& t) {
  for (const char* name : {"Add", "Sub", "Mul", "Div", "Mod", "Pow", "Min", "Max", "Sum", "Equal", "Less", "Greater",
                           "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor"})
    t.at(name).eval = &binary_eval;
  for (const char* name : {"Neg", "Abs", "Not", "Sign", "Floor", "Ceil", "Sqrt", "Reciprocal", "Round"})
    t.at(name).eval = &unary_eval;
  t.at("Cast").eval = &cast_eval;
  t.at("Range").eval = &range_eval;
  t.at("NonZero").eval = &non_zero_eval;
  t.at("OneHot").eval = &one_hot_eval;
  for (const char* name : {"ReduceProd", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceMean"}) t.at(name).eval = &reduce_eval;
  add_fold_move_rules(t);
}

}  // namespace memplan::analysis::shape_detail
