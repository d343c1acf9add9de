// Elementwise fusion: chains and trees of elementwise ops become one memplan::FusedElementwise op.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/graph.hpp"
#include "analysis/ops.hpp"

namespace memplan::planner {

// The operations a fused expression may hold. All arithmetic is float32.
enum class ElemOp : std::uint8_t {
  input, constant,                                          // leaves
  add, sub, mul, div, pow, max, min,                        // binary
  neg, abs, relu, sigmoid, tanh, erf, exp, log, sqrt, reciprocal, identity,  // unary
  clip, leaky_relu,                                         // unary with parameters
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

inline constexpr std::string_view kFusedOpType = analysis::memplan_ops::kFusedElementwise;
inline constexpr std::string_view kMemplanDomain = analysis::kMemplanDomain;

// The expression of one op that fusion can take (an elementwise op on float32 tensors whose constant
// parameters are known), with the op's inputs as operands 0..n-1; nullopt otherwise. A
// FusedElementwise op returns its own expression.
std::optional<FusedExpr> elementwise_expr(const analysis::Graph& g, analysis::OpId op);

struct FusedGroup {
  analysis::OpId op = analysis::kNoOp;  // the FusedElementwise op in the new graph
  std::vector<std::string> members;     // names of the ops it replaces, in their original order
  std::uint64_t intermediate_bytes = 0; // bytes of the tensors that no longer exist
};

struct FusionResult {
  analysis::Graph graph;  // shapes kept; the intermediates of each group removed
  std::vector<FusedGroup> groups;
  std::uint64_t intermediate_bytes_removed = 0;
};

struct FusionOptions {
  std::size_t min_group_ops = 2;  // a lone elementwise op is left as it is
};

// Groups maximal sets of fusible ops whose internal tensors are read only inside the group and are not
// graph outputs; each group has one result. The graph must have concrete shapes (after infer_shapes).
// Contracting such a group keeps the graph acyclic: every path out of it leaves through its result.
FusionResult fuse_elementwise(const analysis::Graph& g, const FusionOptions& opts = {});

}  // namespace memplan::planner
