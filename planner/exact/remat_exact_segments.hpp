// Exact remat with swap over the forward stages: the segment DP's memory model (evaluate_segments on plain stages)
// with a third mode per stage, swap, and the least estimated time as the objective, solved as a MILP (planner/exact/milp.hpp)
// with CBC. Strategy `exact` plans with it (training_plan.cpp); docs/strategies.md, "Exact remat".
#pragma once

#include <cstdint>
#include <vector>

#include "planner/exact/remat_exact.hpp"
#include "planner/remat_segments.hpp"
#include "planner/swap.hpp"

namespace memplan::planner {

// Per plain stage i (no cheap recomputation, no partial options), what the model needs. Every stage is kept,
// swapped (its saved bytes but the boundary go to the host after the forward and come back during the backward of
// the stages above it, `window`; the boundary stays), or in a recompute segment [r, p] (rebuilt before the backward of p from the
// boundary before r; the segment keeps its end boundary). Rows (the backward of stage i) hold, as
// evaluate_segments: what the stages below keep (a kept stage all of it, a swapped one its boundary, a segment its
// end boundary and the loose boundary before it), plus the stage's own bytes (a segment's stages r..i and that
// loose boundary), its backward bytes, and the swapped stages below whose copy back spans the row.
struct SwapStageModel {
  std::vector<std::uint64_t> held;      // held_total: saved bytes and the boundary a backward reads
  std::vector<std::uint64_t> boundary;  // held_boundary
  std::vector<std::uint64_t> moved;     // saved bytes a swap moves (0: the stage cannot swap)
  std::vector<std::uint64_t> input;     // input_loose: the loose boundary before the stage
  std::vector<std::uint64_t> extra;     // backward bytes
  // Seconds: a stage's forward (a rebuild), the op making its boundary (skipped where the segment keeps it, as the
  // DP's boundary_flops), a swap's copy out and copy back, and the forward of the stages after a stage (the out
  // link's window: every copy out of stages >= i ends within it) and their backward (the in link's: every copy back
  // of stages >= i ends before the backward of stage i).
  std::vector<double> seconds, boundary_seconds, out_seconds, in_seconds, forward_after, backward_after;
  // Per stage: the backward stages above it a swap's copy back spans (it starts that many stages early, as late as
  // it can while its own seconds fit in their backward): its bytes count in the rows i + 1 .. i + window[i].
  std::vector<std::uint32_t> window;
  // A hidden transfer still costs: the objective counts swap_weight times the copy back's seconds, so a swap is
  // taken only where it saves recompute or is the only way under the budget.
  double swap_weight = 0.01;
  std::size_t size() const noexcept { return held.size(); }
  // Stage i has bytes to move and its copy back fits within the stages above it.
  bool can_swap(std::size_t i) const noexcept { return moved[i] > 0 && window[i] >= 1 && i + window[i] < size(); }
};

// The model of plain stages `s`. `op_seconds` per op of g (the step-time estimate), `links` the host copy links
// (zero: no stage can swap). A stage's backward seconds are those of the backward ops whose latest-stage saved
// input is in it. A stage can swap when it has saved bytes and its copy back fits in the backward of the stages above.
SwapStageModel swap_stage_model(const Graph& g, const std::vector<OpId>& schedule, const ForwardStages& s,
                                const std::vector<double>& op_seconds, SwapLinks links);
// The same numbers from a segment model alone (tests): seconds = FLOPs, boundary_seconds = boundary FLOPs, no swap.
SwapStageModel swap_stage_model(const ForwardStages& s);

struct SwapSegmentPlan {
  SegmentPlan segments;        // covers all stages in order; a swapped stage is a kept segment of one stage
  std::vector<bool> swapped;   // per stage
};

struct SwapPlanCost {
  double cost = 0.0;              // recompute seconds + swap_weight * copy-back seconds (infinity: breaks the model)
  double recompute_seconds = 0.0;
  double swap_seconds = 0.0;      // copy-back seconds of the swaps
  std::uint64_t peak = 0;         // the most bytes of any row
  std::size_t swaps = 0;
};
// The plan in the model at `budget` (cost infinity where a row passes the budget, a swap breaks the out link's
// window or swaps a stage that cannot).
SwapPlanCost swap_plan_cost(const SwapStageModel& m, const SwapSegmentPlan& p, std::uint64_t budget);
// Every plan of the model (at most 9 stages), the cheapest; empty segments when none meets the budget. Tests.
SwapSegmentPlan brute_force_swap_plan(const SwapStageModel& m, std::uint64_t budget);
// A segment DP plan as a point of the model: no swaps, and a recompute segment that holds nothing but its end
// boundary (which the DP costs nothing) kept instead.
SwapSegmentPlan swap_plan_of_segments(const SwapStageModel& m, const SegmentPlan& plan);

struct SwapExactResult {
  ExactStatus status = ExactStatus::not_built;
  SwapSegmentPlan plan;        // the best found (optimal or feasible)
  double cost = 0.0;           // its model cost
  double lower_bound = 0.0;    // no plan of the model costs less
  double seconds = 0.0;        // solve time
  std::uint64_t nodes = 0;
  std::size_t variables = 0, constraints = 0;
};
// The least-cost plan with every row <= budget, as a MILP: per stage keep / swap binaries and y[r][i] (stage i in
// the recompute segment starting at r, contiguous), a prefix sum of what the stages below keep, and the out link's
// window as prefix sums. `start` (the DP's plan) is the first incumbent; the result is never worse than it.
// More than o.max_stages stages: too_large.
SwapExactResult exact_swap_remat(const SwapStageModel& m, std::uint64_t budget, const ExactRematOptions& o = {},
                                 const SwapSegmentPlan* start = nullptr);

}  // namespace memplan::planner
