// Checkpoint segments (Chen et al. 2016): the forward cut at articulation tensors, and the choice of
// which segments to recompute (sqrt(N), the budget greedy, the least-recompute DP).
#pragma once

#include <cstdint>
#include <vector>

#include "planner/assign.hpp"
#include "planner/remat.hpp"

namespace memplan::planner {

// One way to keep part of a stage: `dropped` (some of its saved tensors, never its boundary) are rebuilt
// together from the rest, the boundary before the stage, weights and inputs, right before the first
// backward use of any of them. `kept_bytes` counts what stays: the boundary when a backward op reads it,
// and the loose boundary before the stage when the rebuild reads it; `flops` the rebuild.
struct StageOption {
  std::uint64_t kept_bytes = 0;
  double flops = 0.0;
  bool reads_input = false;  // the rebuild reads the boundary before the stage
  std::vector<TensorId> dropped;  // in id order
};

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
  // Per stage: the most arena bytes other than forward activations (gradients, weight gradients,
  // backward temporaries) live at a backward step that reads one of its saved tensors, all kept.
  // Recomputation leaves them alone, so the segment model adds them to the stage's backward.
  std::vector<std::uint64_t> backward_bytes;
  // Per stage: its boundary's bytes when no backward op reads it (an Add before a ReLU that saves its
  // output), else 0. Such a boundary is held only while a rebuild of the stages after it still needs it.
  std::vector<std::uint64_t> loose_bytes;
  std::vector<double> boundary_flops;         // per stage: FLOPs of the op that makes the boundary (0 when
                                              // that op has other saved outputs: a rebuild reruns it)
  // Cheap recomputation in kept stages (empty: none): per stage, the saved bytes it rebuilds (its boundary
  // included) and the FLOPs of those rebuilds. A kept stage holds saved_bytes - cheap_bytes.
  std::vector<std::uint64_t> cheap_bytes;
  std::vector<double> cheap_flops;
  // Per stage: the part of cheap_bytes that is its boundary (a block output ReLU(BN(conv) + skip) rebuilt
  // from the kept conv output and the boundary before). A recompute segment, or a partial option whose
  // rebuild reads it, after a kept stage needs that boundary kept after all (it is the rebuild's source).
  std::vector<std::uint64_t> cheap_boundary_bytes;
  // Count a kept stage's cheap tensors live in its own backward (they are rebuilt for it); else the
  // model holds a kept stage at its kept bytes throughout.
  bool cheap_live_in_backward = false;
  // Partial recomputation (empty: none): per stage, keep sets of its saved tensors as a segment of that
  // stage alone (with_partial_options).
  std::vector<std::vector<StageOption>> partial;
  std::size_t size() const noexcept { return boundary.size(); }
  std::uint64_t total_bytes(std::size_t i) const noexcept { return saved_bytes[i] + boundary_bytes[i]; }
  std::uint64_t kept_bytes(std::size_t i) const noexcept { return total_bytes(i) - (cheap_bytes.empty() ? 0 : cheap_bytes[i]); }
  double kept_flops(std::size_t i) const noexcept { return cheap_flops.empty() ? 0.0 : cheap_flops[i]; }
  std::uint64_t cheap_end(std::size_t i) const noexcept { return cheap_boundary_bytes.empty() ? 0 : cheap_boundary_bytes[i]; }
  std::uint64_t extra_bytes(std::size_t i) const noexcept { return backward_bytes.empty() ? 0 : backward_bytes[i]; }
  std::uint64_t loose(std::size_t i) const noexcept { return loose_bytes.empty() ? 0 : loose_bytes[i]; }
  // What the segment model holds: a loose boundary only where a rebuild reads it (input_loose).
  std::uint64_t held_total(std::size_t i) const noexcept { return total_bytes(i) - loose(i); }
  std::uint64_t held_kept(std::size_t i) const noexcept { return kept_bytes(i) - loose(i); }
  std::uint64_t held_at_backward(std::size_t i) const noexcept { return cheap_live_in_backward ? held_total(i) : held_kept(i); }
  std::uint64_t held_boundary(std::size_t i) const noexcept { return boundary_bytes[i] - loose(i); }
  std::uint64_t input_loose(std::size_t i) const noexcept { return i == 0 ? 0 : loose(i - 1); }
};

