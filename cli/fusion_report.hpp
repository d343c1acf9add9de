// What fusion did to a model, for every command's output: groups by kind, and the bytes no longer planned.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/graph.hpp"
#include "planner/fusion.hpp"

namespace memplan::cli {

struct FusionSummary {
  bool enabled = false;  // false: --no-fuse
  struct Group {
    std::string kind;
    std::string op;  // the fused op's name (in the fused forward graph and the training graph built from it)
    std::vector<std::string> members;
  };
  std::vector<Group> groups;  // in the order fuse_graph made them
  std::uint64_t intermediate_bytes_removed = 0;
};

// Fuses `shaped` (a forward graph with concrete shapes) in place with the passes `opts` enables; with none
// (FuseOptions::none(), --no-fuse) the graph is untouched and the summary says fusion was off.
FusionSummary fuse_in_place(analysis::Graph& shaped, const planner::FuseOptions& opts);

// Group count per kind, kinds in the order they first appear.
std::vector<std::pair<std::string, std::size_t>> groups_by_kind(const FusionSummary& s);

// {"enabled", "groups": [{"kind", "op", "members"}], "by_kind": {kind: count}, "intermediate_bytes_removed"}
nlohmann::json fusion_json(const FusionSummary& s);

// "12 groups (attention 4, elementwise 8): 3.00 MiB of intermediates not planned"; "off (--no-fuse)";
// "nothing to fuse". Commands print it after their own label.
std::string fusion_text(const FusionSummary& s);

}  // namespace memplan::cli
