// Cheap recomputation: saved tensors rebuilt from kept neighbours by a few elementwise or normalisation ops.
#include <algorithm>
#include <array>
#include <optional>
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

// The cone that would rebuild a saved tensor: its FLOPs and the kept tensors, weights and inputs it reads.
struct Cone {
  double flops = 0.0;
  std::vector<TensorId> sources;
};

// add_cheap_recompute's walks over one choice.
class CheapCones {
 public:
  CheapCones(const Graph& g, RematChoice& c, const std::vector<double>& op_flops, double max_flops_per_element)
      : g_(g),
        c_(c),
        op_flops_(op_flops),
        max_per_element_(max_flops_per_element),
        pinned_(g.tensors.size(), false),
        mark_(g.ops.size(), 0) {}

  // Sources that recompute cones already read stay kept: one shared walk, since the sources an op's cone reaches do
  // not depend on which group reaches it. Returns the first free recompute group.
  std::uint32_t pin_sources_of_recomputed(const std::vector<TensorId>& saved) {
    std::vector<bool> walked(g_.ops.size(), false);
    std::uint32_t next_group = 0;
    for (TensorId t : saved) {
      if (c_.action[t] != RematAction::recompute) continue;
      next_group = std::max(next_group, c_.group[t] + 1);
      std::vector<TensorId> stack{t};
      while (!stack.empty()) {
        const TensorId x = stack.back();
        stack.pop_back();
        if (source(x)) {
          pinned_[x] = true;
          continue;
        }
        const OpId p = g_.tensors[x].producer;
        if (walked[p]) continue;
        walked[p] = true;
        for (TensorId in : g_.ops[p].inputs)
          if (in != analysis::kNoTensor) stack.push_back(in);
      }
    }
    return next_group;
  }

  // Whether t, kept and no source of a cone taken, is rebuilt by a cheap cone: then it is recomputed in a group of
  // its own and the cone's sources stay kept.
  bool take(TensorId t, std::uint32_t group, std::vector<double>* cone_flops) {
    if (c_.action[t] != RematAction::keep || pinned_[t]) return false;
    const std::optional<Cone> cone = cheap_cone(t);
    // A small output of a costly op (BatchNormalization's saved mean) is not worth its rebuild.
    if (!cone || cone->flops > max_per_element_ * kMaxCheapCone * static_cast<double>(g_.tensors[t].element_count()))
      return false;
    c_.action[t] = RematAction::recompute;
    c_.group[t] = group;
    if (cone_flops) (*cone_flops)[t] = cone->flops;
    for (TensorId s : cone->sources) pinned_[s] = true;
    return true;
  }

 private:
  bool source(TensorId t) const { return !is_forward_activation(g_, t) || c_.action[t] == RematAction::keep; }
  // A deterministic forward op of few FLOPs per output element.
  bool cheap(OpId o) const {
    const analysis::Op& op = g_.ops[o];
    if (op.phase != analysis::Phase::forward || is_random(op)) return false;
    double elements = 0.0;
    for (TensorId t : op.outputs)
      if (t != analysis::kNoTensor) elements += static_cast<double>(g_.tensors[t].element_count());
    return op_flops_[o] <= max_per_element_ * elements;
  }

  // The cone rebuilding t: cheap ops only (at most kMaxCheapCone), back to sources; nullopt where there is none.
  std::optional<Cone> cheap_cone(TensorId t) {
    ++walk_;
    std::vector<TensorId> stack{t};
    Cone cone;
    std::size_t ops = 0;
    while (!stack.empty()) {
      const TensorId x = stack.back();
      stack.pop_back();
      if (x != t && source(x)) {
        cone.sources.push_back(x);
        continue;
      }
      const OpId p = g_.tensors[x].producer;
      if (mark_[p] == walk_) continue;
      mark_[p] = walk_;
      if (!cheap(p) || ++ops > kMaxCheapCone) return std::nullopt;
      cone.flops += op_flops_[p];
      for (TensorId in : g_.ops[p].inputs)
        if (in != analysis::kNoTensor) stack.push_back(in);
    }
    return cone;
  }

  const Graph& g_;
  RematChoice& c_;
  const std::vector<double>& op_flops_;
  double max_per_element_;
  std::vector<bool> pinned_;
  std::vector<std::uint32_t> mark_;
  std::uint32_t walk_ = 0;
};

}  // namespace

RematChoice add_cheap_recompute(const Graph& g, const std::vector<OpId>& schedule, RematChoice c,
                                const std::vector<double>& op_flops, std::vector<double>* cone_flops,
                                double max_flops_per_element) {
  if (cone_flops) cone_flops->assign(g.tensors.size(), 0.0);
  CheapCones cones(g, c, op_flops, max_flops_per_element);
  const std::vector<TensorId> saved = find_saved_for_backward(g);
  std::uint32_t next_group = cones.pin_sources_of_recomputed(saved);
  // Saved tensors in the order their producers run.
  std::vector<std::uint32_t> step(g.ops.size(), 0);
  for (std::uint32_t s = 0; s < schedule.size(); ++s) step[schedule[s]] = s;
  std::vector<TensorId> order = saved;
  std::stable_sort(order.begin(), order.end(),
                   [&](TensorId a, TensorId b) { return step[g.tensors[a].producer] < step[g.tensors[b].producer]; });
  for (TensorId t : order)
    if (cones.take(t, next_group, cone_flops)) ++next_group;
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
