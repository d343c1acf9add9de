// Periodic blocks: gradients made by one step and freed by the next step's zero_grad, planned in the arena with
// a two-piece lifetime (the previous step's instance, then this step's) against a fake device.
#include <doctest/doctest.h>

#include <algorithm>

#include "torch_allocator/planned_allocator.hpp"
#include "fake_device.hpp"
#include "plan_check.hpp"
#include "workload.hpp"

using namespace memplan::torch_allocator;
using memplan::torch_allocator::testing::FakeDevice;
using memplan::torch_allocator::testing::LiveBlocks;
using memplan::torch_allocator::testing::Workload;
using memplan::torch_allocator::testing::check_plan;

namespace {
std::size_t periodic_count(const RecordedStep& s) {
  std::size_t n = 0;
  for (std::size_t k = 0; k < s.blocks.size(); ++k) n += s.periodic(k);
  return n;
}

AllocatorOptions small_chunks(int record_steps) {
  AllocatorOptions o;
  o.record_steps = record_steps;
  o.pool_chunk_bytes = 1 << 16;
  return o;
}
}  // namespace

TEST_CASE("the recorder names the previous step's carried blocks it frees, and links them to this step's") {
  FakeDevice dev;
  PlannedAllocator a(dev);  // record_steps 2 by default
  LiveBlocks live;
  Workload w{a, live};
  w.zero_grad_after_forward = true;
  w.step(8, 2);
  CHECK_FALSE(a.stats().replaying);
  w.step(8, 2);
  const auto planned = a.planned_step();
  REQUIRE(planned);
  const RecordedStep& s = planned->first;
  // 2 layers: act, temp, act, temp, then (zero_grad) dx, grad, dx, grad.
  REQUIRE(s.blocks.size() == 8);
  // Events: act, temp, free temp, act, temp, free temp (0-5), then zero_grad frees the layer-1 gradient
  // (block 5 of step 1) and the layer-0 one (block 7): ranks among step 1's carried blocks of their bytes.
  CHECK(s.events[6].block == -1);
  CHECK(s.events[6].earlier_rank == 0);
  CHECK(s.events[7].earlier_rank == 0);  // the two gradients differ in size: rank 0 each
  CHECK(s.blocks[5].next_free_event == 6);
  CHECK(s.blocks[7].next_free_event == 7);
  CHECK(s.periodic(5));
  CHECK(s.periodic(7));
  CHECK(periodic_count(s) == 2);
  CHECK(planned->second.periodic_bytes >= s.blocks[5].bytes + s.blocks[7].bytes);
  check_plan(a);
  w.finish();

  RecordedStep hand;  // link_carried by hand: bytes must match, and a rank beyond the carried blocks links nothing
  hand.blocks = {RecordedBlock{1000, 1024, 0, 3, kNotFreed}, RecordedBlock{1000, 1024, 0, 4, kNotFreed}};
  hand.events = {RecordedEvent{false, -1, 1024, 1}, RecordedEvent{false, -1, 2048, 0}, RecordedEvent{false, -1, 1024, 5},
                 RecordedEvent{true, 0, 1024}, RecordedEvent{true, 1, 1024}};
  link_carried(hand);
  CHECK(hand.blocks[0].next_free_event == kNotFreed);
  CHECK(hand.blocks[1].next_free_event == 0);
  CHECK(hand.periodic(1));
  CHECK_FALSE(hand.periodic(0));
}

