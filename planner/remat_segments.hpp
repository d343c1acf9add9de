// Checkpoint segments (Chen et al. 2016): the forward cut at articulation tensors, and the choice of
// which segments to recompute (sqrt(N), the budget greedy, the least-recompute DP).
#pragma once

#include <cstdint>
#include <vector>

#include "planner/remat.hpp"

namespace memplan::planner {

// The forward ops in schedule order, cut into stages at articulation tensors: a boundary after which
// exactly one forward activation is still needed by later forward ops. Stage i ends with `boundary[i]`
// (kNoTensor when nothing crosses, and for the last stage).
struct ForwardStages {
  std::vector<OpId> forward;                  // forward ops in schedule order
  std::vector<std::uint32_t> stage_of_op;     // per op of the graph: its stage, or UINT32_MAX
  std::vector<TensorId> boundary;             // per stage
  std::vector<std::uint64_t> saved_bytes;     // per stage: aligned bytes of its saved tensors, boundary left out
  std::vector<std::uint64_t> boundary_bytes;  // per stage: aligned bytes of the boundary tensor
  std::vector<double> flops;                  // per stage: FLOPs of its forward ops
  std::vector<double> boundary_flops;         // per stage: FLOPs of the op that makes the boundary
  std::size_t size() const noexcept { return boundary.size(); }
};

ForwardStages find_forward_stages(const Graph& g, const std::vector<OpId>& schedule, const std::vector<double>& op_flops,
                                  std::uint64_t alignment);

// Merges consecutive stages until at most `max_stages` remain (about equal bytes each). The merged
// stage keeps the last boundary; the inner boundaries become saved bytes.
ForwardStages coarsen_stages(const ForwardStages& s, std::size_t max_stages);

struct Segment {
  std::uint32_t first = 0, last = 0;  // stages, inclusive
  bool recompute = false;
};
using SegmentPlan = std::vector<Segment>;  // covers all stages in order

// The segment memory model: backward of segment j holds the bytes kept by the segments before it plus
// all of segment j's saved bytes (rebuilt or kept). A recompute segment keeps only its end boundary and
// costs the FLOPs of its stages less the op that makes that boundary.
struct SegmentCost {
  std::uint64_t peak_bytes = 0;  // model peak of saved bytes
  double recompute_flops = 0.0;
};
SegmentCost evaluate_segments(const ForwardStages& s, const SegmentPlan& plan);

// Chen's sqrt(N): about sqrt(stages) recompute segments of equal bytes.
SegmentPlan sqrt_segments(const ForwardStages& s);
// Chen's greedy: close a recompute segment once its saved bytes pass `threshold` bytes.
SegmentPlan greedy_segments(const ForwardStages& s, std::uint64_t threshold);
// Least model recompute FLOPs with model peak <= budget (exact Pareto DP over (kept bytes, FLOPs)
// when the frontier stays under `max_frontier`, bytes rounded up to budget / max_frontier beyond).
// Empty when no plan meets the budget.
SegmentPlan optimal_segments(const ForwardStages& s, std::uint64_t budget, std::size_t max_frontier = 1024);
// Every segmentation and mode (3^(stages) plans); for tests on small graphs.
SegmentPlan brute_force_segments(const ForwardStages& s, std::uint64_t budget);
// The smallest model peak any segment plan reaches.
std::uint64_t min_segment_peak(const ForwardStages& s);

// Actions per tensor: saved tensors of recompute segments recompute (group = segment index), segment
// boundaries keep, everything else as in RematChoice::keep_all.
RematChoice choice_from_segments(const Graph& g, const ForwardStages& s, const SegmentPlan& plan);

}  // namespace memplan::planner
