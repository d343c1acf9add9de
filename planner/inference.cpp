// Inference planning: schedule, liveness, assign, then the verifier as a gate on every plan returned.
#include "planner/inference.hpp"

#include <chrono>

namespace memplan::planner {

InferencePlan plan_inference(const Graph& g, const AssignOptions& o, const ScheduleOptions& s) {
  InferencePlan out;
  const auto t0 = std::chrono::steady_clock::now();
  out.schedule = choose_schedule(g, o, s);
  out.liveness = analysis::analyze_liveness(g, out.schedule.order, o.alignment);
  out.plan = assign(g, out.liveness, o);
  out.plan_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.report = verify_plan(g, out.plan);
  require_valid(g, out.plan);
  return out;
}

}  // namespace memplan::planner
