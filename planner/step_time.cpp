// Step time estimate: one compute stream and one copy stream with the executor's waits between them.
#include "planner/step_time.hpp"

#include <algorithm>

#include "analysis/ops.hpp"

namespace memplan::planner {

namespace {

const analysis::OpInfo* swap_info(const analysis::Op& op) {
  const analysis::OpInfo* info = analysis::op_registry().find(op);
  return info && info->kind == analysis::OpKind::memory ? info : nullptr;
}

struct Range {
  std::uint64_t lo = 0, hi = 0;
  bool meets(std::uint64_t offset, std::uint64_t bytes) const { return bytes > 0 && offset < hi && lo < offset + bytes; }
};

// Per schedule step, the swap ops (by step) whose copy it waits for (runtime_allocator's order_swaps).
std::vector<std::vector<std::uint32_t>> copy_waits(const Graph& g, const Plan& plan, const std::vector<bool>& is_copy) {
  const std::size_t n = plan.schedule.size();
  std::vector<std::vector<std::uint32_t>> waits(n);
  std::vector<const Scratch*> scratch_of(g.ops.size(), nullptr);
  for (const Scratch& sc : plan.scratch)
    if (sc.op < g.ops.size()) scratch_of[sc.op] = &sc;
  auto offset = [&](TensorId t) { return t < plan.tensor_offset.size() ? plan.tensor_offset[t] : kNotInArena; };
  for (std::uint32_t s = 0; s < n; ++s) {
    if (!is_copy[s]) continue;
    const analysis::Op& op = g.ops[plan.schedule[s]];
    const bool out = swap_info(op)->type == analysis::memplan_ops::kSwapOut;
    const TensorId dev = out ? op.input(0) : op.output(0);
    if (dev == analysis::kNoTensor || offset(dev) == kNotInArena) continue;
    const Range r{offset(dev), offset(dev) + g.tensors[dev].bytes()};
    for (std::uint32_t later = s + 1; later < n; ++later) {
      const OpId o = plan.schedule[later];
      const analysis::Op& next = g.ops[o];
      bool hit = out && scratch_of[o] && r.meets(scratch_of[o]->offset, scratch_of[o]->bytes);
      for (TensorId t : out ? next.outputs : next.inputs)
        if (t != analysis::kNoTensor && offset(t) != kNotInArena && r.meets(offset(t), g.tensors[t].bytes())) hit = true;
      if (!hit) continue;
      waits[later].push_back(s);
      if (out) break;
    }
  }
  return waits;
}

}  // namespace

std::vector<double> estimated_op_seconds(const Graph& g, const analysis::DeviceProfile& profile) {
  std::vector<double> out(g.ops.size(), 0.0);
  for (OpId o = 0; o < g.ops.size(); ++o) {
    const analysis::Op& op = g.ops[o];
    if (const analysis::OpInfo* info = swap_info(op)) {
      const TensorId t = op.input(0);
      const std::uint64_t bytes = t == analysis::kNoTensor ? 0 : g.tensors[t].bytes();
      out[o] = info->type == analysis::memplan_ops::kSwapOut ? analysis::device_to_host_seconds(bytes, profile)
                                                             : analysis::host_to_device_seconds(bytes, profile);
    } else {
      out[o] = analysis::op_seconds(g, o, profile);
    }
  }
  return out;
}

StepEstimate estimate_step(const Graph& g, const Plan& plan, const std::vector<double>& op_seconds) {
  const std::size_t n = plan.schedule.size();
  std::vector<bool> is_copy(n, false);
  for (std::size_t s = 0; s < n; ++s) {
    const OpId o = plan.schedule[s];
    if (o >= g.ops.size())
      fail(ErrorKind::plan_mismatch, "plan step " + std::to_string(s) + " names op " + std::to_string(o) + ", which the graph lacks");
    is_copy[s] = swap_info(g.ops[o]) != nullptr;
  }
  const bool any_copy = std::find(is_copy.begin(), is_copy.end(), true) != is_copy.end();
  const auto waits = any_copy ? copy_waits(g, plan, is_copy) : std::vector<std::vector<std::uint32_t>>(n);
  StepEstimate e;
  e.start.resize(n);
  e.end.resize(n);
  double compute = 0.0, copy = 0.0;  // when each stream is free
  for (std::size_t s = 0; s < n; ++s) {
    const OpId o = plan.schedule[s];
    const double sec = o < op_seconds.size() ? std::max(0.0, op_seconds[o]) : 0.0;
    if (is_copy[s]) {
      e.start[s] = std::max(compute, copy);
      copy = e.end[s] = e.start[s] + sec;
      continue;
    }
    double ready = compute;
    for (std::uint32_t w : waits[s]) ready = std::max(ready, e.end[w]);
    e.start[s] = ready;
    compute = e.end[s] = ready + sec;
    e.compute_seconds += sec;
  }
  e.step_seconds = std::max(compute, copy);
  e.stall_seconds = std::max(0.0, e.step_seconds - e.compute_seconds);
  return e;
}

}  // namespace memplan::planner