// backward_bytes include each backward op's sure scratch (scratch_request with `workspace_limit`).
ForwardStages find_forward_stages(const Graph& g, const std::vector<OpId>& schedule, const std::vector<double>& op_flops,
                                  std::uint64_t alignment, std::uint64_t workspace_limit = 0,
                                  const WorkspaceQuery& workspace_query = {});

// Merges consecutive stages until at most `max_stages` remain (about equal bytes each). The merged
// stage keeps the last boundary; the inner boundaries become saved bytes.
ForwardStages coarsen_stages(const ForwardStages& s, std::size_t max_stages);
// Merges each stage whose boundary no backward op reads (loose: the Add before a block's ReLU) into the
// stage after it, so a residual block and the ReLU that ends it are one stage.
ForwardStages merge_loose_stages(const ForwardStages& s);

struct Segment {
  std::uint32_t first = 0, last = 0;  // stages, inclusive
  bool recompute = false;
  // k > 0: a segment of one stage (first == last, recompute false) that keeps that stage's partial
  // option k - 1 instead of everything.
  std::uint32_t option = 0;
};
using SegmentPlan = std::vector<Segment>;  // covers all stages in order

// The segment memory model: the backward of stage i in segment j holds the bytes kept by the segments
// before j, segment j's saved bytes of stages up to i (rebuilt or kept; a kept one less its cheap
// bytes; the later stages' are freed by then) and stage i's backward bytes; a recompute or partial
// segment also holds the loose boundary before it, which its rebuild reads. A recompute segment keeps
// only its end boundary and costs the FLOPs of its stages less the op that makes that boundary; a kept
// segment costs its cheap FLOPs; a partial one keeps and costs what its option says. A cheap boundary
// (cheap_end) of a kept segment counts again, kept, where the next segment's rebuild reads it.
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
// Every segmentation and mode, partial options included; for tests on small graphs.
SegmentPlan brute_force_segments(const ForwardStages& s, std::uint64_t budget);
// The smallest model peak any segment plan reaches.
std::uint64_t min_segment_peak(const ForwardStages& s);

// Saved tensors that `c` keeps and that a few cheap forward ops rebuild from kept tensors, weights and
// inputs (at most kMaxCheapCone ops, each at most `max_flops_per_element` FLOPs per output element, none
// random, and the whole rebuild at most kMaxCheapCone * max_flops_per_element FLOPs per element of the
// tensor: never a full BatchNorm for its saved mean): they recompute too, one group each (numbered after
// c's groups), rebuilt just before their first backward use; the tensors those rebuilds and c's recompute
// cones read stay kept. So a ReLU or BatchNorm output is rebuilt from the Conv output that its backward
// keeps anyway. O(n).
inline constexpr std::size_t kMaxCheapCone = 8;
// `cone_flops`, when given, gets per tensor the FLOPs of the rebuild it chose (0 elsewhere).
RematChoice add_cheap_recompute(const Graph& g, const std::vector<OpId>& schedule, RematChoice c,
                                const std::vector<double>& op_flops, std::vector<double>* cone_flops = nullptr,
                                double max_flops_per_element = 16.0);

// `s` with cheap_bytes and cheap_flops filled from add_cheap_recompute on keep-everything.
ForwardStages with_cheap_costs(const Graph& g, const std::vector<OpId>& schedule, const ForwardStages& s,
                               const std::vector<double>& op_flops, std::uint64_t alignment);

// `s` with partial options: per stage of at most kMaxPartialTensors saved tensors (boundary left out),
// the keep sets on the Pareto front of (kept bytes, rebuild FLOPs), at most kMaxStageOptions of them
// spread evenly along the front. Every subset is tried for stages of at most kExhaustivePartial saved
// tensors; larger ones drop tensors greedily, the most bytes per added rebuild FLOP first. The rebuild
// FLOPs are those of the cone the transform clones (forward ops back to kept tensors).
inline constexpr std::size_t kExhaustivePartial = 10;
inline constexpr std::size_t kMaxPartialTensors = 32;
inline constexpr std::size_t kMaxStageOptions = 12;
ForwardStages with_partial_options(const Graph& g, const ForwardStages& s, const std::vector<double>& op_flops,
                                   std::uint64_t alignment);

// Actions per tensor: saved tensors of recompute segments, and the dropped tensors of partial ones,
// recompute (group = segment index), segment boundaries keep, everything else as in RematChoice::keep_all.
RematChoice choice_from_segments(const Graph& g, const ForwardStages& s, const SegmentPlan& plan);

}  // namespace memplan::planner
