// Fused ops read back from a graph's fused_ops / fused_kind attributes.
#include "planner/fused_groups.hpp"

namespace memplan::planner {

bool is_fused(const analysis::Op& op) {
  const auto* a = op.attr(kFusedOpsAttr);
  return a && a->kind == analysis::Attribute::Kind::strings && !a->strings.empty();
}

std::string fused_kind(const analysis::Op& op) {
  if (!is_fused(op)) return "";
  const std::string kind = op.attr_string(kFusedKindAttr, "");
  return kind.empty() ? op.type : kind;
}

std::string fused_label(const analysis::Op& op) {
  if (!is_fused(op)) return "";
  return fused_kind(op) + " \u00d7" + std::to_string(op.attr(kFusedOpsAttr)->strings.size());
}

std::vector<FusedGroup> fused_groups_of(const analysis::Graph& g) {
  std::vector<FusedGroup> out;
  for (analysis::OpId o = 0; o < g.ops.size(); ++o) {
    const auto& op = g.ops[o];
    if (!is_fused(op)) continue;
    FusedGroup grp;
    grp.op = o;
    grp.kind = fused_kind(op);
    grp.members = op.attr(kFusedOpsAttr)->strings;
    out.push_back(std::move(grp));
  }
  return out;
}

}  // namespace memplan::planner
