// The planned allocator's current plan checked two ways: memplan's verifier, and its offsets directly.
#pragma once

#include <doctest/doctest.h>

#include <vector>

#include "planner/verify.hpp"
#include "torch_allocator/planned_allocator.hpp"

namespace memplan::torch_allocator::testing {

struct Piece {
  std::uint32_t first, last;  // events, inclusive
};

// A block's lifetime in events of the step, worked out from the recording alone: one piece, or the previous
// step's instance [0, next free] and this step's [alloc, end] for a periodic block.
inline std::vector<Piece> pieces(const RecordedStep& s, std::size_t k) {
  const RecordedBlock& b = s.blocks[k];
  if (b.free_event != kNotFreed) return {{b.alloc_event, b.free_event}};
  return {{0, b.next_free_event}, {b.alloc_event, s.event_count()}};
}

// The current plan proven by memplan's verifier (a periodic block's pieces each their own tensor at the
// block's offset), and the offsets checked directly: arena blocks with pieces live at one event share no
// byte, offsets are 512-aligned, and no block straddles the periodic region's end.
inline void check_plan(const PlannedAllocator& a) {
  const auto planned = a.planned_step();
  REQUIRE(planned);
  const RecordedStep& s = planned->first;
  const StepPlan& plan = planned->second;
  const analysis::Graph g = step_graph(s);
  const auto report = planner::verify_plan(g, step_as_plan(g, s, plan));
  CHECK(report.valid);
  for (std::size_t i = 0; i < s.blocks.size(); ++i) {
    if (!s.in_arena(i)) continue;
    const std::uint64_t oi = plan.offsets[i], ei = oi + s.blocks[i].bytes;
    CHECK(oi % kBlockAlignment == 0);
    CHECK((ei <= plan.periodic_bytes || oi >= plan.periodic_bytes));
    CHECK(ei <= plan.arena_bytes);
    for (std::size_t j = i + 1; j < s.blocks.size(); ++j) {
      if (!s.in_arena(j)) continue;
      bool together = false;
      for (const Piece& x : pieces(s, i))
        for (const Piece& y : pieces(s, j)) together = together || (x.first <= y.last && y.first <= x.last);
      const std::uint64_t oj = plan.offsets[j], ej = oj + s.blocks[j].bytes;
      CHECK((!together || ei <= oj || ej <= oi));
    }
  }
}

}  // namespace memplan::torch_allocator::testing
