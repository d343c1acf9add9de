// Bytes per op from concrete shapes, and FLOPs from the op registry's formula of each op.
#include "analysis/cost.hpp"

#include <algorithm>
#include <set>

#include "analysis/ops.hpp"

namespace memplan::analysis {

OpCost op_cost(const Graph& g, OpId id) {
  const Op& op = g.ops.at(id);
  const OpInfo& info = op_registry().at(op, "cost");
  OpCost c;
  if (info.is_free(op)) {
    c.launches = false;
    return c;
  }
  std::set<TensorId> seen;
  for (std::size_t i = 0; i < op.inputs.size(); ++i) {
    TensorId t = op.inputs[i];
    if (t == kNoTensor || !seen.insert(t).second) continue;
    std::uint64_t b = g.tensors[t].bytes();
    // An embedding lookup reads only the rows it gathers, not the whole table.
    if (info.gathers_input0 && i == 0 && op.output(0) != kNoTensor) b = std::min(b, g.tensors[op.outputs[0]].bytes());
    c.bytes_read = checked_add(c.bytes_read, b, "bytes read by op '" + op.name + "'");
  }
  for (TensorId t : op.outputs)
    if (t != kNoTensor) c.bytes_written = checked_add(c.bytes_written, g.tensors[t].bytes(), "bytes written by op '" + op.name + "'");
  c.flops = info.flops(g, op);
  return c;
}

}  // namespace memplan::analysis
