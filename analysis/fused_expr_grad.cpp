// Reverse-mode differentiation of a fused elementwise expression into another fused expression (the
// backward kernel of a fused group rebuilds the forward values it needs from the group's inputs).
#include <bit>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>

#include "analysis/fused_expr.hpp"

namespace memplan::analysis {

namespace {

// Appends nodes with common subexpressions shared and trivial arithmetic simplified.
class Builder {
 public:
  explicit Builder(std::uint32_t num_inputs) { e_.num_inputs = num_inputs; }

  std::uint32_t input(std::uint32_t k) { return intern({ElemOp::input, k, 0, 0.0, 0.0}); }
  std::uint32_t constant(double v) { return intern({ElemOp::constant, 0, 0, static_cast<double>(static_cast<float>(v)), 0.0}); }

  // Any non-leaf node (its arguments already built here), simplified.
  std::uint32_t node(ExprNode n) {
    const int arity = elem_op_arity(n.op);
    if (arity == 0) return n.op == ElemOp::input ? input(n.a) : constant(n.p0);
    const auto ca = value(n.a);
    const auto cb = arity == 2 ? value(n.b) : std::optional<double>(0.0);
    if (ca && cb) return constant(fold(n, *ca, *cb));
    if (arity == 1) {
      if (n.op == ElemOp::identity) return n.a;
      if (n.op == ElemOp::neg && e_.nodes[n.a].op == ElemOp::neg) return e_.nodes[n.a].a;
      return intern(n);
    }
    if (const auto simpler = simplify(n, ca, cb)) return *simpler;
    return intern(n);
  }
  std::uint32_t un(ElemOp op, std::uint32_t a) { return node({op, a, 0, 0.0, 0.0}); }
  std::uint32_t bin(ElemOp op, std::uint32_t a, std::uint32_t b) { return node({op, a, b, 0.0, 0.0}); }

  std::optional<double> value(std::uint32_t v) const {
    if (e_.nodes[v].op == ElemOp::constant) return e_.nodes[v].p0;
    return std::nullopt;
  }

  // The expression of `result` alone: nodes it does not reach are dropped, the rest keep their order.
  FusedExpr finish(std::uint32_t result) const {
    std::vector<bool> need(e_.nodes.size(), false);
    need[result] = true;
    for (std::size_t k = result + 1; k-- > 0;) {
      if (!need[k]) continue;
      const ExprNode& n = e_.nodes[k];
      if (elem_op_arity(n.op) >= 1) need[n.a] = true;
      if (elem_op_arity(n.op) == 2) need[n.b] = true;
    }
    FusedExpr out;
    out.num_inputs = e_.num_inputs;
    std::vector<std::uint32_t> at(e_.nodes.size(), 0);
    for (std::size_t k = 0; k <= result; ++k) {
      if (!need[k]) continue;
      ExprNode n = e_.nodes[k];
      if (elem_op_arity(n.op) >= 1) n.a = at[n.a];
      if (elem_op_arity(n.op) == 2) n.b = at[n.b];
      at[k] = out.add(n);
    }
    return out;
  }

 private:
  static bool is(const std::optional<double>& c, double v) { return c && *c == v; }

  // A binary node with a constant argument that is trivial (x + 0, x * 1, x * 0, x / 1, x ^ 1, x ^ 0...): the node it
  // comes to. Otherwise nullopt, with the constant of a product moved second (x*c and c*x share one node).
  std::optional<std::uint32_t> simplify(ExprNode& n, const std::optional<double>& ca, const std::optional<double>& cb) {
    switch (n.op) {
      case ElemOp::add:
        if (is(ca, 0.0)) return n.b;
        if (is(cb, 0.0)) return n.a;
        break;
      case ElemOp::sub:
        if (is(cb, 0.0)) return n.a;
        if (is(ca, 0.0)) return un(ElemOp::neg, n.b);
        break;
      case ElemOp::mul:
        return simplify_product(n, ca, cb);
      case ElemOp::div:
        if (is(cb, 1.0)) return n.a;
        break;
      case ElemOp::pow:
        if (is(cb, 1.0)) return n.a;
        if (is(cb, 0.0)) return constant(1.0);
        break;
      default:
        break;
    }
    return std::nullopt;
  }

