// The Plan as versioned JSON (docs/plan-schema.md): written by `plan`, read back by `run`.
#pragma once

#include <nlohmann/json.hpp>

#include "planner/plan.hpp"

namespace memplan::planner {

inline constexpr const char* kPlanSchema = "memplan.plan";

// Ops and tensors are named, never numbered, so a plan survives re-import of its model. With
// embed_graph the document also carries the graph (analysis::export_json) and stands alone.
nlohmann::json plan_to_json(const Graph& g, const Plan& p, bool embed_graph = false);

// Reads a plan for `g`; writing the result again gives the same document. A wrong "schema" or
// "version", a fingerprint of another graph, or an op or tensor name `g` does not have is
// ErrorKind::plan_mismatch; missing fields or wrong JSON types are ErrorKind::malformed.
// The plan is not verified here: run verify_plan on it.
Plan plan_from_json(const Graph& g, const nlohmann::json& doc);

}  // namespace memplan::planner
