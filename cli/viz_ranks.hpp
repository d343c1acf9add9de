// Per-rank timelines: one panel per rank role, from a `memplan-rank-plans` file or planned with --gpus.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cli/parallel_report.hpp"
#include "cli/viz_source.hpp"

namespace memplan::cli {

// The rank roles' plans of a `memplan-rank-plans` file (written by `plan --gpus --save-plan FILE`), each proven
// by the verifier, titled with its ranks and role and noted with its peak and model state; nullopt when
// the file is another kind of plan. ErrorKind::plan_mismatch for another version or a plan without its graph.
std::optional<std::vector<PlannedModel>> load_rank_plans(const std::string& path);

// Plans the model per rank role (plan_rank_roles) and gives one panel per role, with the per-GPU budget's lines.
std::vector<PlannedModel> plan_rank_models(const TrainingArgs& train, const ParallelArgs& par);

}  // namespace memplan::cli