  std::optional<std::uint32_t> simplify_product(ExprNode& n, const std::optional<double>& ca, const std::optional<double>& cb) {
    // A structural zero: x * 0 is 0 whatever x is (autograd never multiplies by such a zero either).
    if (is(ca, 0.0) || is(cb, 0.0)) return constant(0.0);
    if (is(ca, 1.0)) return n.b;
    if (is(cb, 1.0)) return n.a;
    if (is(ca, -1.0)) return un(ElemOp::neg, n.b);
    if (is(cb, -1.0)) return un(ElemOp::neg, n.a);
    if (ca) std::swap(n.a, n.b);
    return std::nullopt;
  }

  // The float32 value of `n` on constant arguments, as evaluate() computes it.
  static double fold(const ExprNode& n, double a, double b) {
    FusedExpr tmp;
    tmp.add({ElemOp::constant, 0, 0, a, 0.0});
    tmp.add({ElemOp::constant, 0, 0, b, 0.0});
    ExprNode m = n;
    m.a = 0;
    m.b = 1;
    tmp.add(m);
    float scratch[3];
    return tmp.evaluate(nullptr, scratch);
  }

  std::uint32_t intern(const ExprNode& n) {
    // Doubles keyed by their bits: NaN constants compare equal to themselves.
    const auto key = std::make_tuple(static_cast<int>(n.op), n.a, elem_op_arity(n.op) == 2 ? n.b : 0u,
                                     std::bit_cast<std::uint64_t>(n.p0), std::bit_cast<std::uint64_t>(n.p1));
    if (auto it = seen_.find(key); it != seen_.end()) return it->second;
    const std::uint32_t v = e_.add(n);
    seen_.emplace(key, v);
    return v;
  }

  FusedExpr e_;
  std::map<std::tuple<int, std::uint32_t, std::uint32_t, std::uint64_t, std::uint64_t>, std::uint32_t> seen_;
};

// The reverse sweep: adjoints of every node, accumulated per operand. Nodes are created in one order on every
// compiler: no call takes two arguments that both create nodes (their evaluation order is unspecified).
class Reverse {
 public:
  Reverse(const FusedExpr& e, Builder& b) : e_(e), b_(b), fwd_(e.nodes.size()), adj_(e.nodes.size()), grads_(e.num_inputs) {}

  void run() {
    for (std::size_t k = 0; k < e_.nodes.size(); ++k) {
      ExprNode n = e_.nodes[k];
      if (elem_op_arity(n.op) >= 1) n.a = fwd_[n.a];
      if (elem_op_arity(n.op) == 2) n.b = fwd_[n.b];
      fwd_[k] = b_.node(n);
    }
    adj_.back() = b_.input(e_.num_inputs);  // dy
    for (std::size_t k = e_.nodes.size(); k-- > 0;)
      if (adj_[k]) step(k, *adj_[k]);
  }

  // dy * de/d(operand k); a constant 0 where the expression does not read it.
  std::uint32_t grad(std::uint32_t k) { return grads_[k] ? *grads_[k] : b_.constant(0.0); }

 private:
  std::uint32_t c(double v) { return b_.constant(v); }
  std::uint32_t mul(std::uint32_t a, std::uint32_t b) { return b_.bin(ElemOp::mul, a, b); }
  std::uint32_t add(std::uint32_t a, std::uint32_t b) { return b_.bin(ElemOp::add, a, b); }
  std::uint32_t sub(std::uint32_t a, std::uint32_t b) { return b_.bin(ElemOp::sub, a, b); }
  std::uint32_t div(std::uint32_t a, std::uint32_t b) { return b_.bin(ElemOp::div, a, b); }
  std::uint32_t neg(std::uint32_t a) { return b_.un(ElemOp::neg, a); }
  // 1 where a > b, 1/2 where a == b, 0 where a < b: max's selection of a, ties split as torch.maximum does.
  std::uint32_t pick(std::uint32_t a, std::uint32_t b) {
    const std::uint32_t gt = b_.bin(ElemOp::gt, a, b), ge = b_.bin(ElemOp::ge, a, b), half = c(0.5);
    return mul(half, add(gt, ge));
  }

