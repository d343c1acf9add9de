// Backward rules of activations and variadic ops through their fused expressions (one kernel per wanted input),
// CumSum, Tile, Trilu, CastLike, and the ReduceX ops beyond ReduceSum/ReduceMean, all with plain ONNX ops or memplan BroadcastTo.
#include <optional>
#include <string>
#include <vector>

#include "analysis/autodiff.hpp"
#include "analysis/fused_expr.hpp"

namespace memplan::analysis::autodiff {
namespace {

// Float operands of which some are bfloat16 or float16 and the rest float32.
bool low_precision_operands(const Graph& g, const Op& op) {
  bool low = false;
  for (const auto* list : {&op.inputs, &op.outputs})
    for (TensorId t : *list) {
      if (t == kNoTensor) continue;
      const DType d = g.tensors[t].dtype;
      if (d == DType::bf16 || d == DType::f16) low = true;
      else if (d != DType::f32) return false;
    }
  return low;
}

// ELU, PReLU, Softplus, Max/Min/Mean of any arity...: dy times the derivative of the op's expression
// (fused_expr_activations.cpp), exact at kinks as PyTorch's kernels are (fused_expr.hpp says which); over 16-bit
// operands the same expression, computed in float32 and stored in the tensors' dtypes (a FusedElementwise), as
// PyTorch's kernels of these ops do under autocast.
void by_expression(GradContext& c) {
  auto e = elementwise_expr(c.graph(), c.fwd());
  if (!e && low_precision_operands(c.graph(), c.fwd())) e = float32_expr(c.graph(), c.fwd());
  if (!e) c.unsupported("backward rule needs float operands of known shape (and constant scalar parameters)");
  expression_grads(c, *e);
}

// The reverse running sum: dX = CumSum(dY) in the other direction, exclusive when the forward was.
void cum_sum(GradContext& c) {
  const TensorId g = c.grad_tensor(0);
  c.emit("CumSum", "", {c.dy(), c.in(1)}, {g},
         {{"exclusive", attr_i(c.fwd().attr_int("exclusive", 0))}, {"reverse", attr_i(c.fwd().attr_int("reverse", 0) != 0 ? 0 : 1)}});
  c.give(0, g);
}

// Trilu keeps a triangle: dX is the same triangle of dY.
void trilu(GradContext& c) {
  const TensorId g = c.grad_tensor(0);
  std::vector<TensorId> ins{c.dy()};
  if (c.in(1) != kNoTensor) ins.push_back(c.in(1));
  c.emit("Trilu", "", std::move(ins), {g}, {{"upper", attr_i(c.fwd().attr_int("upper", 1))}});
  c.give(0, g);
}

// ReduceSum over `axes` into `out`, the axes as an input from opset 13 and an attribute before.
void reduce_sum(GradContext& c, TensorId x, const std::vector<std::int64_t>& axes, TensorId out, bool keepdims) {
  std::map<std::string, Attribute> at{{"keepdims", attr_i(keepdims ? 1 : 0)}};
  std::vector<TensorId> ins{x};
  if (c.graph().opset > 0 && c.graph().opset < 13) at["axes"] = attr_ints(axes);
  else ins.push_back(c.int_constant("axes", axes));
  c.emit("ReduceSum", "", std::move(ins), {out}, std::move(at));
}

// Tile repeats x r_k times along axis k: dX sums dY viewed as [r0, d0, r1, d1, ...] over the repeat axes.
void tile(GradContext& c) {
  const Shape x = c.shape(c.in(0)), y = c.shape(c.out(0));
  Shape split;
  std::vector<std::int64_t> axes;
  for (std::size_t k = 0; k < x.size(); ++k) {
    axes.push_back(static_cast<std::int64_t>(2 * k));
    split.push_back(x[k] == 0 ? 0 : y[k] / x[k]);
    split.push_back(x[k]);
  }
  const TensorId v = c.temp("tiled", c.tensor(c.in(0)).dtype, split);
  c.emit("Reshape", "", {c.dy(), c.int_constant("shape", split)}, {v});
  const TensorId g = c.grad_tensor(0);
  reduce_sum(c, v, axes, g, false);
  c.give(0, g);
}

// The reduced operands of a ReduceX op broadcast back to X's shape (memplan BroadcastTo, times `scale`).
struct Reduced {
  GradContext& c;
  std::vector<std::int64_t> axes;
  bool keepdims;
  DType dtype;
  Shape x;

