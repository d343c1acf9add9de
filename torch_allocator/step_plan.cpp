// Recorded step -> graph of allocation events -> planner::assign offsets -> planner::verify_plan proof.
#include "torch_allocator/step_plan.hpp"

#include <algorithm>
#include <numeric>

#include "analysis/error.hpp"
#include "analysis/liveness.hpp"
#include "analysis/ops.hpp"
#include "planner/assign.hpp"
#include "planner/verify.hpp"

namespace memplan::torch_allocator {

namespace {
std::vector<analysis::OpId> in_order(const analysis::Graph& g) {
  std::vector<analysis::OpId> s(g.ops.size());
  std::iota(s.begin(), s.end(), analysis::OpId{0});
  return s;
}

// Tensor of block k, or kNoTensor: tensors are made for arena blocks only, in block order.
std::vector<analysis::TensorId> block_tensors(const RecordedStep& step) {
  std::vector<analysis::TensorId> t(step.blocks.size(), analysis::kNoTensor);
  analysis::TensorId next = 0;
  for (std::size_t k = 0; k < step.blocks.size(); ++k)
    if (step.in_arena(k)) t[k] = next++;
  return t;
}
}  // namespace

analysis::Graph step_graph(const RecordedStep& step) {
  analysis::Graph g;
  g.name = "recorded step";
  const auto tensor_of = block_tensors(step);
  for (std::size_t k = 0; k < step.blocks.size(); ++k) {
    if (tensor_of[k] == analysis::kNoTensor) continue;
    analysis::Tensor t;
    t.name = "block " + std::to_string(k);
    t.dtype = analysis::DType::u8;
    t.dims = {analysis::Dim::of(static_cast<std::int64_t>(step.blocks[k].bytes))};
    t.rank_known = true;
    g.add_tensor(std::move(t));
  }
  analysis::Op begin;
  begin.name = "step begin";
  begin.type = "StepBegin";
  begin.domain = analysis::kMemplanDomain;
  g.add_op(std::move(begin));
  for (std::uint32_t e = 0; e < step.event_count(); ++e) {
    const RecordedEvent& ev = step.events[e];
    analysis::Op op;
    op.domain = analysis::kMemplanDomain;
    op.type = ev.alloc ? "Alloc" : "Free";
    op.name = (ev.alloc ? "alloc " : "free ") + (ev.block < 0 ? std::string("earlier block") : "block " + std::to_string(ev.block));
    op.name += " (event " + std::to_string(e) + ")";
    if (ev.block >= 0) {
      const auto k = static_cast<std::size_t>(ev.block);
      const analysis::TensorId t = tensor_of[k];
      if (t != analysis::kNoTensor && ev.alloc) op.outputs.push_back(t);
      if (t != analysis::kNoTensor && !ev.alloc) op.inputs.push_back(t);
    }
    g.add_op(std::move(op));
  }
  return g;
}

StepPlan plan_step(const RecordedStep& step) {
  const analysis::Graph g = step_graph(step);
  const analysis::Liveness l = analysis::analyze_liveness(g, in_order(g), kBlockAlignment);
  planner::AssignOptions o;
  o.alignment = kBlockAlignment;
  o.views = false;
  o.inplace = false;
  o.workspace_limit_bytes = 0;
  const planner::Plan p = planner::assign(g, l, o);
  planner::require_valid(g, p);
  StepPlan sp;
  sp.arena_bytes = p.arena_bytes;
  sp.peak_live_bytes = l.lower_bound_bytes;
  sp.packer = p.packer;
  const auto tensor_of = block_tensors(step);
  sp.offsets.assign(step.blocks.size(), planner::kNotInArena);
  for (std::size_t k = 0; k < step.blocks.size(); ++k)
    if (tensor_of[k] != analysis::kNoTensor) sp.offsets[k] = p.tensor_offset[tensor_of[k]];
  return sp;
}

planner::Plan step_as_plan(const analysis::Graph& g, const RecordedStep& step, const StepPlan& plan) {
  if (plan.offsets.size() != step.blocks.size())
    fail(ErrorKind::invalid_graph, "the trace has " + std::to_string(plan.offsets.size()) + " offsets for " +
                                       std::to_string(step.blocks.size()) + " blocks");
  const analysis::Liveness l = analysis::analyze_liveness(g, in_order(g), kBlockAlignment);
  planner::Plan p;
  p.model_name = g.name;
  p.model_fingerprint = g.fingerprint();
  p.alignment = kBlockAlignment;
  p.arena_bytes = plan.arena_bytes;
  p.aliased_lower_bound_bytes = l.lower_bound_bytes;
  p.packer = plan.packer;
  p.schedule = l.schedule;
  p.tensor_offset.assign(g.tensors.size(), planner::kNotInArena);
  p.tensor_buffer.assign(g.tensors.size(), UINT32_MAX);
  const auto tensor_of = block_tensors(step);
  for (std::size_t k = 0; k < step.blocks.size(); ++k) {
    const analysis::TensorId t = tensor_of[k];
    if (t == analysis::kNoTensor) continue;
    p.tensor_offset[t] = plan.offsets[k];
    p.buffers.push_back(planner::Buffer{plan.offsets[k], l.bytes[t], l.interval[t], {t}});
  }
  std::stable_sort(p.buffers.begin(), p.buffers.end(), [](const planner::Buffer& a, const planner::Buffer& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.interval.first < b.interval.first;
  });
  for (std::uint32_t b = 0; b < p.buffers.size(); ++b) p.tensor_buffer[p.buffers[b].tensors[0]] = b;
  return p;
}

}  // namespace memplan::torch_allocator
