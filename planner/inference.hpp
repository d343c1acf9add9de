// Inference planning end to end: file order schedule, liveness, aliasing and packing, verification.
#pragma once

#include "analysis/liveness.hpp"
#include "planner/assign.hpp"
#include "planner/plan.hpp"
#include "planner/schedule.hpp"
#include "planner/verify.hpp"

namespace memplan::planner {

struct InferencePlan {
  analysis::Liveness liveness;  // on the plan's schedule, sizes aligned as the plan's buffers
  Plan plan;
  VerifyReport report;          // always valid: an invalid plan throws
  double plan_seconds = 0.0;    // schedule + liveness + assignment, without verification
  ScheduleResult schedule;      // the order planned on, with the file order's peak beside it
};

// `shaped_graph` must have every shape known (analysis::infer_shapes). The schedule is choose_schedule's
// (s.kind file: analysis::topological_order); with s.kind memory the file order's plan is kept where its arena is
// not larger (never a larger arena than the file order). A plan that fails the verifier is ErrorKind::verification.
InferencePlan plan_inference(const Graph& shaped_graph, const AssignOptions& o = {}, const ScheduleOptions& s = {});

}  // namespace memplan::planner
