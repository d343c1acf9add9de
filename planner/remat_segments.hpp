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
  // Cheap recomputation in kept stages (empty: none): per stage, the saved bytes it rebuilds (boundary
  // left out) and the FLOPs of those rebuilds. A kept stage holds saved_bytes - cheap_bytes.
  std::vector<std::uint64_t> cheap_bytes;
  std::vector<double> cheap_flops;
  std::size_t size() const noexcept { return boundary.size(); }
  std::uint64_t total_bytes(std::size_t i) const noexcept { return saved_bytes[i] + boundary_bytes[i]; }
  std::uint64_t kept_bytes(std::size_t i) const noexcept { return total_bytes(i) - (cheap_bytes.empty() ? 0 : cheap_bytes[i]); }
  double kept_flops(std::size_t i) const noexcept { return cheap_flops.empty() ? 0.0 : cheap_flops[i]; }
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
// all of segment j's saved bytes (rebuilt or kept; a kept one less its cheap bytes). A recompute
// segment keeps only its end boundary and costs the FLOPs of its stages less the op that makes that
// boundary; a kept segment costs its cheap FLOPs.
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
SegmentPlan optimal_segments(const ForwardStages& s, std::uint64_t budget, std::size_t max_frontier = 512);
// Every segmentation and mode (3^(stages) plans); for tests on small graphs.
SegmentPlan brute_force_segments(const ForwardStages& s, std::uint64_t budget);
// The smallest model peak any segment plan reaches.
std::uint64_t min_segment_peak(const ForwardStages& s);

// Saved tensors that `c` keeps and that a few cheap forward ops rebuild from kept tensors, weights and
// inputs (at most kMaxCheapCone ops, each at most `max_flops_per_element` FLOPs per output element, none
// random): they recompute too, one group each (numbered after c's groups), rebuilt just before their
// first backward use; the tensors those rebuilds and c's recompute cones read stay kept. So a ReLU or
// BatchNorm output is rebuilt from the Conv output that its backward keeps anyway. O(n).
inline constexpr std::size_t kMaxCheapCone = 8;
// `cone_flops`, when given, gets per tensor the FLOPs of the rebuild it chose (0 elsewhere).
RematChoice add_cheap_recompute(const Graph& g, const std::vector<OpId>& schedule, RematChoice c,
                                const std::vector<double>& op_flops, std::vector<double>* cone_flops = nullptr,
                                double max_flops_per_element = 16.0);

// `s` with cheap_bytes and cheap_flops filled from add_cheap_recompute on keep-everything.
ForwardStages with_cheap_costs(const Graph& g, const std::vector<OpId>& schedule, const ForwardStages& s,
                               const std::vector<double>& op_flops, std::uint64_t alignment);

// Actions per tensor: saved tensors of recompute segments recompute (group = segment index), segment
// boundaries keep, everything else as in RematChoice::keep_all.
RematChoice choice_from_segments(const Graph& g, const ForwardStages& s, const SegmentPlan& plan);

}  // namespace memplan::planner
