// Tests of the symbolic derivative of fused elementwise expressions: finite differences on random
// expressions over every ElemOp, torch's rules at kinks, shared subexpressions, simplification.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "analysis/fused_expr.hpp"

using namespace memplan;
using namespace memplan::analysis;

namespace {

constexpr std::uint32_t kSeed = 20260517;  // printed with every failure

const ElemOp kAllOps[] = {ElemOp::add,  ElemOp::sub,        ElemOp::mul,     ElemOp::div,      ElemOp::pow,  ElemOp::max,
                          ElemOp::min,  ElemOp::neg,        ElemOp::abs,     ElemOp::relu,     ElemOp::sigmoid,
                          ElemOp::tanh, ElemOp::erf,        ElemOp::exp,     ElemOp::log,      ElemOp::sqrt,
                          ElemOp::reciprocal, ElemOp::identity, ElemOp::clip, ElemOp::leaky_relu, ElemOp::gt, ElemOp::ge,
                          ElemOp::tan,  ElemOp::asin,       ElemOp::acos,    ElemOp::atan,     ElemOp::sinh, ElemOp::cosh,
                          ElemOp::asinh, ElemOp::acosh,     ElemOp::atanh, ElemOp::keep};

// Random expression over `inputs` operands with `ops` operations; `forced` is among them.
FusedExpr random_expr(std::mt19937& rng, std::uint32_t inputs, int ops, ElemOp forced) {
  FusedExpr e;
  e.num_inputs = inputs;
  for (std::uint32_t k = 0; k < inputs; ++k) e.add({ElemOp::input, k, 0, 0, 0});
  const int forced_at = static_cast<int>(rng() % static_cast<std::uint32_t>(ops));
  for (int i = 0; i < ops; ++i) {
    const ElemOp op = i == forced_at ? forced : kAllOps[rng() % std::size(kAllOps)];
    const auto n = static_cast<std::uint32_t>(e.nodes.size());
    // Prefer recent nodes so that expressions are chains with some reuse.
    auto pick = [&] { return n - 1 - std::min<std::uint32_t>(n - 1, static_cast<std::uint32_t>(rng() % 3)); };
    ExprNode node{op, pick(), static_cast<std::uint32_t>(rng() % n), -0.6, 0.7};
    if (op == ElemOp::leaky_relu) node.p0 = 0.1;
    if (op == ElemOp::pow && rng() % 2) {  // a constant exponent, the common case
      const double c[] = {2.0, 3.0, 0.5, -1.0, 1.5};
      node.b = e.add({ElemOp::constant, 0, 0, c[rng() % std::size(c)], 0});
    }
    if (op == ElemOp::clip && rng() % 3 == 0) node.p1 = HUGE_VAL;
    e.add(node);
  }
  return e;
}

// Whether every node at `x` is finite, moderate, inside its domain and away from kinks and ties.
bool well_behaved(const FusedExpr& e, const std::vector<float>& x) {
  std::vector<float> v(e.nodes.size());
  e.evaluate(x.data(), v.data());
  constexpr float m = 0.05f;
  for (std::size_t k = 0; k < e.nodes.size(); ++k) {
    const ExprNode& n = e.nodes[k];
    if (!std::isfinite(v[k]) || std::fabs(v[k]) > 50.0f) return false;
    const float a = elem_op_arity(n.op) >= 1 ? v[n.a] : 0.0f, b = elem_op_arity(n.op) == 2 ? v[n.b] : 0.0f;
    switch (n.op) {
      case ElemOp::abs: case ElemOp::relu: case ElemOp::leaky_relu:
        if (std::fabs(a) < m) return false;
        break;
      case ElemOp::keep:  // away from the mask's switch
        if (std::fabs(b) < m) return false;
        break;
      case ElemOp::max: case ElemOp::min: case ElemOp::gt: case ElemOp::ge:
        if (std::fabs(a - b) < m) return false;
        break;
      case ElemOp::clip:
        if (std::fabs(a - static_cast<float>(n.p0)) < m || std::fabs(a - static_cast<float>(n.p1)) < m) return false;
        break;
      case ElemOp::log: case ElemOp::sqrt:
        if (a < 0.2f) return false;
        break;
      case ElemOp::pow:
        if (a < 0.2f || std::fabs(b) > 4.0f) return false;
        break;
      case ElemOp::asin: case ElemOp::acos: case ElemOp::atanh:  // inside (-1, 1), away from the poles of the derivative
        if (std::fabs(a) > 0.85f) return false;
        break;
      case ElemOp::acosh:
        if (a < 1.15f) return false;
        break;
      case ElemOp::tan:
        if (std::fabs(std::cos(a)) < 0.3f) return false;
        break;
      case ElemOp::div: case ElemOp::reciprocal:
        if (std::fabs(n.op == ElemOp::div ? b : a) < 0.2f) return false;
        break;
      default: break;
    }
  }
  return true;
}

float eval(const FusedExpr& e, const std::vector<float>& x) {
  std::vector<float> scratch(e.nodes.size());
  return e.evaluate(x.data(), scratch.data());
}

}  // namespace

