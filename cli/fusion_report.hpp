// What fusion did to a model, for every command's output: groups by kind, and the bytes no longer planned.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/graph.hpp"
#include "planner/step.hpp"

namespace memplan::cli {

using planner::FusionSummary;
using planner::fuse_in_place;

// Group count per kind, kinds in the order they first appear.
std::vector<std::pair<std::string, std::size_t>> groups_by_kind(const FusionSummary& s);

// {"enabled", "groups": [{"kind", "op", "members"}], "by_kind": {kind: count}, "intermediate_bytes_removed"}
nlohmann::json fusion_json(const FusionSummary& s);

// "12 groups (attention 4, elementwise 8): 3.00 MiB of intermediates not planned"; "off (--no-fuse)";
// "nothing to fuse". Commands print it after their own label.
std::string fusion_text(const FusionSummary& s);

}  // namespace memplan::cli