  void acc(std::optional<std::uint32_t>& slot, std::uint32_t contribution) {
    slot = slot ? add(*slot, contribution) : contribution;
  }
  // Node `arg` receives g * local.
  void to(std::uint32_t arg, std::uint32_t g, std::uint32_t local) { acc(adj_[arg], mul(g, local)); }

  void step(std::size_t k, std::uint32_t g) {
    const ExprNode& n = e_.nodes[k];
    const std::uint32_t y = fwd_[k];
    const std::uint32_t x = elem_op_arity(n.op) >= 1 ? fwd_[n.a] : 0, w = elem_op_arity(n.op) == 2 ? fwd_[n.b] : 0;
    switch (n.op) {
      case ElemOp::input: acc(grads_[n.a], g); return;
      case ElemOp::constant:
      case ElemOp::gt:
      case ElemOp::ge:
      case ElemOp::floor:
      case ElemOp::ceil:
        return;  // piecewise constant
      case ElemOp::neg:
        acc(adj_[n.a], neg(g));
        return;
      case ElemOp::log:
        acc(adj_[n.a], div(g, x));
        return;
      case ElemOp::sqrt:
        acc(adj_[n.a], div(g, mul(y, c(2))));
        return;
      case ElemOp::identity:
        acc(adj_[n.a], g);
        return;
      case ElemOp::keep:
        acc(adj_[n.a], b_.bin(ElemOp::keep, g, w));
        return;  // the mask passes dy; the mask itself: none
      case ElemOp::add:
      case ElemOp::sub:
      case ElemOp::mul:
      case ElemOp::div:
      case ElemOp::pow:
      case ElemOp::max:
      case ElemOp::min:
        binary_step(n, g, x, w, y);
        return;
      default:
        to(n.a, g, is_trig(n.op) ? trig_local(n.op, x, y) : activation_local(n, x, y));
        return;
    }
  }

  void binary_step(const ExprNode& n, std::uint32_t g, std::uint32_t x, std::uint32_t w, std::uint32_t y) {
    switch (n.op) {
      case ElemOp::add: to(n.a, g, c(1)); to(n.b, g, c(1)); return;
      case ElemOp::sub: to(n.a, g, c(1)); acc(adj_[n.b], neg(g)); return;
      case ElemOp::mul: to(n.a, g, w); to(n.b, g, x); return;
      case ElemOp::div:
        acc(adj_[n.a], div(g, w));
        acc(adj_[n.b], neg(mul(g, div(y, w))));  // -g * a / b^2 = -g * y / b
        return;
      case ElemOp::pow:
        pow_step(n, g, x, w, y);
        return;
      case ElemOp::max: to(n.a, g, pick(x, w)); to(n.b, g, pick(w, x)); return;
      case ElemOp::min: to(n.a, g, pick(w, x)); to(n.b, g, pick(x, w)); return;
      default:
        return;
    }
  }

  void pow_step(const ExprNode& n, std::uint32_t g, std::uint32_t x, std::uint32_t w, std::uint32_t y) {
    const auto exponent = b_.value(w);
    if (exponent) {  // the common case: c * x^(c-1), 0 for c = 0
      std::uint32_t local = c(0);
      if (*exponent != 0.0) {
        const std::uint32_t power = b_.bin(ElemOp::pow, x, c(*exponent - 1.0)), scale = c(*exponent);
        local = mul(power, scale);
      }
      to(n.a, g, local);
    } else {
      to(n.a, g, mul(w, b_.bin(ElemOp::pow, x, sub(w, c(1)))));
      to(n.b, g, mul(y, b_.un(ElemOp::log, x)));
    }
  }

