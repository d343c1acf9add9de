// Tensors an ONNX export materializes that PyTorch eager never allocates (eager_views.hpp).
#include "planner/pytorch/eager_views.hpp"

#include <algorithm>
#include <map>

#include "analysis/autocast.hpp"
#include "analysis/ops.hpp"

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

bool has_kind(const Graph& g, OpId o, analysis::OpKind kind) {
  const analysis::OpInfo* info = analysis::op_registry().find(g.ops[o]);
  return info != nullptr && info->kind == kind;
}

// The same dims once the size-1 ones are left out: a view of any strided tensor (squeeze, unsqueeze), where another
// reshape of an expanded tensor copies it.
bool only_unit_dims_differ(const analysis::Tensor& a, const analysis::Tensor& b) {
  if (!a.shape_known() || !b.shape_known()) return false;
  auto sizes = [](const analysis::Tensor& t) {
    std::vector<std::int64_t> s;
    for (auto d : t.shape())
      if (d != 1) s.push_back(d);
    return s;
  };
  return sizes(a) == sizes(b);
}

// Per tensor: an expanded view (eager_views.hpp): an Expand's output, or a view of one adding or dropping size-1
// dims, that only elementwise ops and such views that are expanded views themselves read.
std::vector<bool> expanded_views(const Graph& g, const Plan& plan) {
  std::vector<bool> expanded(g.tensors.size(), false), view(g.tensors.size(), false);
  for (OpId o : plan.schedule) {
    const auto& op = g.ops[o];
    if (op.outputs.empty() || op.outputs[0] == kNoTensor || op.inputs.empty()) continue;
    const bool of_expanded = has_kind(g, o, analysis::OpKind::view) && op.inputs[0] != kNoTensor && expanded[op.inputs[0]] &&
                             only_unit_dims_differ(g.tensors[op.inputs[0]], g.tensors[op.outputs[0]]);
    expanded[op.outputs[0]] = (op.domain.empty() && op.type == "Expand") || of_expanded;
  }
  for (auto s = plan.schedule.size(); s-- > 0;) {
    const auto& op = g.ops[plan.schedule[s]];
    if (op.outputs.empty() || op.outputs[0] == kNoTensor || !expanded[op.outputs[0]]) continue;
    const auto& t = g.tensors[op.outputs[0]];
    if (t.is_graph_output || t.consumers.empty()) continue;
    view[op.outputs[0]] = std::all_of(t.consumers.begin(), t.consumers.end(), [&](OpId c) {
      if (has_kind(g, c, analysis::OpKind::elementwise)) return true;
      return has_kind(g, c, analysis::OpKind::view) && g.ops[c].outputs.size() == 1 && view[g.ops[c].outputs[0]];
    });
  }
  return view;
}

// Per tensor: an autocast Cast's fp32 output that only elementwise ops of the promote policy read (eager_views.hpp).
std::vector<bool> promoted_reads(const Graph& g) {
  std::vector<bool> read(g.tensors.size(), false);
  for (const analysis::Op& op : g.ops) {
    if (op.type != "Cast" || op.lowered_from != analysis::kAutocastCast || op.phase != analysis::Phase::forward ||
        op.inputs.size() != 1 || op.outputs.size() != 1 || op.outputs[0] == kNoTensor)
      continue;
    const auto& x = g.tensors[op.inputs[0]];
    const auto& y = g.tensors[op.outputs[0]];
    if (x.producer == kNoOp || !analysis::dtype_is_float(x.dtype) || analysis::dtype_bits(x.dtype) != 16 ||
        y.dtype != analysis::DType::f32 || y.is_graph_output || y.consumers.empty())
      continue;
    read[op.outputs[0]] = std::all_of(y.consumers.begin(), y.consumers.end(), [&](OpId c) {
      return has_kind(g, c, analysis::OpKind::elementwise) &&
             analysis::autocast_policy(g.ops[c]) == analysis::AutocastPolicy::promote;
    });
  }
  return read;
}

}  // namespace

std::vector<HeldSource> pytorch_promoted_sources(const Graph& g, const Plan& plan) {
  const std::vector<bool> read = promoted_reads(g);
  std::vector<std::uint32_t> step_of(g.ops.size(), 0);
  for (std::uint32_t s = 0; s < plan.schedule.size(); ++s) step_of[plan.schedule[s]] = s;
  std::map<TensorId, std::uint32_t> until;  // per source, the last step a cast of it is read
  for (TensorId y = 0; y < g.tensors.size(); ++y) {
    if (!read[y]) continue;
    const TensorId x = g.ops[g.tensors[y].producer].inputs[0];
    for (OpId c : g.tensors[y].consumers) until[x] = std::max(until[x], step_of[c]);
  }
  std::vector<HeldSource> out;
  for (const auto& [x, step] : until) out.push_back({x, step});
  return out;
}

std::vector<UnallocatedSpan> pytorch_unallocated_spans(const Graph& g, const Plan& plan) {
  const std::vector<bool> grid = index_grids(g, plan), expanded = expanded_views(g, plan), promoted = promoted_reads(g);
  std::vector<std::uint32_t> step_of(g.ops.size(), 0);
  for (std::uint32_t s = 0; s < plan.schedule.size(); ++s) step_of[plan.schedule[s]] = s;
  std::vector<UnallocatedSpan> out;
  for (std::uint32_t b = 0; b < plan.buffers.size(); ++b) {
    const Buffer& buf = plan.buffers[b];
    // Up to the first tensor of PyTorch's own the buffer holds (an in-place result written over a view's bytes).
    std::uint32_t end = buf.interval.last + 1;
    for (TensorId t : buf.tensors) {
      if (grid[t] || expanded[t] || promoted[t]) continue;
      const OpId p = g.tensors[t].producer;
      end = std::min(end, p == kNoOp ? buf.interval.first : step_of[p]);
    }
    if (end > buf.interval.first) out.push_back({b, buf.interval.first, end - 1});
  }
  return out;
}

}  // namespace memplan::planner
