// Tests of the activations written as fused expressions: values against their ONNX definitions (in double),
// no overflow at large |x|, derivatives against central differences, PyTorch's kinks, variadic folds.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "analysis/fused_expr.hpp"

using namespace memplan;
using namespace memplan::analysis;

namespace {

struct Case {
  std::string type;
  std::map<std::string, Attribute> attrs;
  std::function<double(double)> ref;  // ONNX's definition
};

Attribute fa(double v) {
  Attribute a;
  a.kind = Attribute::Kind::f;
  a.f = v;
  return a;
}

double softplus(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }

std::vector<Case> cases() {
  return {
      {"Elu", {{"alpha", fa(0.7)}}, [](double x) { return x >= 0 ? x : 0.7 * (std::exp(x) - 1); }},
      {"Selu", {}, [](double x) { return 1.0507009873554805 * (x > 0 ? x : 1.6732632423543772 * (std::exp(x) - 1)); }},
      {"Celu", {{"alpha", fa(1.5)}}, [](double x) { return std::max(0.0, x) + std::min(0.0, 1.5 * (std::exp(x / 1.5) - 1)); }},
      {"ThresholdedRelu", {{"alpha", fa(0.4)}}, [](double x) { return x > 0.4 ? x : 0.0; }},
      {"HardSigmoid", {}, [](double x) { return std::clamp(0.2 * x + 0.5, 0.0, 1.0); }},
      {"HardSwish", {}, [](double x) { return x * std::clamp(x / 6 + 0.5, 0.0, 1.0); }},
      {"Softplus", {}, softplus},
      {"Softsign", {}, [](double x) { return x / (1 + std::fabs(x)); }},
      {"Shrink", {{"lambd", fa(0.4)}, {"bias", fa(0.1)}}, [](double x) { return x < -0.4 ? x + 0.1 : x > 0.4 ? x - 0.1 : 0.0; }},
      {"Mish", {}, [](double x) { return x * std::tanh(softplus(x)); }},
      {"Swish", {}, [](double x) { return x / (1.0 + std::exp(-x)); }},
  };
}

FusedExpr expr_of(const Op& op, std::uint32_t inputs) {
  FusedExpr e;
  e.num_inputs = inputs;
  std::vector<std::uint32_t> xs;
  for (std::uint32_t k = 0; k < inputs; ++k) xs.push_back(e.add({ElemOp::input, k, 0, 0.0, 0.0}));
  build_activation(e, op, xs);
  return e;
}

Op op_of(const std::string& type, std::map<std::string, Attribute> attrs, std::size_t inputs) {
  Op op;
  op.name = type;
  op.type = type;
  op.attrs = std::move(attrs);
  op.inputs.assign(inputs, 0);
  op.outputs = {0};
  return op;
}

float eval(const FusedExpr& e, std::vector<float> x) {
  std::vector<float> scratch(e.nodes.size());
  return e.evaluate(x.data(), scratch.data());
}

}  // namespace

TEST_CASE("activation expressions equal their ONNX definitions and stay finite at large |x|") {
  for (const Case& c : cases()) {
    INFO(c.type);
    const Op op = op_of(c.type, c.attrs, 1);
    CHECK(expressible_activation(op));
    const FusedExpr e = FusedExpr::parse(expr_of(op, 1).to_string());  // the text form round-trips
    for (double x = -6.0; x <= 6.0; x += 0.37) {
      INFO("x = " << x);
      CHECK(eval(e, {static_cast<float>(x)}) == doctest::Approx(c.ref(x)).epsilon(1e-5).scale(1.0));
    }
    for (float x : {-200.0f, 200.0f, 1e30f, -1e30f}) CHECK(std::isfinite(eval(e, {x})));
  }
}

