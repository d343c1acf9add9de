// Periodic region layouts (periodic_region.hpp) and plan_step's choice among them: every layout valid, the
// plan never larger than the legacy one, and a step whose gradients-first region wastes space packed to its
// peak (also replayed through the planned allocator with every block's data intact).
#include <doctest/doctest.h>

#include <algorithm>

#include "torch_allocator/periodic_region.hpp"
#include "torch_allocator/planned_allocator.hpp"
#include "fake_device.hpp"
#include "plan_check.hpp"
#include "workload.hpp"

using namespace memplan::torch_allocator;
using memplan::torch_allocator::testing::FakeDevice;
using memplan::torch_allocator::testing::LiveBlocks;
using memplan::torch_allocator::testing::Piece;
using memplan::torch_allocator::testing::Workload;
using memplan::torch_allocator::testing::check_plan;
using memplan::torch_allocator::testing::pieces;

namespace {
constexpr std::uint64_t U = 64 << 10;

// A recorded step written by hand, event by event.
struct StepBuilder {
  RecordedStep s;
  std::size_t alloc(std::uint64_t bytes) {
    const std::size_t k = s.blocks.size();
    s.blocks.push_back(RecordedBlock{bytes, bytes, 0, s.event_count(), kNotFreed});
    s.events.push_back(RecordedEvent{true, static_cast<std::int64_t>(k), bytes});
    return k;
  }
  void free(std::size_t k) {
    s.blocks[k].free_event = s.event_count();
    s.events.push_back(RecordedEvent{false, static_cast<std::int64_t>(k), s.blocks[k].bytes});
  }
  void free_previous(std::uint64_t bytes, std::int64_t rank) { s.events.push_back(RecordedEvent{false, -1, bytes, rank}); }
  RecordedStep finish() {
    link_carried(s);
    return s;
  }
};

// An activation A (10U) made by the forward; zero_grad frees the previous gradients (3U each); the backward's
// first two temporaries (4U each, the logits' gradient and its like) live together beside A; then the
// gradients are made and A freed. Peak 18U at the temporaries. Gradients first (region 6U) leave room for one
// temporary: the other goes above, beside A: 6U + 14U = 20U. A region of 8U holds both temporaries and then the
// gradients: 8U + 10U = 18U.
RecordedStep wasteful_step() {
  StepBuilder b;
  const std::size_t a = b.alloc(10 * U);
  b.free_previous(3 * U, 0);
  b.free_previous(3 * U, 1);
  const std::size_t t1 = b.alloc(4 * U), t2 = b.alloc(4 * U);
  b.free(t1);
  b.free(t2);
  b.alloc(3 * U);
  b.alloc(3 * U);
  b.free(a);
  return b.finish();
}

// Each layout: periodic blocks all placed, every placed block below the region's end, blocks together in
// time apart in address, the region at least the periodic bytes, the bound at least the step's peak.
void check_layouts(const RecordedStep& s) {
  const std::vector<RegionLayout> layouts = region_layouts(s);
  REQUIRE(layouts.size() >= 2);
  std::uint64_t periodic_bytes = 0;
  for (std::size_t k = 0; k < s.blocks.size(); ++k) periodic_bytes += s.periodic(k) ? s.blocks[k].bytes : 0;
  const std::uint64_t peak = plan_step(s, 0).peak_live_bytes;
  for (const RegionLayout& l : layouts) {
    CAPTURE(l.order);
    CHECK(l.region >= periodic_bytes);
    CHECK(l.bound >= peak);
    for (std::size_t i = 0; i < s.blocks.size(); ++i) {
      const bool placed = l.offsets[i] != memplan::planner::kNotInArena;
      CHECK(placed == (s.in_arena(i) && !l.rest[i]));
      if (s.periodic(i)) CHECK(placed);
      if (!placed) continue;
      CHECK(l.offsets[i] % kBlockAlignment == 0);
      CHECK(l.offsets[i] + s.blocks[i].bytes <= l.region);
      for (std::size_t j = i + 1; j < s.blocks.size(); ++j) {
        if (l.offsets[j] == memplan::planner::kNotInArena) continue;
        bool together = false;
        for (const Piece& x : pieces(s, i))
          for (const Piece& y : pieces(s, j)) together = together || (x.first <= y.last && y.first <= x.last);
        CHECK((!together || l.offsets[i] + s.blocks[i].bytes <= l.offsets[j] || l.offsets[j] + s.blocks[j].bytes <= l.offsets[i]));
      }
    }
  }
}
}  // namespace

