// Recorded step -> graph of allocation events -> offsets (periodic region layouts, the rest planner::assign)
// -> planner::verify_plan proof.
#include "torch_allocator/step_plan.hpp"

#include <algorithm>
#include <numeric>
#include <optional>

#include "analysis/error.hpp"
#include "analysis/liveness.hpp"
#include "analysis/ops.hpp"
#include "planner/assign.hpp"
#include "planner/verify.hpp"
#include "torch_allocator/periodic_region.hpp"

namespace memplan::torch_allocator {

namespace {
using analysis::kNoTensor;
using analysis::TensorId;

std::vector<analysis::OpId> in_order(const analysis::Graph& g) {
  std::vector<analysis::OpId> s(g.ops.size());
  std::iota(s.begin(), s.end(), analysis::OpId{0});
  return s;
}

// Per block: the tensor of this step's instance and, for a periodic block, of the previous step's
// (kNoTensor otherwise). Tensors are made for the included blocks only, in block order.
struct BlockTensors {
  std::vector<TensorId> main, prefix;
};

BlockTensors block_tensors(const RecordedStep& step, const std::vector<bool>& include) {
  BlockTensors t{std::vector<TensorId>(step.blocks.size(), kNoTensor), std::vector<TensorId>(step.blocks.size(), kNoTensor)};
  TensorId next = 0;
  for (std::size_t k = 0; k < step.blocks.size(); ++k) {
    if (!include[k]) continue;
    t.main[k] = next++;
    if (step.periodic(k)) t.prefix[k] = next++;
  }
  return t;
}

std::vector<bool> arena_blocks(const RecordedStep& step) {
  std::vector<bool> in(step.blocks.size());
  for (std::size_t k = 0; k < step.blocks.size(); ++k) in[k] = step.in_arena(k);
  return in;
}

analysis::Tensor block_tensor(std::string name, std::uint64_t bytes) {
  analysis::Tensor t;
  t.name = std::move(name);
  t.dtype = analysis::DType::u8;
  t.dims = {analysis::Dim::of(static_cast<std::int64_t>(bytes))};
  t.rank_known = true;
  return t;
}

// step_graph over the blocks `include` names (arena blocks only).
analysis::Graph make_graph(const RecordedStep& step, const std::vector<bool>& include) {
  analysis::Graph g;
  g.name = "recorded step";
  const BlockTensors tensor_of = block_tensors(step, include);
  std::vector<TensorId> prefix_freed_at(step.event_count(), kNoTensor);
  for (std::size_t k = 0; k < step.blocks.size(); ++k) {
    if (tensor_of.main[k] == kNoTensor) continue;
    g.add_tensor(block_tensor("block " + std::to_string(k), step.blocks[k].bytes));
    if (tensor_of.prefix[k] == kNoTensor) continue;
    g.add_tensor(block_tensor("block " + std::to_string(k) + " (previous step)", step.blocks[k].bytes));
    prefix_freed_at[step.blocks[k].next_free_event] = tensor_of.prefix[k];
    g.outputs.push_back(tensor_of.main[k]);  // this step's instance lives past the step
  }
  analysis::Op begin;
  begin.name = "step begin";
  begin.type = "StepBegin";
  begin.domain = analysis::kMemplanDomain;
  for (std::size_t k = 0; k < step.blocks.size(); ++k)
    if (tensor_of.prefix[k] != kNoTensor) begin.outputs.push_back(tensor_of.prefix[k]);
  g.add_op(std::move(begin));
  for (std::uint32_t e = 0; e < step.event_count(); ++e) {
    const RecordedEvent& ev = step.events[e];
    analysis::Op op;
    op.domain = analysis::kMemplanDomain;
    op.type = ev.alloc ? "Alloc" : "Free";
    op.name = (ev.alloc ? "alloc " : "free ") + (ev.block < 0 ? std::string("earlier block") : "block " + std::to_string(ev.block));
    op.name += " (event " + std::to_string(e) + ")";
    if (ev.block >= 0) {
      const TensorId t = tensor_of.main[static_cast<std::size_t>(ev.block)];
      if (t != kNoTensor && ev.alloc) op.outputs.push_back(t);
      if (t != kNoTensor && !ev.alloc) op.inputs.push_back(t);
    } else if (prefix_freed_at[e] != kNoTensor) {
      op.inputs.push_back(prefix_freed_at[e]);
    }
    g.add_op(std::move(op));
  }
  for (TensorId t : g.outputs) g.tensors[t].is_graph_output = true;
  return g;
}

// planner::assign over the blocks `rest` names (transient blocks only): offsets per block, and its plan.
planner::Plan pack_rest(const RecordedStep& step, const std::vector<bool>& rest, std::vector<std::uint64_t>& offsets, std::uint64_t base) {
  const analysis::Graph g = make_graph(step, rest);
  const analysis::Liveness l = analysis::analyze_liveness(g, in_order(g), kBlockAlignment);
  planner::AssignOptions o;
  o.alignment = kBlockAlignment;
  o.views = false;
  o.inplace = false;
  o.workspace_limit_bytes = 0;
  planner::Plan p = planner::assign(g, l, o);
  const BlockTensors tensor_of = block_tensors(step, rest);
  for (std::size_t k = 0; k < step.blocks.size(); ++k)
    if (tensor_of.main[k] != kNoTensor) offsets[k] = base + p.tensor_offset[tensor_of.main[k]];
  return p;
}
}  // namespace

analysis::Graph step_graph(const RecordedStep& step) { return make_graph(step, arena_blocks(step)); }

StepPlan plan_step(const RecordedStep& step, std::size_t more_layouts) {
  const analysis::Graph g = step_graph(step);
  const analysis::Liveness l = analysis::analyze_liveness(g, in_order(g), kBlockAlignment);
  const std::vector<RegionLayout> layouts = region_layouts(step);
  // The legacy layouts (the first two), then the most promising others; planner::assign packs the main region
  // above each, the smallest arena kept (ties: the earlier layout).
  std::optional<planner::Plan> best;
  std::vector<std::uint64_t> offsets;
  const RegionLayout* won = nullptr;
  for (std::size_t i = 0; i < layouts.size() && i < 2 + more_layouts; ++i) {
    const RegionLayout& layout = layouts[i];
    if (i == 1 && layout.offsets == layouts[0].offsets) continue;  // no gap filling happened
    if (best && layout.bound >= won->region + best->arena_bytes) continue;  // cannot be smaller
    std::vector<std::uint64_t> o = layout.offsets;
    planner::Plan p = pack_rest(step, layout.rest, o, layout.region);
    if (!best || layout.region + p.arena_bytes < won->region + best->arena_bytes)
      best = std::move(p), offsets = std::move(o), won = &layout;
  }
  StepPlan sp;
  sp.offsets = std::move(offsets);
  sp.periodic_bytes = won->region;
  sp.arena_bytes = won->region + best->arena_bytes;
  sp.peak_live_bytes = l.lower_bound_bytes;
  sp.packer = won->region == 0 ? best->packer : "periodic region (" + won->order + ") + " + best->packer;
  planner::require_valid(g, step_as_plan(g, step, sp));
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
  const auto tensor_of = block_tensors(step, arena_blocks(step));
  auto add = [&](TensorId t, std::uint64_t offset) {
    if (t == kNoTensor) return;
    p.tensor_offset[t] = offset;
    p.buffers.push_back(planner::Buffer{offset, l.bytes[t], l.interval[t], {t}});
  };
  for (std::size_t k = 0; k < step.blocks.size(); ++k) {  // each lifetime piece its own buffer, at the block's offset
    add(tensor_of.main[k], plan.offsets[k]);
    add(tensor_of.prefix[k], plan.offsets[k]);
  }
  std::stable_sort(p.buffers.begin(), p.buffers.end(), [](const planner::Buffer& a, const planner::Buffer& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.interval.first < b.interval.first;
  });
  for (std::uint32_t b = 0; b < p.buffers.size(); ++b) p.tensor_buffer[p.buffers[b].tensors[0]] = b;
  return p;
}

}  // namespace memplan::torch_allocator