TEST_CASE("activation derivatives match central differences and kinks follow PyTorch") {
  for (const Case& c : cases()) {
    INFO(c.type);
    const FusedExpr e = expr_of(op_of(c.type, c.attrs, 1), 1);
    const FusedExpr d = gradient_expr(e, 0);  // operands x, dy
    for (double x = -3.05; x <= 3.0; x += 0.3) {
      const double h = 1e-3;
      const double fd = (c.ref(x + h) - c.ref(x - h)) / (2 * h);
      INFO("x = " << x);
      CHECK(eval(d, {static_cast<float>(x), 1.0f}) == doctest::Approx(fd).epsilon(2e-3).scale(1.0));
    }
  }
  // At 0: ELU and PReLU take the negative branch (alpha, slope), Softplus gives sigmoid(0), Softsign 1.
  CHECK(eval(gradient_expr(expr_of(op_of("Elu", {{"alpha", fa(0.7)}}, 1), 1), 0), {0.0f, 1.0f}) == doctest::Approx(0.7));
  CHECK(eval(gradient_expr(expr_of(op_of("Softplus", {}, 1), 1), 0), {0.0f, 1.0f}) == doctest::Approx(0.5));
  CHECK(eval(gradient_expr(expr_of(op_of("Softsign", {}, 1), 1), 0), {0.0f, 1.0f}) == doctest::Approx(1.0));
  const FusedExpr prelu = expr_of(op_of("PRelu", {}, 2), 2);
  CHECK(eval(gradient_expr(prelu, 0), {0.0f, 0.25f, 1.0f}) == doctest::Approx(0.25));
  CHECK(eval(gradient_expr(prelu, 1), {-2.0f, 0.25f, 1.0f}) == doctest::Approx(-2.0));  // d/dslope = min(x, 0)
  CHECK(eval(prelu, {-2.0f, 0.25f}) == doctest::Approx(-0.5));
}

TEST_CASE("Sum, Mean, Max and Min fold any number of inputs, and ties split Max's gradient evenly") {
  const std::vector<float> x{1.0f, -2.0f, 3.0f, 3.0f};
  CHECK(eval(expr_of(op_of("Sum", {}, 4), 4), x) == doctest::Approx(5.0));
  CHECK(eval(expr_of(op_of("Mean", {}, 4), 4), x) == doctest::Approx(1.25));
  CHECK(eval(expr_of(op_of("Max", {}, 3), 3), {1.0f, -2.0f, 3.0f}) == doctest::Approx(3.0));
  CHECK(eval(expr_of(op_of("Min", {}, 3), 3), {1.0f, -2.0f, 3.0f}) == doctest::Approx(-2.0));
  CHECK(eval(expr_of(op_of("Max", {}, 1), 1), {4.0f}) == doctest::Approx(4.0));
  const FusedExpr mean = expr_of(op_of("Mean", {}, 3), 3);
  CHECK(eval(gradient_expr(mean, 1), {1.0f, 2.0f, 3.0f, 1.0f}) == doctest::Approx(1.0 / 3.0));
  const FusedExpr max2 = expr_of(op_of("Max", {}, 2), 2);
  CHECK(eval(gradient_expr(max2, 0), {2.0f, 2.0f, 1.0f}) == doctest::Approx(0.5));
  // Two-input Max/Min stay simple nodes (elementwise_expr's own), more inputs or one use the fold.
  CHECK_FALSE(expressible_activation(op_of("Max", {}, 2)));
  CHECK(expressible_activation(op_of("Max", {}, 3)));
  CHECK_FALSE(expressible_activation(op_of("Relu", {}, 1)));
}

TEST_CASE("floor and ceil nodes round (DropPath's mask) and pass no gradient") {
  const FusedExpr e = FusedExpr::parse("in 0;const 0.5;add 0 1;floor 2;in 1;ceil 4;mul 3 5");
  CHECK(e.to_string() == FusedExpr::parse(e.to_string()).to_string());
  CHECK(eval(e, {0.7f, 1.2f}) == doctest::Approx(2.0));   // floor(1.2) * ceil(1.2)
  CHECK(eval(e, {0.2f, -1.5f}) == doctest::Approx(-0.0));  // floor(0.7) = 0
  const FusedExpr d = gradient_expr(e, 0);
  CHECK(eval(d, {0.7f, 1.2f, 1.0f}) == 0.0f);
}
