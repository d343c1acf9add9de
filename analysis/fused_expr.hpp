// The fused-expression IR: elementwise ops as an SSA expression (text form, float32 evaluation) and the
// expression of one ONNX op; the planner groups ops into it, the runtime's kernels evaluate it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/graph.hpp"
#include "analysis/graph.hpp"
#include "analysis/op_kinds.hpp"  // memplan_ops

namespace memplan::analysis {

// The operations a fused expression may hold. All arithmetic is float32.
enum class ElemOp : std::uint8_t {
  input, constant,                                          // leaves
  add, sub, mul, div, pow, max, min,                        // binary
  neg, abs, relu, sigmoid, tanh, erf, exp, log, sqrt, reciprocal, identity,  // unary
  clip, leaky_relu,                                         // unary with parameters
  gt, ge,  // binary comparisons as 1.0f / 0.0f (a > b, a >= b): the selections of derivatives (relu', max')
  floor, ceil,  // unary rounding (timm's DropPath mask floor(keep_prob + u)); derivative 0
  tan, asin, acos, atan, sinh, cosh, asinh, acosh, atanh,  // unary trigonometric and hyperbolic (ONNX Tan ... Atanh)
  keep,  // binary: a where b > 0, else 0 (a NaN or infinite a masked out gives 0: ThresholdedRelu, Shrink)
};
const char* elem_op_name(ElemOp op) noexcept;
int elem_op_arity(ElemOp op) noexcept;  // 0 for leaves

// One node of the expression: an SSA value computed from earlier nodes (`a`, `b` index `nodes`).
struct ExprNode {
  ElemOp op = ElemOp::input;
  std::uint32_t a = 0;  // input: which operand of the fused op; otherwise the first argument node
  std::uint32_t b = 0;  // second argument node of a binary op
  double p0 = 0.0;      // constant value, clip min, leaky_relu alpha
  double p1 = 0.0;      // clip max
};

// A fused sub-expression. The last node is the result; operands are broadcast to the output shape
// (numpy rules), so a bias of shape [C] or a scalar constant is read without being expanded.
struct FusedExpr {
  std::uint32_t num_inputs = 0;
  std::vector<ExprNode> nodes;

  std::uint32_t add(ExprNode n);  // appends, returns its index
  // Text form kept in the op's "expr" attribute: nodes separated by ';', e.g. "in 0;const 0.5;mul 0 1".
  std::string to_string() const;
  static FusedExpr parse(std::string_view text);  // ErrorKind::malformed on bad text
  // Evaluates the expression on one element per operand, in float32 (the CPU reference); `scratch`
  // holds nodes.size() floats.
  float evaluate(const float* operand_values, float* scratch) const;
  // Number of non-leaf nodes (the ops it replaces).
  std::size_t op_count() const;
};

inline constexpr std::string_view kFusedOpType = memplan_ops::kFusedElementwise;

// Reverse-mode derivative of `e` with respect to operand `input`: an expression over operands
// x0..x(n-1) and dy (operand n = e.num_inputs) computing dy * de/dx_input elementwise at the broadcast
// output shape (summing it down to the operand's own shape is the caller's). The forward nodes a
// derivative reads are rebuilt in it once (common subexpressions shared), trivial arithmetic is
// simplified (x*1, x+0, constant folding, x*0 -> 0), nodes it does not need are dropped; num_inputs is n+1.
// Kinks follow PyTorch: relu'(0) = abs'(0) = 0, leaky_relu'(0) = alpha, clip passes the gradient where
// lo <= x <= hi, max/min split the gradient evenly between tied operands (torch.maximum's rule);
// pow(a, b) gives b * a^(b-1) and a^b * log(a) (no special case at a = 0 or b = 0 beyond a constant
// exponent 0, whose base gradient is 0). Errors: ErrorKind::usage when `input` >= e.num_inputs.
FusedExpr gradient_expr(const FusedExpr& e, std::uint32_t input);

// The expression of one op that fusion can take (an elementwise op on float32 tensors whose constant
// parameters are known), with the op's inputs as operands 0..n-1; nullopt otherwise. A
// FusedElementwise op returns its own expression.
std::optional<FusedExpr> elementwise_expr(const Graph& g, OpId op);
std::optional<FusedExpr> elementwise_expr(const Graph& g, const Op& op);
// The expression of `op` computed in float32 whatever its float tensors' dtypes (bf16, f16): that of the same op over
// float32 copies of its tensors (same shapes, same scalar constants); nullopt as elementwise_expr's, or when an output
// is also an input.
std::optional<FusedExpr> float32_expr(const Graph& g, const Op& op);

// Ops written with the nodes above (fused_expr_activations.cpp): ELU, SELU, CELU, ThresholdedRelu, HardSigmoid,
// HardSwish, Softplus, Softsign, Shrink, Mish, PRelu, and Sum, Mean, Max, Min of any arity. build_activation appends
// `op`'s nodes over its operand nodes `xs` (one per input), the last one the result.
bool expressible_activation(const Op& op);
void build_activation(FusedExpr& e, const Op& op, const std::vector<std::uint32_t>& xs);

}  // namespace memplan::analysis