TEST_CASE("gradients carried across steps replay from the arena: no misses, no pool, a smaller reserve") {
  for (const bool after_forward : {true, false}) {
    CAPTURE(after_forward);
    FakeDevice dev;
    PlannedAllocator a(dev, small_chunks(2));
    LiveBlocks live;
    Workload w{a, live};
    w.zero_grad_after_forward = after_forward;
    w.setup();
    const std::uint64_t weights = dev.held;
    w.step(8);
    w.step(8);
    const auto planned = a.planned_step();
    REQUIRE(planned);
    const RecordedStep& s = planned->first;
    CHECK(periodic_count(s) == 6);
    check_plan(a);
    AllocatorStats st = a.stats();
    CHECK(st.periodic_blocks == 6);
    CHECK(st.periodic_bytes == planned->second.periodic_bytes);
    CHECK(st.periodic_bytes > 0);
    // The periodic region is not taken yet: the recording's gradients still hold their own allocations.
    CHECK(dev.held == st.persistent_bytes + st.arena_bytes - st.periodic_bytes);
    for (std::size_t k = 0; k < s.blocks.size(); ++k)
      if (s.periodic(k)) CHECK(a.block_address(k) == nullptr);
    for (int step = 0; step < 5; ++step) {
      w.step(8);
      REQUIRE(w.served.size() == s.blocks.size());
      for (std::size_t k = 0; k < s.blocks.size(); ++k) {
        REQUIRE(s.in_arena(k));
        CHECK(w.served[k] == a.block_address(k));
      }
    }
    st = a.stats();
    CHECK(st.misses == 0);
    CHECK(st.conflicts == 0);
    CHECK(st.late_frees == 0);
    CHECK(st.carried == 0);
    CHECK(st.carried_in_arena == 5 * 6);
    CHECK(st.hits == 5 * s.blocks.size());
    CHECK(st.peak_pool_bytes == 0);  // nothing of a replayed step went to the pool
    CHECK(st.persistent_bytes == weights);
    CHECK(dev.held == weights + st.arena_bytes);
    CHECK(st.device_bytes == dev.held);
    // The first replayed step freed the recording's gradients before the periodic region was taken.
    CHECK(st.peak_device_bytes == dev.peak);
    CHECK(st.peak_device_bytes <= std::max(live.peak_bound, weights + st.arena_bytes));
    CHECK(st.arena_bytes <= st.planned_peak_bytes + st.planned_peak_bytes / 4);

    // The same loop with the carried gradients in the pool (one recorded step: no next-step frees known).
    FakeDevice dev1;
    PlannedAllocator a1(dev1, small_chunks(1));
    LiveBlocks live1;
    Workload w1{a1, live1};
    w1.zero_grad_after_forward = after_forward;
    w1.setup();
    for (int step = 0; step < 7; ++step) w1.step(8);
    const AllocatorStats pooled = a1.stats();
    CHECK(pooled.carried == 6 * 6);
    CHECK(pooled.carried_in_arena == 0);
    CHECK(pooled.periodic_bytes == 0);
    CHECK(st.arena_bytes < pooled.arena_bytes + pooled.peak_pool_bytes);
    CHECK(st.peak_device_bytes <= pooled.peak_device_bytes);
    CHECK(live.overlaps == 0);
    CHECK(live.corrupted == 0);
    CHECK(live1.overlaps == 0);
    w1.finish();
    w.finish();
    a.step_begin();
    a.step_end();
    CHECK(dev.held == st.arena_bytes);  // weights and gradients back: the arena alone
  }
}

