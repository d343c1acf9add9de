// Elementwise fusion: chains and trees of elementwise ops become one memplan::FusedElementwise op.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/fused_expr.hpp"
#include "analysis/graph.hpp"
#include "analysis/ops.hpp"

namespace memplan::planner {

// The fused-expression IR lives in analysis/fused_expr.hpp.
using analysis::elem_op_arity;
using analysis::elem_op_name;
using analysis::elementwise_expr;
using analysis::ElemOp;
using analysis::ExprNode;
using analysis::FusedExpr;
using analysis::kFusedOpType;
using analysis::kMemplanDomain;

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
