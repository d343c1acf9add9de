// The estimated time of one training step of a plan: compute ops in order, swap copies beside them, stalls counted.
#pragma once

#include <vector>

#include "analysis/cost.hpp"
#include "planner/plan.hpp"

namespace memplan::planner {

// Seconds per op (by op id) from the cost model: roofline time for compute ops, host-link time for the
// bytes a SwapOut / SwapIn copies.
std::vector<double> estimated_op_seconds(const Graph& g, const analysis::DeviceProfile& profile);

struct StepEstimate {
  double step_seconds = 0.0;     // until the last op and the last copy have ended
  double compute_seconds = 0.0;  // the compute ops' own times, end to end
  double stall_seconds = 0.0;    // step_seconds - compute_seconds: waiting for swap copies (0 when they hide)
  std::vector<double> start, end;  // per schedule step, seconds from the start of the step
};

// Runs the plan's schedule as runtime_allocator's executor issues it: compute ops one after another on one
// stream; each SwapOut / SwapIn on one copy stream, in issue order, starting once the compute ops before it
// have ended. The first later op writing over a SwapOut's source range (an output or its scratch) waits
// for that copy; every later op reading a SwapIn's result range waits for it. `op_seconds` by op id.
// Every command that states a step time (plan, fit, viz, trace) reads it from here.
StepEstimate estimate_step(const Graph& g, const Plan& plan, const std::vector<double>& op_seconds);

}  // namespace memplan::planner
