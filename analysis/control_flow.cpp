// ONNX If made ordinary ops: the branch its condition takes (or, unknown, the one chosen) spliced in its place.
#include "analysis/control_flow.hpp"

#include "analysis/control_flow_splice.hpp"

namespace memplan::analysis::control_flow {

bool is_control_flow(const Op& op) {
  return ((op.domain.empty() || op.domain == "ai.onnx") && (op.type == "If" || op.type == "Loop" || op.type == "Scan")) ||
         is_recurrent(op);
}

std::optional<bool> if_condition(const Reached& r) {
  const Op& op = r.base.ops[r.o];
  const TensorId cond = op.input(0);
  if (cond == kNoTensor) fail(ErrorKind::invalid_graph, op_where(op) + ": has no condition input");
  const auto& value = r.values[cond];
  if (!value) return std::nullopt;
  if (value->element_count() != 1)
    fail(ErrorKind::shape, op_where(op) + ": its condition '" + r.base.tensors[cond].name + "' has " +
                               std::to_string(value->element_count()) + " elements, one expected");
  return value->as_double().front() != 0.0;
}

Graph inline_if(const Graph& base, OpId o, bool then_branch) {
  const Op& op = base.ops[o];
  const char* key = then_branch ? "then_branch" : "else_branch";
  const Graph& branch = subgraph(op, key);
  if (!branch.inputs.empty())
    fail(ErrorKind::invalid_graph, op_where(op) + ": its " + key + " has " + std::to_string(branch.inputs.size()) + " inputs, none expected");
  if (branch.outputs.size() != op.outputs.size())
    fail(ErrorKind::invalid_graph, op_where(op) + ": its " + key + " has " + std::to_string(branch.outputs.size()) +
                                       " outputs, the If has " + std::to_string(op.outputs.size()));
  Rewrite rw(base, o);
  (void)rw.splice(branch, {}, op.name + (then_branch ? "/then/" : "/else/"), op.outputs);
  return std::move(rw).finish();
}

}  // namespace memplan::analysis::control_flow
