// A recorded step as memplan's interval packing problem: a graph of allocation events, packed and verified.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/graph.hpp"
#include "planner/plan.hpp"
#include "torch_allocator/recording.hpp"

namespace memplan::torch_allocator {

// The step as a graph memplan's planner reads: op 0 opens the step, op e + 1 is event e; each arena
// block (RecordedStep::in_arena) is a u8 tensor of its rounded bytes made by its allocation and read by its
// free. A periodic block is two tensors, its two lifetime pieces: "block k" made by its allocation and live
// to the end (a graph output), and "block k (previous step)" made by op 0 and read by its next_free_event
// (the previous step's instance, at the same offset). Other blocks live past the step's end are not in it.
analysis::Graph step_graph(const RecordedStep& step);

struct StepPlan {
  std::vector<std::uint64_t> offsets;  // per block: arena offset, or planner::kNotInArena (another stream)
  std::uint64_t arena_bytes = 0;
  std::uint64_t peak_live_bytes = 0;   // most arena-block bytes live at one event: no packing is smaller
  std::string packer;                  // the packer whose offsets won
  // The arena's periodic region [0, periodic_bytes): periodic blocks and blocks packed into their gaps, a
  // device allocation of its own taken when a block first lands in it (so the first replayed step, whose
  // previous-step instances are the recording's own allocations, does not hold both); the rest of the
  // arena, [periodic_bytes, arena_bytes), is the other. No block straddles the boundary. 0: none.
  std::uint64_t periodic_bytes = 0;
};

// Plans the step's arena blocks and proves the offsets with planner::require_valid on step_graph
// (ErrorKind::verification). Periodic blocks first, largest first, each at the lowest offset where no
// placed block whose lifetime pieces overlap its pieces holds a byte of it: their extent is the periodic
// region. Blocks allocated after every previous-step instance is freed then fill the region's gaps the same
// way (largest first; those that do not fit stay out). The other blocks are packed above the region by
// planner::assign (every packer, the smallest arena kept; no views, no in-place, kBlockAlignment); the plan
// without the gap filling is packed too and the smaller arena kept.
StepPlan plan_step(const RecordedStep& step);

// The graph and plan of `step` with the given offsets, for the verifier and the timeline (planner::Plan
// buffers one per arena block). Errors: ErrorKind::invalid_graph when offsets does not have one per block.
planner::Plan step_as_plan(const analysis::Graph& g, const RecordedStep& step, const StepPlan& plan);

}  // namespace memplan::torch_allocator
