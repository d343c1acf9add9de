// Per-rank plans of the generated transformers with a short exact packing (tests stay fast).
#pragma once

#include "planner/parallel/parallel.hpp"
#include "tests/planner/transformer_fixture.hpp"

namespace memplan::planner {

inline ParallelPlanResult plan_small(const analysis::Graph& g, const ParallelOptions& par) {
  TrainingPlanOptions po;
  po.assign.exact_pack_nodes = 20000;
  return plan_parallel(g, analysis::TrainingOptions{}, po, par);
}

}  // namespace memplan::planner
