// Liveness on a schedule: each arena tensor's interval, live bytes per step and the lower bound.
#pragma once

#include <cstdint>
#include <vector>

#include "analysis/graph.hpp"

namespace memplan::analysis {

// Steps are positions in the schedule; an interval is inclusive at both ends.
struct Interval {
  std::uint32_t first = 0;
  std::uint32_t last = 0;
  bool overlaps(const Interval& o) const noexcept { return first <= o.last && o.first <= last; }
};

// A tensor lives in the arena when an op in the schedule produces it, its role is activation or
// gradient, and it is not a host copy. Weight gradients enter the arena when the backward produces
// them and stay to the end of the step (they are its result), so they share bytes with activations
// that died before them. Graph inputs, weights, constants and optimizer state live elsewhere.
bool occupies_arena(const Tensor& t) noexcept;
// The same in graph `g`, where a tensor rewritten in place over storage outside the arena (an optimizer's
// updated weight or state, an accumulated gradient: rewritten_source in analysis/ops.hpp) is that
// storage and needs no arena bytes.
bool occupies_arena(const Graph& g, TensorId t);

struct Liveness {
  std::vector<OpId> schedule;
  std::uint64_t alignment = 1;
  std::vector<bool> in_arena;             // per tensor
  std::vector<Interval> interval;         // per tensor; meaningful where in_arena
  std::vector<std::uint64_t> bytes;       // per tensor: aligned size, 0 where not in_arena
  std::vector<std::uint64_t> live_bytes;  // per step: sum of aligned sizes live at that step
  std::uint64_t lower_bound_bytes = 0;    // max over steps of live_bytes (no aliasing)
  std::uint32_t peak_step = 0;            // first step at which live_bytes is largest
  std::vector<std::uint32_t> step_of_op;  // per op: its step, or kNoOp if not scheduled
};

// A produced tensor lives from its producer's step to its last consumer's step; one nobody reads
// lives at its producer's step only; a graph output or a weight gradient lives to the last step. The schedule must be
// a topological order of all ops (ErrorKind::invalid_graph otherwise).
Liveness analyze_liveness(const Graph& g, const std::vector<OpId>& schedule, std::uint64_t alignment = 256);

// Tensors live at `step`, largest first (ties by id).
std::vector<TensorId> live_at(const Liveness& l, std::uint32_t step);

}  // namespace memplan::analysis
