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

// The layouts. The first two are always the legacy ones: periodic blocks stacked largest first (the region
// is their bytes), then transient blocks allocated after every previous-step instance was freed filling its
// gaps largest first at the lowest offset; and the same stacking without gap filling. The others follow,
// smallest bound first (ties in the order made), duplicates dropped: the periodic blocks and the transient
// blocks allocated after region_open_event placed together (periodic blocks by allocation or by size, then
// the others by size or longest lived; or all by size), at the lowest offset or the tightest gap, below a
// region size of: the periodic bytes; those plus the largest one or two transient blocks that may enter
// (the backward's first temporaries, e.g. the logits' gradient, beside the gradients); the room the step's
// peak leaves above the blocks that may not enter; the most bytes of those that may enter live at once. A
// layout where a periodic block does not fit is dropped; its region is the extent of what it placed, never
// below the periodic bytes (the first replayed step holds the recording's gradients, the periodic bytes,
// before it takes the region: never more than the arena). The search stops once a layout's bound is the step's
// peak (no arena is smaller). Every block in a layout is disjoint in address from those whose lifetime
// pieces overlap its own. Deterministic; each layout O(m^2), m the periodic and entering blocks.
std::vector<RegionLayout> region_layouts(const RecordedStep& step);

}  // namespace memplan::torch_allocator
