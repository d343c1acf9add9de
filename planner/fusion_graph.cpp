// fuse_graph: the pattern passes in order, their groups collected against the final graph.
#include <functional>
#include <map>

#include "analysis/autodiff.hpp"
#include "planner/fusion.hpp"
#include "planner/fused_groups.hpp"

namespace memplan::planner {

FusionResult fuse_graph(const analysis::Graph& g, const FuseOptions& opts) {
  FusionResult res;
  res.graph = g;
  auto run = [&](bool on, const std::function<FusionResult(const analysis::Graph&)>& pass) {
    if (!on) return;
    FusionResult step = pass(res.graph);
    res.graph = std::move(step.graph);
    res.intermediate_bytes_removed = checked_add(res.intermediate_bytes_removed, step.intermediate_bytes_removed, "fused intermediates");
    for (auto& grp : step.groups) {
      grp.op = analysis::kNoOp;  // ids of an intermediate graph: found again by name below
      res.groups.push_back(std::move(grp));
    }
  };
  run(opts.attention, &fuse_attention);
  run(opts.norms, &fuse_norms);
  run(opts.gelu, &fuse_gelu);
  run(opts.layouts, &fuse_layouts);
  FusionOptions elementwise;
  elementwise.training = opts.training;
  run(opts.elementwise, [&](const analysis::Graph& x) { return fuse_elementwise(x, elementwise); });
  // Every fused op carries its members in `fused_ops`; a group is found by its first member.
  std::map<std::string, analysis::OpId> by_first_member;
  for (analysis::OpId o = 0; o < res.graph.ops.size(); ++o)
    if (const auto* a = res.graph.ops[o].attr("fused_ops"); a && !a->strings.empty()) by_first_member.emplace(a->strings.front(), o);
  for (auto& grp : res.groups)
    if (!grp.members.empty())
      if (auto it = by_first_member.find(grp.members.front()); it != by_first_member.end()) grp.op = it->second;
  // The group's kind goes with its op, so plans, pictures and traces of the graph name it (fused_groups.hpp).
  for (const auto& grp : res.groups)
    if (grp.op != analysis::kNoOp) res.graph.ops[grp.op].attrs[kFusedKindAttr] = analysis::autodiff::attr_s(grp.kind);
  return res;
}

}  // namespace memplan::planner
