// Layouts of a recorded step's periodic region: periodic blocks stacked in [0, region) and transient blocks
// packed into their gaps, several orders tried, ranked by a cheap bound on the arena each leads to.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "torch_allocator/recording.hpp"

namespace memplan::torch_allocator {

// One layout of the periodic region [0, region): offsets of the blocks placed in it (planner::kNotInArena
// elsewhere), `rest` marking the arena blocks left for the main region above it.
struct RegionLayout {
  std::vector<std::uint64_t> offsets;
  std::vector<bool> rest;
  std::uint64_t region = 0;
  // region + the most bytes of `rest` live at one event: no main region packed above it makes a smaller arena.
  std::uint64_t bound = 0;
  std::string order;  // how it was made, e.g. "periodic by size, gaps by size first fit"
};

// The event after which a transient block may go into the periodic region: every previous-step instance
// of a periodic block was freed (or the region is taken by a periodic block's allocation anyway), so the
// region, taken at its first block, is never held beside the recording's own gradients. 0 when there are
// no periodic blocks.
std::uint32_t region_open_event(const RecordedStep& step);

// The layouts. The first two are always: the legacy layout (periodic blocks largest first, then transient blocks allocated after
// region_open_event filling gaps largest first, lowest offset) and the same periodic stacking without gap
// filling. The others follow, smallest bound first (ties in the order made), duplicates dropped: the periodic blocks stacked by allocation event (ascending and descending: gaps that open
// and close in address order, a staircase) and by size, each filled by transient blocks in three orders
// (largest first, longest lived first, earliest allocated first) at the lowest offset or the tightest gap.
// Every block in one layout pairwise disjoint in address where their lifetime pieces overlap in events.
// Deterministic; O(orders x n^2) in the worst case, n the arena blocks.
std::vector<RegionLayout> region_layouts(const RecordedStep& step);

}  // namespace memplan::torch_allocator
