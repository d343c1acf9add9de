// Activations and variadic ops written in the fused-expression IR's existing nodes, so that fusion, the
// NVRTC kernels and gradient_expr cover them without new node kinds (the forms avoid exp overflow).
#include <cmath>
#include <string_view>
#include <utility>

#include "analysis/fused_expr.hpp"

namespace memplan::analysis {
namespace {

constexpr std::string_view kActivations[] = {"Elu",      "Selu",     "Celu",    "ThresholdedRelu", "HardSigmoid",
                                             "HardSwish", "Softplus", "Softsign", "Shrink",          "Mish",
                                             "PRelu",     "Sum",      "Mean",     "Max",             "Min",
                                             "Swish",     "Tan",      "Asin",     "Acos",            "Atan",
                                             "Sinh",      "Cosh",     "Asinh",    "Acosh",           "Atanh"};

// The trigonometric and hyperbolic ops: one node each.
constexpr std::pair<std::string_view, ElemOp> kTrig[] = {{"Tan", ElemOp::tan},     {"Asin", ElemOp::asin},   {"Acos", ElemOp::acos},
                                                         {"Atan", ElemOp::atan},   {"Sinh", ElemOp::sinh},   {"Cosh", ElemOp::cosh},
                                                         {"Asinh", ElemOp::asinh}, {"Acosh", ElemOp::acosh}, {"Atanh", ElemOp::atanh}};

struct Builder {
  FusedExpr& e;
  std::uint32_t c(double v) { return e.add({ElemOp::constant, 0, 0, v, 0.0}); }
  std::uint32_t un(ElemOp op, std::uint32_t a) { return e.add({op, a, 0, 0.0, 0.0}); }
  std::uint32_t bin(ElemOp op, std::uint32_t a, std::uint32_t b) { return e.add({op, a, b, 0.0, 0.0}); }
  std::uint32_t add(std::uint32_t a, std::uint32_t b) { return bin(ElemOp::add, a, b); }
  std::uint32_t sub(std::uint32_t a, std::uint32_t b) { return bin(ElemOp::sub, a, b); }
  std::uint32_t mul(std::uint32_t a, std::uint32_t b) { return bin(ElemOp::mul, a, b); }
  std::uint32_t clip(std::uint32_t a, double lo, double hi) { return e.add({ElemOp::clip, a, 0, lo, hi}); }
  // min(x, 0) as x - relu(x): its derivative at 0 is 1 (PyTorch's ELU and PReLU take the negative branch at 0).
  std::uint32_t negative_part(std::uint32_t x) { return sub(x, un(ElemOp::relu, x)); }
  // alpha * (exp(min(x, 0) / alpha) - 1) + relu(x): ELU (alpha > 0), CELU with the division.
  std::uint32_t elu(std::uint32_t x, double alpha, bool celu) {
    std::uint32_t neg = negative_part(x);
    if (celu) neg = mul(neg, c(1.0 / alpha));
    const std::uint32_t em1 = sub(un(ElemOp::exp, neg), c(1.0));
    return add(un(ElemOp::relu, x), mul(c(alpha), em1));
  }
  // log(1 + exp(x)) as max(x, 0) + log(1 + exp(-|x|)): no overflow; max's even tie split gives 1/2 at 0.
  std::uint32_t softplus(std::uint32_t x) {
    const std::uint32_t tail = un(ElemOp::log, add(c(1.0), un(ElemOp::exp, un(ElemOp::neg, un(ElemOp::abs, x)))));
    return add(bin(ElemOp::max, x, c(0.0)), tail);
  }
  std::uint32_t fold(ElemOp op, const std::vector<std::uint32_t>& xs) {
    std::uint32_t v = xs[0];
    for (std::size_t i = 1; i < xs.size(); ++i) v = bin(op, v, xs[i]);
    return v;
  }
};

}  // namespace

bool expressible_activation(const Op& op) {
  for (std::string_view t : kActivations)
    if (op.type == t) return (t != "Max" && t != "Min") || op.inputs.size() != 2;  // two: simple_op's node
  return false;
}

void build_activation(FusedExpr& e, const Op& op, const std::vector<std::uint32_t>& xs) {
  Builder b{e};
  const std::uint32_t x = xs.at(0);
  const std::string& t = op.type;
  if (t == "Elu") {
    b.elu(x, op.attr_float("alpha", 1.0), false);
  } else if (t == "Selu") {
    const std::uint32_t v = b.elu(x, op.attr_float("alpha", 1.6732632423543772), false);
    b.mul(b.c(op.attr_float("gamma", 1.0507009873554805)), v);
  } else if (t == "Celu") {
    b.elu(x, op.attr_float("alpha", 1.0), true);
  } else if (t == "ThresholdedRelu") {  // x where x > alpha, else 0 (NaN too, as ONNX Runtime)
    b.bin(ElemOp::keep, x, b.bin(ElemOp::gt, x, b.c(op.attr_float("alpha", 1.0))));
  } else if (t == "HardSigmoid") {
    b.clip(b.add(b.mul(x, b.c(op.attr_float("alpha", 0.2))), b.c(op.attr_float("beta", 0.5))), 0.0, 1.0);
  } else if (t == "HardSwish") {
    b.mul(x, b.clip(b.add(b.mul(x, b.c(1.0 / 6.0)), b.c(0.5)), 0.0, 1.0));
  } else if (t == "Softplus") {
    b.softplus(x);
  } else if (t == "Softsign") {
    b.bin(ElemOp::div, x, b.add(b.c(1.0), b.un(ElemOp::abs, x)));
  } else if (t == "Shrink") {  // x - bias above lambd, x + bias below -lambd, else 0
    const double lambd = op.attr_float("lambd", 0.5), bias = op.attr_float("bias", 0.0);
    const std::uint32_t hi = b.bin(ElemOp::keep, b.sub(x, b.c(bias)), b.bin(ElemOp::gt, x, b.c(lambd)));
    const std::uint32_t lo = b.bin(ElemOp::keep, b.add(x, b.c(bias)), b.bin(ElemOp::gt, b.c(-lambd), x));
    b.add(hi, lo);
  } else if (t == "Swish") {  // x * sigmoid(alpha x): PyTorch's SiLU with alpha 1
    b.mul(x, b.un(ElemOp::sigmoid, b.mul(x, b.c(op.attr_float("alpha", 1.0)))));
  } else if (t == "Mish") {
    b.mul(x, b.un(ElemOp::tanh, b.softplus(x)));
  } else if (t == "PRelu") {  // relu(x) + slope * min(x, 0)
    b.add(b.un(ElemOp::relu, x), b.mul(xs.at(1), b.negative_part(x)));
  } else if (t == "Sum" || t == "Mean") {
    const std::uint32_t s = b.fold(ElemOp::add, xs);
    if (t == "Mean") b.mul(s, b.c(1.0 / static_cast<double>(xs.size())));
    else if (xs.size() == 1) b.un(ElemOp::identity, s);
  } else if (t == "Max" || t == "Min") {
    const std::uint32_t v = b.fold(t == "Max" ? ElemOp::max : ElemOp::min, xs);
    if (xs.size() == 1) b.un(ElemOp::identity, v);
  } else {
    for (const auto& [name, node] : kTrig)
      if (t == name) {
        b.un(node, x);
        return;
      }
    fail(ErrorKind::usage, "build_activation: op type '" + t + "' has no expression");
  }
}

}  // namespace memplan::analysis
