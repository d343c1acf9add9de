// The fused ops a graph carries, read back from their attributes: for plans, pictures and reports.
#pragma once

#include <string>
#include <vector>

#include "analysis/graph.hpp"
#include "planner/fusion.hpp"

namespace memplan::planner {

// Beside kFusedOpsAttr (fusion.hpp), a fused op made by fuse_graph carries the kind of its group
// ("attention", "layer_norm", "elementwise", ...).
inline constexpr const char* kFusedKindAttr = "fused_kind";

// True when `op` replaced other ops (it carries a non-empty fused_ops attribute).
bool is_fused(const analysis::Op& op);
// The group kind of a fused op: its fused_kind attribute, else its op type (a fused op made by one pass
// alone, outside fuse_graph); "" for an op that is not fused.
std::string fused_kind(const analysis::Op& op);
// "attention ×9": kind and member count; "" for an op that is not fused.
std::string fused_label(const analysis::Op& op);

// Every fused op of `g` as a group, by op id (intermediate_bytes unknown here: 0). A training graph lists
// its recomputed copies of fused ops too: they carry the same attributes.
std::vector<FusedGroup> fused_groups_of(const analysis::Graph& g);

}  // namespace memplan::planner
