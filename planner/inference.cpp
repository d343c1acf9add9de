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
  // The memory order lowers the bound the packers work against, not always the arena they pack: the file order's
  // arena is kept where it is not larger.
  if (std::vector<OpId> file = analysis::topological_order(g); file != out.schedule.order) {
    analysis::Liveness l = analysis::analyze_liveness(g, file, o.alignment);
    if (Plan p = assign(g, l, o); p.arena_bytes <= out.plan.arena_bytes) {
      out.schedule.proven_optimal = out.schedule.proven_optimal && out.schedule.peak_bytes == out.schedule.file_peak_bytes;
      out.schedule.order = std::move(file);
      out.schedule.peak_bytes = out.schedule.file_peak_bytes;
      out.schedule.method = "file";
      out.liveness = std::move(l);
      out.plan = std::move(p);
    }
  }
  out.plan_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.report = verify_plan(g, out.plan);
  require_valid(g, out.plan);
  return out;
}

}  // namespace memplan::planner
