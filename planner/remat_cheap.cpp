// Cheap recomputation: saved tensors rebuilt from kept neighbours by a few elementwise or normalisation ops.
#include <algorithm>
#include <array>
#include <string_view>

#include "analysis/ops.hpp"
#include "planner/remat_segments.hpp"

namespace memplan::planner {

namespace {

// Ops whose output differs between two runs: a rebuild would not reproduce what the forward saw.
bool is_random(const analysis::Op& op) {
  const analysis::OpInfo* info = analysis::op_registry().find(op);
  return info && !info->deterministic;
}

}  // namespace

RematChoice add_cheap_recompute(const Graph& g, const std::vector<OpId>& schedule, RematChoice c,
                                const std::vector<double>& op_flops, std::vector<double>* cone_flops,
                                double max_flops_per_element) {
  if (cone_flops) cone_flops->assign(g.tensors.size(), 0.0);
  const std::size_t n = g.tensors.size();
  auto source = [&](TensorId t) { return !is_forward_activation(g, t) || c.action[t] == RematAction::keep; };
  auto cheap = [&](OpId o) {
    const analysis::Op& op = g.ops[o];
    if (op.phase != analysis::Phase::forward || is_random(op)) return false;
    double elements = 0.0;
    for (TensorId t : op.outputs)
      if (t != analysis::kNoTensor) elements += static_cast<double>(g.tensors[t].element_count());
    return op_flops[o] <= max_flops_per_element * elements;
  };

  // Sources that recompute cones already read stay kept: one shared walk, since the sources an op's
  // cone reaches do not depend on which group reaches it.
  std::vector<bool> pinned(n, false), walked(g.ops.size(), false);
  std::uint32_t next_group = 0;
  const std::vector<TensorId> saved = find_saved_for_backward(g);
  for (TensorId t : saved) {
    if (c.action[t] != RematAction::recompute) continue;
    next_group = std::max(next_group, c.group[t] + 1);
    std::vector<TensorId> stack{t};
    while (!stack.empty()) {
      const TensorId x = stack.back();
      stack.pop_back();
      if (source(x)) {
        pinned[x] = true;
        continue;
      }
      const OpId p = g.tensors[x].producer;
      if (walked[p]) continue;
      walked[p] = true;
      for (TensorId in : g.ops[p].inputs)
        if (in != analysis::kNoTensor) stack.push_back(in);
    }
  }

  std::vector<std::uint32_t> step(g.ops.size(), 0);
  for (std::uint32_t s = 0; s < schedule.size(); ++s) step[schedule[s]] = s;
  std::vector<TensorId> order = saved;
  std::stable_sort(order.begin(), order.end(),
                   [&](TensorId a, TensorId b) { return step[g.tensors[a].producer] < step[g.tensors[b].producer]; });
  std::vector<std::uint32_t> mark(g.ops.size(), 0);
  std::uint32_t walk = 0;
  std::vector<TensorId> stack, sources;
  for (TensorId t : order) {
    if (c.action[t] != RematAction::keep || pinned[t]) continue;
    // The cone that would rebuild t: cheap ops only, back to kept tensors, weights and inputs.
    ++walk;
    stack.assign(1, t);
    sources.clear();
    std::size_t ops = 0;
    double flops = 0.0;
    bool ok = true;
    while (ok && !stack.empty()) {
      const TensorId x = stack.back();
      stack.pop_back();
      if (x != t && source(x)) {
        sources.push_back(x);
        continue;
      }
      const OpId p = g.tensors[x].producer;
      if (mark[p] == walk) continue;
      mark[p] = walk;
      ok = cheap(p) && ++ops <= kMaxCheapCone;
      flops += op_flops[p];
      for (TensorId in : g.ops[p].inputs)
        if (in != analysis::kNoTensor) stack.push_back(in);
    }
    // A small output of a costly op (BatchNormalization's saved mean) is not worth its rebuild.
    if (!ok || flops > max_flops_per_element * kMaxCheapCone * static_cast<double>(g.tensors[t].element_count())) continue;
    c.action[t] = RematAction::recompute;
    c.group[t] = next_group++;
    if (cone_flops) (*cone_flops)[t] = flops;
    for (TensorId s : sources) pinned[s] = true;
  }
  return c;
}

ForwardStages with_cheap_costs(const Graph& g, const std::vector<OpId>& schedule, const ForwardStages& s,
                               const std::vector<double>& op_flops, std::uint64_t alignment) {
  ForwardStages out = s;
  out.cheap_bytes.assign(s.size(), 0);
  out.cheap_flops.assign(s.size(), 0.0);
  out.cheap_boundary_bytes.assign(s.size(), 0);
  std::vector<double> flops;
  const RematChoice c = add_cheap_recompute(g, schedule, RematChoice::keep_all(g), op_flops, &flops);
  for (TensorId t : find_saved_for_backward(g)) {
    const std::uint32_t st = s.stage_of_op[g.tensors[t].producer];
    if (c.action[t] != RematAction::recompute || st >= s.size()) continue;
    out.cheap_bytes[st] += align_up(g.tensors[t].bytes(), alignment);
    if (t == s.boundary[st]) out.cheap_boundary_bytes[st] += align_up(g.tensors[t].bytes(), alignment);
    out.cheap_flops[st] += flops[t];
  }
  return out;
}

}  // namespace memplan::planner