  TensorId back(TensorId t, const std::string& hint, double scale = 1.0, bool kept = false) {
    std::map<std::string, Attribute> at{{"axes", attr_ints(axes)}, {"keepdims", attr_i(kept || keepdims ? 1 : 0)}};
    if (scale != 1.0) at["scale"] = attr_f(scale);
    const TensorId r = c.temp(hint, dtype, x);
    c.emit("BroadcastTo", "memplan", {t}, {r}, std::move(at));
    return r;
  }
  TensorId op(const char* type, std::vector<TensorId> ins, const std::string& hint, DType d) {
    const TensorId r = c.temp(hint, d, x);
    c.emit(type, "", std::move(ins), {r});
    return r;
  }
  TensorId op(const char* type, std::vector<TensorId> ins, const std::string& hint) { return op(type, std::move(ins), hint, dtype); }
  void give(const char* type, std::vector<TensorId> ins) {
    const TensorId g = c.grad_tensor(0);
    c.emit(type, "", std::move(ins), {g});
    c.give(0, g);
  }
};

void reduce_other(GradContext& c) {
  const auto axes = reduced_axes(c);
  if (!axes) return c.give(0, c.dy());
  Reduced r{c, *axes, c.fwd().attr_int("keepdims", 1) != 0, c.tensor(c.in(0)).dtype, c.shape(c.in(0))};
  const std::string& type = c.fwd().type;
  const TensorId x = c.in(0);
  if (type == "ReduceSumSquare") return r.give("Mul", {r.back(c.dy(), "dy2", 2.0), x});
  if (type == "ReduceL1") return r.give("Mul", {r.back(c.dy(), "dy"), r.op("Sign", {x}, "sign")});
  const TensorId yb = r.back(c.out(0), "y"), dyb = r.back(c.dy(), "dy");
  if (type == "ReduceL2") return r.give("Div", {r.op("Mul", {x, dyb}, "x_dy"), yb});
  if (type == "ReduceLogSumExp") return r.give("Mul", {dyb, r.op("Exp", {r.op("Sub", {x, yb}, "shifted")}, "softmax")});
  // ReduceMax / ReduceMin: dY shared evenly by the elements equal to the result (torch.amax's rule).
  const TensorId equal = r.op("Equal", {x, yb}, "argext", DType::boolean);
  const TensorId hit = c.temp("hit", r.dtype, r.x);
  c.emit("Cast", "", {equal}, {hit}, {{"to", attr_i(static_cast<std::int64_t>(r.dtype))}});
  Shape kept = r.x;
  for (auto a : r.axes) kept[static_cast<std::size_t>(a)] = 1;
  const TensorId count = c.temp("ties", r.dtype, kept);
  reduce_sum(c, hit, r.axes, count, true);
  r.give("Div", {r.op("Mul", {hit, dyb}, "hit_dy"), r.back(count, "ties", 1.0, true)});
}

}  // namespace

void add_math_grads(GradTable& t) {
  for (const char* unary : {"Elu", "Selu", "Celu", "ThresholdedRelu", "HardSigmoid", "HardSwish", "Softplus", "Softsign",
                            "Shrink", "Mish", "Abs", "Swish", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh",
                            "Atanh"})
    t[unary] = {by_expression, 1u, 1u};
  t["PRelu"] = {by_expression, 3u, 1u};
  for (const char* variadic : {"Max", "Min", "Mean"}) t[variadic] = {by_expression, kAll, 1u};
  t["CumSum"] = {cum_sum, 1u, 1u};
  t["Tile"] = {tile, 1u, 1u};
  t["Trilu"] = {trilu, 1u, 1u};
  t["CastLike"] = {t.at("Cast").fn, 1u, 1u};  // the gradient cast back to input 0's dtype, as Cast's
  for (const char* reduce : {"ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceMax", "ReduceMin"})
    t[reduce] = {reduce_other, 1u, 1u};
}

}  // namespace memplan::analysis::autodiff
