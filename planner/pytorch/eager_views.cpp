// Tensors an ONNX export materializes that PyTorch eager never allocates (eager_views.hpp).
#include "planner/pytorch/eager_views.hpp"

#include <algorithm>

namespace memplan::planner {

namespace {

using analysis::Graph;
using analysis::kNoOp;
using analysis::kNoTensor;
using analysis::OpId;
using analysis::TensorId;

bool reads_indices(const analysis::Op& op) { return op.domain.empty() && (op.type == "ScatterND" || op.type == "GatherND"); }

// Per tensor: computed from constants alone (a constant, or every input of its producer so), in the schedule's order.
std::vector<bool> constant_derived(const Graph& g, const Plan& plan) {
  std::vector<bool> c(g.tensors.size(), false);
  for (TensorId t = 0; t < g.tensors.size(); ++t) c[t] = g.tensors[t].producer == kNoOp && g.tensors[t].data != nullptr;
  for (OpId o : plan.schedule) {
    const auto& op = g.ops[o];
    const bool all =
        !op.inputs.empty() && std::all_of(op.inputs.begin(), op.inputs.end(), [&](TensorId t) { return t == kNoTensor || c[t]; });
    for (TensorId t : op.outputs)
      if (t != kNoTensor) c[t] = all;
  }
  return c;
}

// Per tensor: an index grid (eager_views.hpp), found from the last op back.
std::vector<bool> index_grids(const Graph& g, const Plan& plan) {
  const std::vector<bool> derived = constant_derived(g, plan);
  std::vector<bool> grid(g.tensors.size(), false);
  for (auto s = plan.schedule.size(); s-- > 0;) {
    for (TensorId t : g.ops[plan.schedule[s]].outputs) {
      if (t == kNoTensor || !derived[t] || analysis::dtype_is_float(g.tensors[t].dtype) || g.tensors[t].is_graph_output ||
          g.tensors[t].consumers.empty())
        continue;
      grid[t] = std::all_of(g.tensors[t].consumers.begin(), g.tensors[t].consumers.end(), [&](OpId c) {
        const auto& op = g.ops[c];
        if (reads_indices(op))
          return std::count(op.inputs.begin(), op.inputs.end(), t) == 1 && op.inputs.size() > 1 && op.inputs[1] == t;
        return !op.outputs.empty() &&
               std::all_of(op.outputs.begin(), op.outputs.end(), [&](TensorId y) { return y != kNoTensor && grid[y]; });
      });
    }
  }
  return grid;
}

}  // namespace

std::vector<std::uint32_t> buffers_pytorch_never_allocates(const Graph& g, const Plan& plan) {
  const std::vector<bool> grid = index_grids(g, plan);
  std::vector<std::uint32_t> out;
  for (std::uint32_t b = 0; b < plan.buffers.size(); ++b) {
    const auto& ts = plan.buffers[b].tensors;
    if (!ts.empty() && std::all_of(ts.begin(), ts.end(), [&](TensorId t) { return grid[t]; })) out.push_back(b);
  }
  return out;
}

}  // namespace memplan::planner
