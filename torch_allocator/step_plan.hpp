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
  // The arena's periodic region [0, periodic_bytes): periodic blocks and transient blocks allocated after
  // region_open_event packed beside them (never smaller than the periodic blocks' bytes), a
  // device allocation of its own taken when a block first lands in it (so the first replayed step, whose
  // previous-step instances are the recording's own allocations, does not hold both); the rest of the
  // arena, [periodic_bytes, arena_bytes), is the other. No block straddles the boundary. 0: none.
  std::uint64_t periodic_bytes = 0;
};

// Region layouts beyond the two legacy ones whose main region plan_step packs by default.
inline constexpr std::size_t kMoreRegionLayouts = 3;

// Plans the step's arena blocks and proves the offsets with planner::require_valid on step_graph
// (ErrorKind::verification). The periodic region [0, periodic_bytes) holds every periodic block and
// transient blocks allocated after region_open_event (periodic_region.hpp); the other blocks are packed
// above it by planner::assign (every packer, the smallest arena kept; no views, no in-place,
// kBlockAlignment). Region layouts (region_layouts): the two legacy ones (periodic blocks first fit largest
// first, their extent the region, then gaps filled largest first; and without gap filling) and the first
// `more_layouts` others (periodic and transient blocks placed together in other orders, in regions up to
// the gradients plus the backward's first temporaries), skipping those whose bound cannot beat the best
// arena so far. The smallest arena is kept (ties: the earlier layout): never larger than the legacy plan's.
StepPlan plan_step(const RecordedStep& step, std::size_t more_layouts = kMoreRegionLayouts);

// The graph and plan of `step` with the given offsets, for the verifier and the timeline (planner::Plan
// buffers one per arena block). Errors: ErrorKind::invalid_graph when offsets does not have one per block.
planner::Plan step_as_plan(const analysis::Graph& g, const RecordedStep& step, const StepPlan& plan);

}  // namespace memplan::torch_allocator
