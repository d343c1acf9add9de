// Fused elementwise expressions: text form, float32 evaluation, and the expression of one ONNX op.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "analysis/fused_expr.hpp"
#include "analysis/fused_expr_types.hpp"

namespace memplan::analysis {

namespace {

constexpr std::array<const char*, 36> kNames = {
    "in",  "const", "add", "sub",  "mul",     "div", "pow", "max",  "min",        "neg",      "abs",
    "relu", "sigmoid", "tanh", "erf", "exp", "log", "sqrt", "reciprocal", "identity", "clip", "leaky_relu",
    "gt",   "ge",    "floor", "ceil", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "keep",
};

// Reads a node or operand index: decimal digits only (">>" into an unsigned would take "-1" as 2^32 - 1).
bool read_index(std::istream& in, std::uint32_t& v) {
  std::string tok;
  if (!(in >> tok) || tok.empty() || tok.size() > 9) return false;
  for (char ch : tok)
    if (ch < '0' || ch > '9') return false;
  v = static_cast<std::uint32_t>(std::stoul(tok));
  return true;
}

// Reads a double written by fmt_double ("inf", "-inf" and "nan" included, which >> rejects).
bool read_double(std::istream& in, double& v) {
  std::string tok;
  if (!(in >> tok)) return false;
  char* end = nullptr;
  v = std::strtod(tok.c_str(), &end);
  return end == tok.c_str() + tok.size();
}

std::string fmt_double(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

const char* elem_op_name(ElemOp op) noexcept { return kNames[static_cast<std::size_t>(op)]; }

int elem_op_arity(ElemOp op) noexcept {
  if (op == ElemOp::input || op == ElemOp::constant) return 0;
  if ((op >= ElemOp::add && op <= ElemOp::min) || op == ElemOp::gt || op == ElemOp::ge || op == ElemOp::keep) return 2;
  return 1;
}

std::uint32_t FusedExpr::add(ExprNode n) {
  nodes.push_back(n);
  return static_cast<std::uint32_t>(nodes.size() - 1);
}

std::size_t FusedExpr::op_count() const {
  return static_cast<std::size_t>(std::count_if(nodes.begin(), nodes.end(), [](const ExprNode& n) {
    return elem_op_arity(n.op) > 0;
  }));
}

std::string FusedExpr::to_string() const {
  std::string s;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const ExprNode& n = nodes[i];
    if (i) s += ';';
    s += elem_op_name(n.op);
    switch (n.op) {
      case ElemOp::input: s += ' ' + std::to_string(n.a); break;
      case ElemOp::constant: s += ' ' + fmt_double(n.p0); break;
      case ElemOp::clip: s += ' ' + std::to_string(n.a) + ' ' + fmt_double(n.p0) + ' ' + fmt_double(n.p1); break;
      case ElemOp::leaky_relu: s += ' ' + std::to_string(n.a) + ' ' + fmt_double(n.p0); break;
      default:
        s += ' ' + std::to_string(n.a);
        if (elem_op_arity(n.op) == 2) s += ' ' + std::to_string(n.b);
    }
  }
  return s;
}

FusedExpr FusedExpr::parse(std::string_view text) {
  FusedExpr e;
  std::stringstream all{std::string(text)};
  std::string item;
  auto bad = [&](const std::string& why) -> void {
    fail(ErrorKind::malformed, "fused expression '" + std::string(text) + "': " + why);
  };
  while (std::getline(all, item, ';')) {
    std::stringstream in(item);
    std::string name;
    in >> name;
    auto it = std::find_if(kNames.begin(), kNames.end(), [&](const char* n) { return name == n; });
    if (it == kNames.end()) bad("unknown operation '" + name + "'");
    ExprNode n;
    n.op = static_cast<ElemOp>(it - kNames.begin());
    const auto here = static_cast<std::uint32_t>(e.nodes.size());
    bool ok = true;
    if (n.op == ElemOp::constant) {
      ok = read_double(in, n.p0);
    } else {
      ok = read_index(in, n.a);
      if (elem_op_arity(n.op) == 2) ok = ok && read_index(in, n.b);
      if (n.op == ElemOp::clip) ok = ok && read_double(in, n.p0) && read_double(in, n.p1);
      if (n.op == ElemOp::leaky_relu) ok = ok && read_double(in, n.p0);
    }
    std::string extra;
    ok = ok && !(in >> extra);  // nothing after the node's fields
    if (!ok) bad("cannot read node " + std::to_string(here) + " '" + item + "'");
    if (n.op == ElemOp::input) {
      e.num_inputs = std::max(e.num_inputs, n.a + 1);
    } else if (elem_op_arity(n.op) > 0 && (n.a >= here || (elem_op_arity(n.op) == 2 && n.b >= here))) {
      bad("node " + std::to_string(here) + " refers to a later node");
    }
    e.nodes.push_back(n);
  }
  if (e.nodes.empty()) bad("no nodes");
  return e;
}

namespace {

// An operation of two arguments on float32 values, as the kernels compute it.
inline float binary_value(ElemOp op, float x, float y) {
  switch (op) {
    case ElemOp::add:
      return x + y;
    case ElemOp::sub:
      return x - y;
    case ElemOp::mul:
      return x * y;
    case ElemOp::div:
      return x / y;
    case ElemOp::pow:
      return std::pow(x, y);
    case ElemOp::max:
      return x != x || y != y ? std::numeric_limits<float>::quiet_NaN() : std::fmax(x, y);  // NaN
    case ElemOp::min:
      return x != x || y != y ? std::numeric_limits<float>::quiet_NaN() : std::fmin(x, y);  // kept
    case ElemOp::gt:
      return x > y ? 1.0f : 0.0f;
    case ElemOp::ge:
      return x >= y ? 1.0f : 0.0f;
    case ElemOp::keep:
      return y > 0.0f ? x : 0.0f;
    default:
      return 0.0f;
  }
}

// The trigonometric and hyperbolic functions and their inverses.
inline float trig_value(ElemOp op, float x) {
  switch (op) {
    case ElemOp::tan:
      return std::tan(x);
    case ElemOp::asin:
      return std::asin(x);
    case ElemOp::acos:
      return std::acos(x);
    case ElemOp::atan:
      return std::atan(x);
    case ElemOp::sinh:
      return std::sinh(x);
    case ElemOp::cosh:
      return std::cosh(x);
    case ElemOp::asinh:
      return std::asinh(x);
    case ElemOp::acosh:
      return std::acosh(x);
    case ElemOp::atanh:
      return std::atanh(x);
    default:
      return 0.0f;
  }
}

// An operation of one argument.
inline float unary_value(const ExprNode& n, float x) {
  switch (n.op) {
    case ElemOp::neg:
      return -x;
    case ElemOp::abs:
      return std::fabs(x);
    case ElemOp::relu:
      return x > 0.0f || x != x ? x : 0.0f;  // NaN propagates, as the Relu kernel
    case ElemOp::sigmoid:
      return 1.0f / (1.0f + std::exp(-x));
    case ElemOp::tanh:
      return std::tanh(x);
    case ElemOp::erf:
      return std::erf(x);
    case ElemOp::exp:
      return std::exp(x);
    case ElemOp::log:
      return std::log(x);
    case ElemOp::sqrt:
      return std::sqrt(x);
    case ElemOp::reciprocal:
      return 1.0f / x;
    case ElemOp::identity:
      return x;
    case ElemOp::clip:
      return x != x ? x : std::fmin(std::fmax(x, static_cast<float>(n.p0)), static_cast<float>(n.p1));
    case ElemOp::leaky_relu:
      return x >= 0.0f ? x : x * static_cast<float>(n.p0);
    case ElemOp::floor:
      return std::floor(x);
    case ElemOp::ceil:
      return std::ceil(x);
    default:
      return trig_value(n.op, x);
  }
}

}  // namespace

float FusedExpr::evaluate(const float* operand_values, float* v) const {
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const ExprNode& n = nodes[i];
    const int arity = elem_op_arity(n.op);
    if (n.op == ElemOp::input)
      v[i] = operand_values[n.a];
    else if (n.op == ElemOp::constant)
      v[i] = static_cast<float>(n.p0);
    else if (arity == 2)
      v[i] = binary_value(n.op, v[n.a], v[n.b]);
    else
      v[i] = unary_value(n, v[n.a]);
  }
  return v[nodes.size() - 1];
}

namespace {

// A known single float value (a scalar constant), if `t` is one.
std::optional<double> scalar_constant(const Graph& g, TensorId t) {
  if (t == kNoTensor) return std::nullopt;
  const auto& x = g.tensors[t];
  if (!x.data || x.data->element_count() != 1 || !analysis::dtype_is_float(x.data->dtype)) return std::nullopt;
  return x.data->as_double().front();
}

bool all_f32(const Graph& g, const Op& op) {
  for (TensorId t : op.inputs)
    if (t != kNoTensor && (g.tensors[t].dtype != DType::f32 || !g.tensors[t].shape_known())) return false;
  for (TensorId t : op.outputs)
    if (t == kNoTensor || g.tensors[t].dtype != DType::f32 || !g.tensors[t].shape_known()) return false;
  return op.outputs.size() == 1;
}

// Operand i of the op: its scalar constant value inlined, otherwise an input node.
std::uint32_t operand(FusedExpr& e, const Graph& g, const Op& op, std::size_t i) {
  if (auto c = scalar_constant(g, op.inputs[i])) return e.add({ElemOp::constant, 0, 0, *c, 0.0});
  return e.add({ElemOp::input, static_cast<std::uint32_t>(i), 0, 0.0, 0.0});
}

std::optional<ElemOp> simple_op(const std::string& type) {
  static const std::pair<const char*, ElemOp> table[] = {
      {"Add", ElemOp::add},       {"Sub", ElemOp::sub},         {"Mul", ElemOp::mul},   {"Div", ElemOp::div},
      {"Pow", ElemOp::pow},       {"Max", ElemOp::max},         {"Min", ElemOp::min},   {"Neg", ElemOp::neg},
      {"Abs", ElemOp::abs},       {"Relu", ElemOp::relu},       {"Sigmoid", ElemOp::sigmoid},
      {"Tanh", ElemOp::tanh},     {"Erf", ElemOp::erf},         {"Exp", ElemOp::exp},   {"Log", ElemOp::log},
      {"Sqrt", ElemOp::sqrt},     {"Reciprocal", ElemOp::reciprocal}, {"Cast", ElemOp::identity},
      {"LeakyRelu", ElemOp::leaky_relu}, {"Clip", ElemOp::clip}, {"Floor", ElemOp::floor}, {"Ceil", ElemOp::ceil},
  };
  for (const auto& [name, op] : table)
    if (type == name) return op;
  return std::nullopt;
}

}  // namespace

bool elementwise_expr_covers(const OpInfo& info) {
  if (info.domain == kMemplanDomain) return info.type == kFusedOpType;
  if (!info.domain.empty()) return false;
  Op probe;
  probe.type = std::string(info.type);
  probe.inputs = {0, 1, 2};  // three operands: Max/Min and Sum/Mean of any arity are activations
  return info.type == "Gelu" || simple_op(probe.type).has_value() || expressible_activation(probe);
}

std::optional<FusedExpr> elementwise_expr(const Graph& g, OpId id) { return elementwise_expr(g, g.ops[id]); }

std::optional<FusedExpr> float32_expr(const Graph& g, const Op& op) {
  Graph m;
  m.opset = g.opset;
  std::map<TensorId, TensorId> copied;
  auto copy = [&](TensorId t) -> TensorId {
    if (t == kNoTensor) return kNoTensor;
    if (auto it = copied.find(t); it != copied.end()) return it->second;
    const Tensor& src = g.tensors[t];
    Tensor x;
    x.name = "t";
    x.name += std::to_string(copied.size());  // (GCC 12 warns falsely of overlap on "t" + std::to_string)
    x.dtype = dtype_is_float(src.dtype) ? DType::f32 : src.dtype;
    x.dims = src.dims;
    x.rank_known = src.rank_known;
    x.data = src.data;  // scalar constants are read as numbers whatever their dtype
    return copied[t] = m.add_tensor(std::move(x));
  };
  Op f = op;
  f.inputs.clear();
  f.outputs.clear();
  for (TensorId t : op.inputs) f.inputs.push_back(copy(t));
  for (TensorId t : op.outputs) {
    if (t != kNoTensor && copied.count(t)) return std::nullopt;  // an output that is also an input: not elementwise
    f.outputs.push_back(copy(t));
  }
  m.add_op(std::move(f));
  return elementwise_expr(m, 0);
}

namespace {

// Gelu with approximate="tanh": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GPT-2's gelu_new.
void build_gelu_tanh(FusedExpr& e, const Graph& g, const Op& op) {
  const auto x = operand(e, g, op, 0);
  auto c = [&](double v) { return e.add({ElemOp::constant, 0, 0, v, 0.0}); };
  const auto x3 = e.add({ElemOp::mul, x, e.add({ElemOp::mul, x, x, 0, 0}), 0, 0});
  const auto inner = e.add({ElemOp::add, x, e.add({ElemOp::mul, x3, c(0.044715), 0, 0}), 0, 0});
  const auto th = e.add({ElemOp::tanh, e.add({ElemOp::mul, inner, c(0.7978845608028654), 0, 0}), 0, 0, 0});
  const auto one = e.add({ElemOp::add, th, c(1.0), 0, 0});
  e.add({ElemOp::mul, e.add({ElemOp::mul, x, c(0.5), 0, 0}), one, 0, 0});
}

// Gelu of opset 20, exact form: x * 0.5 * (1 + erf(x / sqrt(2))).
void build_gelu_erf(FusedExpr& e, const Graph& g, const Op& op) {
  const auto x = operand(e, g, op, 0);
  const auto r2 = e.add({ElemOp::constant, 0, 0, 1.4142135623730951, 0.0});
  const auto er = e.add({ElemOp::erf, e.add({ElemOp::div, x, r2, 0, 0}), 0, 0, 0});
  const auto one = e.add({ElemOp::add, er, e.add({ElemOp::constant, 0, 0, 1.0, 0}), 0, 0});
  e.add({ElemOp::mul, e.add({ElemOp::mul, x, e.add({ElemOp::constant, 0, 0, 0.5, 0}), 0, 0}), one, 0, 0});
}

// Clip's bounds: the attributes (ONNX's defaults: the float range's ends), or the scalar constants of inputs 1 and 2;
// false where a bound is computed at run time (it cannot be inlined).
bool clip_bounds(const Graph& g, const Op& op, ExprNode& n) {
  n.p0 = op.attr_float("min", std::numeric_limits<float>::lowest());
  n.p1 = op.attr_float("max", std::numeric_limits<float>::max());
  for (std::size_t i = 1; i < op.inputs.size() && i < 3; ++i) {
    if (op.inputs[i] == kNoTensor) continue;
    auto c = scalar_constant(g, op.inputs[i]);
    if (!c) return false;
    (i == 1 ? n.p0 : n.p1) = *c;
  }
  return true;
}

// One node of a simple op (simple_op's table) over its operands; false where the operands do not fit its arity.
bool build_simple(FusedExpr& e, const Graph& g, const Op& op, ElemOp kind) {
  const int arity = elem_op_arity(kind);
  if (op.inputs[0] == kNoTensor) return false;
  if (arity == 2 && (op.inputs.size() != 2 || op.inputs[1] == kNoTensor)) return false;
  if (arity == 1 && kind != ElemOp::clip && op.inputs.size() != 1) return false;
  ExprNode n{kind, operand(e, g, op, 0), 0, 0.0, 0.0};
  if (arity == 2) n.b = operand(e, g, op, 1);
  if (kind == ElemOp::leaky_relu) n.p0 = op.attr_float("alpha", 0.01);
  if (kind == ElemOp::clip && !clip_bounds(g, op, n)) return false;
  e.add(n);
  return true;
}

}  // namespace

std::optional<FusedExpr> elementwise_expr(const Graph& g, const Op& op) {
  if (op.domain == kMemplanDomain && op.type == kFusedOpType) return FusedExpr::parse(op.attr_string("expr", ""));
  if (!op.domain.empty() && op.domain != "ai.onnx") return std::nullopt;
  if (!all_f32(g, op) || op.inputs.empty()) return std::nullopt;
  FusedExpr e;
  e.num_inputs = static_cast<std::uint32_t>(op.inputs.size());
  if (op.type == "Gelu") {
    const std::string approximate = op.attr_string("approximate", "none");
    if (approximate == "tanh")
      build_gelu_tanh(e, g, op);
    else if (approximate == "none")
      build_gelu_erf(e, g, op);
    else
      return std::nullopt;
    return e;
  }
  if (expressible_activation(op)) {  // fused_expr_activations.cpp
    std::vector<std::uint32_t> xs;
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      if (op.inputs[i] == kNoTensor) return std::nullopt;
      xs.push_back(operand(e, g, op, i));
    }
    build_activation(e, op, xs);
    return e;
  }
  const auto kind = simple_op(op.type);
  if (!kind || !build_simple(e, g, op, *kind)) return std::nullopt;
  return e;
}

}  // namespace memplan::analysis