TEST_CASE("a carried block whose next instance is made before the old one is freed stays in the pool") {
  FakeDevice dev;
  PlannedAllocator a(dev, small_chunks(2));
  LiveBlocks live;
  void* held = nullptr;  // `out = model(x)`: the new output is made, then the old one freed by the assignment
  auto step = [&] {
    a.step_begin();
    void* x = a.allocate(40000, 0);
    live.add(x, 40000);
    void* out = a.allocate(30000, 0);
    live.add(out, 30000);
    if (held) {
      live.remove(held);
      a.deallocate(held, 0);
    }
    held = out;
    void* t = a.allocate(20000, 0);
    live.add(t, 20000);
    live.remove(t);
    a.deallocate(t, 0);
    live.remove(x);
    a.deallocate(x, 0);
    a.step_end();
  };
  step();
  step();
  const auto planned = a.planned_step();
  REQUIRE(planned);
  const RecordedStep& s = planned->first;
  REQUIRE(s.blocks.size() == 3);
  CHECK(s.blocks[1].next_free_event == 2);  // freed by the next step after it made its own (event 1)
  CHECK_FALSE(s.periodic(1));
  CHECK_FALSE(s.in_arena(1));
  CHECK(planned->second.offsets[1] == memplan::planner::kNotInArena);
  CHECK(planned->second.periodic_bytes == 0);
  check_plan(a);
  for (int i = 0; i < 4; ++i) step();
  const AllocatorStats st = a.stats();
  CHECK(st.carried == 4);
  CHECK(st.carried_in_arena == 0);
  CHECK(st.misses == 0);
  CHECK(st.hits == 4 * 2);
  CHECK(live.overlaps == 0);
  live.remove(held);
  a.deallocate(held, 0);
  CHECK(live.corrupted == 0);
}

TEST_CASE("a changed order mid-run falls back to the pool, re-plans, and the new plan's gradients are periodic again") {
  FakeDevice dev;
  AllocatorOptions o = small_chunks(2);
  o.replan_after_miss_steps = 2;
  PlannedAllocator a(dev, o);
  LiveBlocks live;
  Workload w{a, live};
  w.zero_grad_after_forward = true;
  w.setup();
  const std::uint64_t weights = dev.held;
  for (int step = 0; step < 4; ++step) w.step(8);
  CHECK(a.stats().misses == 0);
  w.step(8, 5);  // one layer fewer: the order changes after the forward's fifth layer
  CHECK(a.stats().misses > 0);
  CHECK(a.stats().replaying);
  w.step(8, 5);  // the second step with misses: the next step is recorded
  CHECK_FALSE(a.stats().replaying);
  w.step(8, 5);  // recorded (its zero_grad frees the replayed step's gradients, ranked) and planned
  AllocatorStats st = a.stats();
  CHECK(st.replaying);
  CHECK(st.replans == 1);
  CHECK(st.periodic_blocks == 5);
  check_plan(a);
  const std::uint64_t misses = st.misses, periodic_hits = st.carried_in_arena;
  for (int step = 0; step < 3; ++step) w.step(8, 5);
  st = a.stats();
  CHECK(st.misses == misses);
  CHECK(st.carried_in_arena == periodic_hits + 3 * 5);
  CHECK(st.carried == 0);
  // The first plan's arena went back once its last gradients were freed: weights and the new arena only.
  CHECK(dev.held == weights + st.arena_bytes);
  CHECK(st.device_bytes == dev.held);
  CHECK(live.overlaps == 0);
  CHECK(live.corrupted == 0);
  w.finish();
}

TEST_CASE("a gradient kept past its zero_grad holds its range: the next one goes to the pool, nothing overlaps") {
  FakeDevice dev;
  PlannedAllocator a(dev, small_chunks(2));
  LiveBlocks live;
  Workload w{a, live};
  w.zero_grad_after_forward = true;
  for (int step = 0; step < 3; ++step) w.step(8, 2);
  const std::uint64_t hits = a.stats().hits;
  std::vector<void*> kept = w.grads;  // the user holds the gradients: zero_grad frees nothing
  w.grads.clear();
  w.step(8, 2);
  const AllocatorStats st = a.stats();
  CHECK(st.conflicts >= 1);  // the gradients' planned ranges are still held
  CHECK(st.misses >= 1);
  CHECK(st.hits > hits);
  CHECK(live.overlaps == 0);
  w.grads.insert(w.grads.end(), kept.begin(), kept.end());  // the next zero_grad frees them, a step late
  w.step(8, 2);
  CHECK(a.stats().late_frees >= kept.size());
  w.step(8, 2);
  CHECK(live.overlaps == 0);
  CHECK(live.corrupted == 0);
  w.finish();
}