  // d(result)/dx of the activations and their kin (x the argument's node, y the result's).
  std::uint32_t activation_local(const ExprNode& n, std::uint32_t x, std::uint32_t y) {
    switch (n.op) {
      case ElemOp::abs: {
        const std::uint32_t pos = b_.bin(ElemOp::gt, x, c(0)), negative = b_.bin(ElemOp::gt, c(0), x);
        return sub(pos, negative);
      }
      case ElemOp::relu:
        return b_.bin(ElemOp::gt, x, c(0));
      case ElemOp::sigmoid:
        return mul(y, sub(c(1), y));
      case ElemOp::tanh: {
        const std::uint32_t one = c(1), yy = mul(y, y);
        return sub(one, yy);
      }
      case ElemOp::erf: {  // 2/sqrt(pi) exp(-x^2)
        const std::uint32_t gauss = b_.un(ElemOp::exp, neg(mul(x, x))), scale = c(1.1283791670955126);
        return mul(gauss, scale);
      }
      case ElemOp::exp:
        return y;
      case ElemOp::reciprocal:
        return neg(mul(y, y));
      case ElemOp::clip:
        return clip_mask(n, x);
      case ElemOp::leaky_relu: {  // torch: x > 0 ? 1 : alpha
        const double alpha = static_cast<float>(n.p0);
        const std::uint32_t positive = b_.bin(ElemOp::gt, x, c(0)), step = c(1.0 - alpha);
        const std::uint32_t scaled = mul(positive, step), floor = c(alpha);
        return add(scaled, floor);
      }
      default:
        fail(ErrorKind::unsupported, std::string("fused expression gradient: no rule for ") + elem_op_name(n.op));
    }
  }

  // torch.clamp: the gradient passes where lo <= x <= hi.
  std::uint32_t clip_mask(const ExprNode& n, std::uint32_t x) {
    std::uint32_t mask = c(1);
    if (!std::isinf(n.p0) || n.p0 > 0) mask = mul(mask, b_.bin(ElemOp::ge, x, c(n.p0)));
    if (!std::isinf(n.p1) || n.p1 < 0) mask = mul(mask, b_.bin(ElemOp::ge, c(n.p1), x));
    return mask;
  }

  static bool is_trig(ElemOp op) {
    switch (op) {
      case ElemOp::tan:
      case ElemOp::asin:
      case ElemOp::acos:
      case ElemOp::atan:
      case ElemOp::sinh:
      case ElemOp::cosh:
      case ElemOp::asinh:
      case ElemOp::acosh:
      case ElemOp::atanh:
        return true;
      default:
        return false;
    }
  }

  // d(result)/dx of the trigonometric and hyperbolic functions and their inverses.
  std::uint32_t trig_local(ElemOp op, std::uint32_t x, std::uint32_t y) {
    switch (op) {
      case ElemOp::tan:
        return add(c(1), mul(y, y));  // 1 + tan^2
      case ElemOp::asin:  // 1 / sqrt(1 - x^2), acos its negation
      case ElemOp::acos: {
        const std::uint32_t d = b_.un(ElemOp::reciprocal, b_.un(ElemOp::sqrt, sub(c(1), mul(x, x))));
        return op == ElemOp::asin ? d : neg(d);
      }
      case ElemOp::atan:
        return b_.un(ElemOp::reciprocal, add(c(1), mul(x, x)));
      case ElemOp::sinh:
        return b_.un(ElemOp::cosh, x);
      case ElemOp::cosh:
        return b_.un(ElemOp::sinh, x);
      case ElemOp::asinh:
        return b_.un(ElemOp::reciprocal, b_.un(ElemOp::sqrt, add(mul(x, x), c(1))));
      case ElemOp::acosh:
        return b_.un(ElemOp::reciprocal, b_.un(ElemOp::sqrt, sub(mul(x, x), c(1))));
      default:
        return b_.un(ElemOp::reciprocal, sub(c(1), mul(x, x)));  // atanh
    }
  }

  const FusedExpr& e_;
  Builder& b_;
  std::vector<std::uint32_t> fwd_;                   // forward node -> its node in the builder
  std::vector<std::optional<std::uint32_t>> adj_;    // forward node -> dy * d(result)/d(node)
  std::vector<std::optional<std::uint32_t>> grads_;  // operand -> its gradient
};

}  // namespace

FusedExpr gradient_expr(const FusedExpr& e, std::uint32_t input) {
  if (input >= e.num_inputs)
    fail(ErrorKind::usage, "gradient of fused expression '" + e.to_string() + "' for operand " + std::to_string(input) +
                               " of " + std::to_string(e.num_inputs));
  if (e.nodes.empty()) fail(ErrorKind::malformed, "gradient of an empty fused expression");
  Builder b(e.num_inputs + 1);
  Reverse r(e, b);
  r.run();
  return b.finish(r.grad(input));
}

}  // namespace memplan::analysis
