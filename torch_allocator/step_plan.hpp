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
// block (RecordedStep::in_arena: freed within the step) is a u8 tensor of its rounded bytes made by its
// allocation and read by its free. Blocks live past the step's end are not in the arena.
analysis::Graph step_graph(const RecordedStep& step);

struct StepPlan {
  std::vector<std::uint64_t> offsets;  // per block: arena offset, or planner::kNotInArena (another stream)
  std::uint64_t arena_bytes = 0;
  std::uint64_t peak_live_bytes = 0;   // most arena-block bytes live at one event: no packing is smaller
  std::string packer;                  // the packer whose offsets won
};

// Packs the step's arena blocks with planner::assign (every packer, the smallest arena kept; no views,
// no in-place, kBlockAlignment) and proves the offsets with planner::require_valid (ErrorKind::verification).
StepPlan plan_step(const RecordedStep& step);

// The graph and plan of `step` with the given offsets, for the verifier and the timeline (planner::Plan
// buffers one per arena block). Errors: ErrorKind::invalid_graph when offsets does not have one per block.
planner::Plan step_as_plan(const analysis::Graph& g, const RecordedStep& step, const StepPlan& plan);

}  // namespace memplan::torch_allocator