TEST_CASE("gradient_expr matches central finite differences on random expressions over every ElemOp") {
  std::mt19937 rng(kSeed);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  int checked = 0;
  for (ElemOp forced : kAllOps) {
    int points = 0;
    for (int trial = 0; trial < 400 && points < 40; ++trial) {
      const std::uint32_t inputs = 1 + rng() % 3;
      const FusedExpr e = random_expr(rng, inputs, 2 + static_cast<int>(rng() % 5), forced);
      std::vector<float> x(inputs);
      bool ok = false;
      for (int attempt = 0; attempt < 20 && !ok; ++attempt) {
        for (auto& xi : x) xi = value(rng);
        ok = well_behaved(e, x);
        for (std::uint32_t k = 0; k < inputs && ok; ++k)
          for (float s : {-2e-3f, 2e-3f}) {
            auto xs = x;
            xs[k] += s;
            ok = ok && well_behaved(e, xs);
          }
      }
      if (!ok) continue;
      const float dy = 0.5f + 0.5f * std::fabs(value(rng));
      for (std::uint32_t k = 0; k < inputs; ++k) {
        const FusedExpr g = gradient_expr(e, k);
        REQUIRE(g.num_inputs == inputs + 1);
        auto with_dy = x;
        with_dy.push_back(dy);
        const double analytic = eval(g, with_dy);
        constexpr float h = 1e-3f;
        auto hi = x, lo = x;
        hi[k] += h;
        lo[k] -= h;
        const double fd = dy * (static_cast<double>(eval(e, hi)) - eval(e, lo)) / (static_cast<double>(hi[k]) - lo[k]);
        INFO("seed " << kSeed << ", forced op " << elem_op_name(forced) << ", expression '" << e.to_string()
                     << "', operand " << k << ", gradient '" << g.to_string() << "': analytic " << analytic << ", FD " << fd);
        CHECK(std::fabs(analytic - fd) <= 2e-2 * std::max(std::fabs(analytic), std::fabs(fd)) + 5e-3);
        ++checked;
      }
      ++points;
    }
    INFO("forced op " << elem_op_name(forced));
    CHECK(points >= 10);  // every op was exercised on enough well-behaved points
  }
  MESSAGE(checked << " derivatives checked");
}

TEST_CASE("gradient_expr follows PyTorch at kinks and ties") {
  auto grad_at = [](const char* text, std::uint32_t k, std::vector<float> x) {
    const FusedExpr e = FusedExpr::parse(text);
    x.push_back(1.0f);  // dy
    return eval(gradient_expr(e, k), x);
  };
  CHECK(grad_at("in 0;relu 0", 0, {0.0f}) == 0.0f);
  CHECK(grad_at("in 0;abs 0", 0, {0.0f}) == 0.0f);
  CHECK(grad_at("in 0;abs 0", 0, {-3.0f}) == -1.0f);
  CHECK(grad_at("in 0;leaky_relu 0 0.25", 0, {0.0f}) == 0.25f);
  CHECK(grad_at("in 0;in 1;max 0 1", 0, {1.0f, 1.0f}) == 0.5f);
  CHECK(grad_at("in 0;in 1;max 0 1", 1, {1.0f, 1.0f}) == 0.5f);
  CHECK(grad_at("in 0;in 1;min 0 1", 0, {1.0f, 2.0f}) == 1.0f);
  CHECK(grad_at("in 0;in 1;min 0 1", 1, {1.0f, 2.0f}) == 0.0f);
  CHECK(grad_at("in 0;clip 0 -1 1", 0, {1.0f}) == 1.0f);  // bounds included, as torch.clamp
  CHECK(grad_at("in 0;clip 0 -1 1", 0, {1.5f}) == 0.0f);
  CHECK(grad_at("in 0;const 0;pow 0 1", 0, {0.0f}) == 0.0f);  // x^0: no gradient, no 0 * inf
  CHECK(grad_at("in 0;const 2;pow 0 1", 0, {3.0f}) == 6.0f);
}

TEST_CASE("gradient_expr shares forward values and simplifies trivial arithmetic") {
  SUBCASE("forward nodes first, then dy; a bias's gradient is dy itself") {
    const FusedExpr g = gradient_expr(FusedExpr::parse("in 0;in 1;add 0 1;tanh 2"), 1);
    CHECK(g.to_string() == "in 0;in 1;add 0 1;tanh 2;in 2;const 1;mul 3 3;sub 5 6;mul 4 7");
    CHECK(gradient_expr(FusedExpr::parse("in 0;in 1;add 0 1"), 1).to_string() == "in 2");
    CHECK(gradient_expr(FusedExpr::parse("in 0;const 3;mul 0 1"), 0).to_string() == "const 3;in 1;mul 1 0");
  }
  SUBCASE("each forward node is rebuilt once, however many derivatives read it") {
    // sigmoid(sigmoid(x)) * sigmoid(x): the inner sigmoid feeds three derivative terms.
    const FusedExpr g = gradient_expr(FusedExpr::parse("in 0;sigmoid 0;sigmoid 1;mul 2 1"), 0);
    CHECK(std::count_if(g.nodes.begin(), g.nodes.end(), [](const ExprNode& n) { return n.op == ElemOp::sigmoid; }) == 2);
    CHECK(std::count_if(g.nodes.begin(), g.nodes.end(), [](const ExprNode& n) { return n.op == ElemOp::input; }) == 2);
  }
  SUBCASE("an operand the expression does not read has gradient 0") {
    FusedExpr e = FusedExpr::parse("in 0;exp 0");
    e.num_inputs = 2;
    CHECK(gradient_expr(e, 1).to_string() == "const 0");
  }
  SUBCASE("gt and ge read back from text") {
    const FusedExpr e = FusedExpr::parse("in 0;in 1;gt 0 1;ge 0 1;add 2 3");
    CHECK(e.to_string() == "in 0;in 1;gt 0 1;ge 0 1;add 2 3");
    CHECK(eval(e, {1.0f, 1.0f}) == 1.0f);
    CHECK(eval(e, {2.0f, 1.0f}) == 2.0f);
    CHECK_THROWS_AS(gradient_expr(e, 2), Error);
  }
}
