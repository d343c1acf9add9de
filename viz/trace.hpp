// Chrome trace event format (chrome://tracing, Perfetto): op spans on an estimated clock and live arena bytes.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/cost.hpp"
#include "analysis/graph.hpp"
#include "planner/plan.hpp"

namespace memplan::viz {

struct TraceOptions {
  // Estimated seconds per op (indexed by op id); ops without an estimate take `default_op_seconds`.
  std::vector<double> op_seconds;
  double default_op_seconds = 1e-6;
  std::string process_name = "memplan plan";
};

// planner::estimated_op_seconds: roofline time for compute ops, host-link time for the bytes a SwapOut /
// SwapIn copies.
std::vector<double> estimated_op_seconds(const analysis::Graph& g, const analysis::DeviceProfile& profile);

// One "X" (complete) event per scheduled op on a compute track (swap copies on their own track), timed by
// planner::estimate_step (compute ops end to end unless they wait for a copy); one "C" counter event per
// step with the arena bytes live during it, and a final one at the end; "M" metadata naming the process and
// tracks. Times are microseconds; otherData.estimated_seconds is the step time plan and viz state.
// See the Trace Event Format document (Duarte et al., Google, 2016).
nlohmann::json chrome_trace(const analysis::Graph& g, const planner::Plan& plan, const TraceOptions& opts = {});

}  // namespace memplan::viz