TEST_CASE("periodic region layouts pack a step whose gradients-first region wastes space to its peak") {
  const RecordedStep s = wasteful_step();
  REQUIRE(s.periodic(3));
  REQUIRE(s.periodic(4));
  CHECK(region_open_event(s) == 2);
  check_layouts(s);
  const StepPlan legacy = plan_step(s, 0);
  const StepPlan plan = plan_step(s);
  CHECK(legacy.peak_live_bytes == 18 * U);
  CHECK(legacy.periodic_bytes == 6 * U);
  CHECK(legacy.arena_bytes == 20 * U);
  CHECK(plan.arena_bytes == 18 * U);  // the lower bound
  CHECK(plan.periodic_bytes == 8 * U);
  CHECK(plan.offsets[0] >= plan.periodic_bytes);  // the forward's activation stays above the region
  for (std::size_t k : {3u, 4u}) CHECK(plan.offsets[k] + s.blocks[k].bytes <= plan.periodic_bytes);
  const memplan::analysis::Graph g = step_graph(s);
  CHECK(memplan::planner::verify_plan(g, step_as_plan(g, s, plan)).valid);
}

TEST_CASE("a periodic region larger than the gradients replays the wasteful step with every block intact") {
  FakeDevice dev;
  PlannedAllocator a(dev);  // record_steps 2
  LiveBlocks live;
  std::vector<void*> grads, served;
  auto alloc = [&](std::uint64_t bytes) {
    void* p = a.allocate(bytes, 0);
    REQUIRE(p != nullptr);
    live.add(p, bytes);
    served.push_back(p);
    return p;
  };
  auto release = [&](void* p) {
    live.remove(p);
    a.deallocate(p, 0);
  };
  for (int step = 0; step < 7; ++step) {
    served.clear();
    a.step_begin();
    void* act = alloc(10 * U);
    for (void* g : grads) release(g);
    grads.clear();
    void* t1 = alloc(4 * U);
    void* t2 = alloc(4 * U);
    release(t1);
    release(t2);
    grads = {alloc(3 * U), alloc(3 * U)};
    release(act);
    a.step_end();
    if (step < 2) continue;
    for (std::size_t k = 0; k < served.size(); ++k) CHECK(served[k] == a.block_address(k));
  }
  const AllocatorStats st = a.stats();
  check_plan(a);
  CHECK(st.arena_bytes == 18 * U);
  CHECK(st.planned_peak_bytes == 18 * U);
  CHECK(st.periodic_bytes == 8 * U);
  CHECK(st.misses == 0);
  CHECK(st.conflicts == 0);
  CHECK(st.late_frees == 0);
  CHECK(st.carried_in_arena == 5 * 2);
  CHECK(st.peak_pool_bytes == 0);
  CHECK(st.peak_device_bytes <= std::max(live.peak_bound, st.arena_bytes));
  CHECK(live.overlaps == 0);
  CHECK(live.corrupted == 0);
  for (void* g : grads) release(g);
}

TEST_CASE("periodic region layouts are valid and plan_step never larger than the legacy layouts on the workloads") {
  for (const bool after_forward : {true, false})
    for (const std::uint64_t batch : {2u, 8u, 32u}) {
      CAPTURE(after_forward);
      CAPTURE(batch);
      FakeDevice dev;
      PlannedAllocator a(dev);
      LiveBlocks live;
      Workload w{a, live};
      w.zero_grad_after_forward = after_forward;
      w.setup();
      for (int step = 0; step < 4; ++step) w.step(batch);
      const auto planned = a.planned_step();
      REQUIRE(planned);
      const RecordedStep& s = planned->first;
      check_layouts(s);
      const StepPlan legacy = plan_step(s, 0);
      CHECK(planned->second.arena_bytes <= legacy.arena_bytes);
      CHECK(planned->second.arena_bytes >= planned->second.peak_live_bytes);
      CHECK(plan_step(s).offsets == planned->second.offsets);  // deterministic
      check_plan(a);
      CHECK(a.stats().misses == 0);
      CHECK(live.overlaps == 0);
      CHECK(live.corrupted == 0);
      w.finish();
    }
}
