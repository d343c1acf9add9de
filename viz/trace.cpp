// Chrome trace export: ops as complete events on an estimated clock, arena occupancy as a counter track.
#include "viz/trace.hpp"

#include <cmath>

#include "analysis/ops.hpp"
#include "planner/fused_groups.hpp"
#include "planner/step_time.hpp"
#include "viz/timeline.hpp"

namespace memplan::viz {

std::vector<double> estimated_op_seconds(const analysis::Graph& g, const analysis::DeviceProfile& profile) {
  return planner::estimated_op_seconds(g, profile);
}

nlohmann::json chrome_trace(const analysis::Graph& g, const planner::Plan& plan, const TraceOptions& opts) {
  constexpr int kPid = 1, kCompute = 1, kCopy = 2;
  const Usage usage = plan_usage(plan);
  auto meta = [&](const char* what, int tid, const std::string& name) {
    return nlohmann::json{{"ph", "M"}, {"name", what}, {"pid", kPid}, {"tid", tid}, {"args", {{"name", name}}}};
  };
  nlohmann::json events = nlohmann::json::array();
  events.push_back(meta("process_name", 0, opts.process_name));
  events.push_back(meta("thread_name", kCompute, "compute"));
  events.push_back(meta("thread_name", kCopy, "swap copies"));
  for (std::uint32_t s = 0; s < plan.schedule.size(); ++s)
    if (plan.schedule[s] >= g.ops.size())
      fail(ErrorKind::plan_mismatch, "plan step " + std::to_string(s) + " names op " + std::to_string(plan.schedule[s]) + ", which the graph lacks");
  std::vector<double> seconds(g.ops.size(), opts.default_op_seconds);
  for (analysis::OpId o = 0; o < g.ops.size() && o < opts.op_seconds.size(); ++o)
    if (std::isfinite(opts.op_seconds[o]) && opts.op_seconds[o] >= 0) seconds[o] = opts.op_seconds[o];
  // The clock every command states: compute ops end to end, swap copies beside them, stalls where they wait.
  const planner::StepEstimate est = planner::estimate_step(g, plan, seconds);
  for (std::uint32_t s = 0; s < plan.schedule.size(); ++s) {
    const auto id = plan.schedule[s];
    const auto& op = g.ops[id];
    const double ts = est.start[s] * 1e6, dur = seconds[id] * 1e6;  // microseconds
    std::uint64_t out_bytes = 0;
    for (auto t : op.outputs)
      if (t != analysis::kNoTensor && g.tensors[t].shape_known()) out_bytes = checked_add(out_bytes, g.tensors[t].bytes(), "op output bytes");
    nlohmann::json args = {{"op", op.name}, {"type", op.type}, {"step", s}, {"output_bytes", out_bytes}};
    // A fused op's span says what it stands for ("attention ×9 · name") and lists the ops it replaced.
    const std::string fused = planner::fused_label(op);
    if (!fused.empty()) {
      args["fused"] = planner::fused_kind(op);
      args["members"] = op.attr(planner::kFusedOpsAttr)->strings;
    }
    events.push_back({{"ph", "X"}, {"name", fused.empty() ? op.name : fused + " \u00b7 " + op.name}, {"cat", analysis::phase_name(op.phase)},
                      {"pid", kPid}, {"tid", is_swap_op(op) ? kCopy : kCompute}, {"ts", ts}, {"dur", dur}, {"args", std::move(args)}});
    events.push_back({{"ph", "C"}, {"name", "arena live bytes"}, {"pid", kPid}, {"ts", ts}, {"args", {{"live", usage.live_bytes[s]}}}});
  }
  events.push_back({{"ph", "C"}, {"name", "arena live bytes"}, {"pid", kPid}, {"ts", est.step_seconds * 1e6}, {"args", {{"live", 0}}}});
  nlohmann::json doc;
  doc["traceEvents"] = std::move(events);
  doc["displayTimeUnit"] = "ms";
  doc["otherData"] = {{"model", plan.model_name},
                      {"arena_bytes", plan.arena_bytes},
                      {"live_peak_bytes", usage.peak_bytes},
                      {"live_peak_step", usage.peak_step},
                      {"estimated_seconds", est.step_seconds},
                      {"compute_seconds", est.compute_seconds},
                      {"swap_stall_seconds", est.stall_seconds},
                      {"times", opts.op_seconds.empty() ? "1 us per op (no cost model)" : "estimated by the cost model"}};
  return doc;
}

}  // namespace memplan::viz
