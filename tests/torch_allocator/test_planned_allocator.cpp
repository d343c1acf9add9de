// The planned allocator against a fake device: record, plan, replay, misses, re-plans, threads, streams.
#include <doctest/doctest.h>

#include <thread>

#include "analysis/error.hpp"
#include "planner/verify.hpp"
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
// These cases record one step (the carried gradients in the pool); test_periodic_blocks.cpp records two.
AllocatorOptions one_recorded_step() {
  AllocatorOptions o;
  o.record_steps = 1;
  return o;
}
}  // namespace

TEST_CASE("the recorded step's allocations, frees and lifetimes are logged in order") {
  FakeDevice dev;
  PlannedAllocator a(dev, one_recorded_step());
  LiveBlocks live;
  Workload w{a, live};
  w.step(8, 2);
  const auto planned = a.planned_step();
  REQUIRE(planned);
  const RecordedStep& s = planned->first;
  REQUIRE(s.blocks.size() == 8);  // 2 layers: act + temp each, then dx + grad each
  CHECK(s.blocks[0].size == 8000);
  CHECK(s.blocks[0].bytes == 8192);
  CHECK(s.blocks[1].alloc_event == 1);
  CHECK(s.blocks[1].free_event == 2);   // the temporary dies at once
  CHECK(s.blocks[0].free_event == 11);  // the first activation dies in the last backward layer
  CHECK(s.blocks[5].free_event == kNotFreed);  // the gradients live into the next step
  CHECK(s.blocks[7].free_event == kNotFreed);
  CHECK(s.event_count() == 14);
  for (std::size_t e = 0; e < s.events.size(); ++e) {
    const auto& ev = s.events[e];
    REQUIRE(ev.block >= 0);
    const auto& b = s.blocks[static_cast<std::size_t>(ev.block)];
    CHECK((ev.alloc ? b.alloc_event : b.free_event) == e);
  }
  w.finish();
}

TEST_CASE("an identical replay serves every allocation at its planned offset from one arena") {
  FakeDevice dev;
  PlannedAllocator a(dev, one_recorded_step());
  LiveBlocks live;
  Workload w{a, live};
  w.step(8);
  check_plan(a);
  const auto planned = a.planned_step();
  REQUIRE(planned);
  std::size_t in_arena = 0;
  for (std::size_t k = 0; k < planned->first.blocks.size(); ++k) in_arena += planned->first.in_arena(k);
  const std::size_t carried = planned->first.blocks.size() - in_arena;
  CHECK(carried == 6);  // the gradients live into the next step: outside the arena
  for (int s = 0; s < 4; ++s) {
    w.step(8);
    const auto* base = static_cast<const std::byte*>(a.arena_base());
    REQUIRE(base != nullptr);
    REQUIRE(w.served.size() == planned->first.blocks.size());
    for (std::size_t k = 0; k < w.served.size(); ++k)
      if (planned->first.in_arena(k)) CHECK(w.served[k] == base + planned->second.offsets[k]);
  }
  const AllocatorStats st = a.stats();
  CHECK(st.misses == 0);
  CHECK(st.hits == 4 * in_arena);
  CHECK(st.carried == 4 * carried);
  CHECK(st.plans == 1);
  CHECK(st.replans == 0);
  CHECK(st.steps == 5);
  CHECK(st.arena_bytes == planned->second.arena_bytes);
  CHECK(st.arena_bytes <= st.caching_reserved_bytes);
  CHECK(st.persistent_bytes == 0);  // the recording's gradients were freed by the next step
  CHECK(dev.held == st.arena_bytes + st.pool_bytes);  // the pool holds the gradients only
  CHECK(st.device_bytes == dev.held);
  CHECK(live.overlaps == 0);
  CHECK(live.corrupted == 0);
  w.finish();
}

TEST_CASE("device bytes follow live bytes: weights and recording exact, the arena taken after the step") {
  FakeDevice dev;
  PlannedAllocator a(dev, one_recorded_step());
  LiveBlocks live;
  Workload w{a, live};
  w.keep_grads = false;  // weights persistent, everything of the step transient
  w.setup();
  const AllocatorStats before = a.stats();
  CHECK(before.setup == 6);
  CHECK(before.persistent_bytes == dev.held);
  CHECK(before.pool_bytes == 0);
  w.step(8);
  const AllocatorStats st = a.stats();
  CHECK(st.unstepped == 0);
  // Recording held exactly the live blocks; the arena came after the step's blocks were given back.
  CHECK(st.peak_device_bytes == dev.peak);
  CHECK(st.peak_device_bytes <= live.peak_bound);
  CHECK(st.peak_device_bytes == before.persistent_bytes + std::max(st.planned_peak_bytes, st.arena_bytes));
  CHECK(st.persistent_bytes == before.persistent_bytes);
  CHECK(st.pool_bytes == 0);
  for (int s = 0; s < 3; ++s) {
    w.step(8);
    CHECK(dev.held == st.persistent_bytes + st.arena_bytes);  // an identical replay takes nothing more
  }
  const AllocatorStats end = a.stats();
  CHECK(end.misses == 0);
  CHECK(end.carried == 0);
  CHECK(end.peak_device_bytes == st.peak_device_bytes);
  CHECK(end.peak_device_bytes <= live.peak_bound);
  CHECK(end.device_bytes == dev.held);
  CHECK(live.overlaps == 0);
  CHECK(live.corrupted == 0);
  w.finish();
  CHECK(dev.held == a.stats().arena_bytes);  // the weights went back to the device when freed
}

TEST_CASE("blocks a recorded step leaves live stay their own allocations, replayed ones use the pool") {
  FakeDevice dev;
  AllocatorOptions o = one_recorded_step();
  o.pool_chunk_bytes = 1 << 16;
  PlannedAllocator a(dev, o);
  LiveBlocks live;
  Workload w{a, live};
  w.setup();
  const std::uint64_t weights = dev.held;
  w.step(8);
  AllocatorStats st = a.stats();
  std::uint64_t grads = 0;
  for (std::size_t l = 0; l < 6; ++l) grads += round_block(4096 * (l + 1) + 3);
  CHECK(st.persistent_bytes == weights + grads);
  CHECK(dev.held == weights + grads + st.arena_bytes);
  // Recording held nothing beyond the live blocks; then the arena beside the blocks live past the step.
  CHECK(st.peak_device_bytes == dev.peak);
  CHECK(st.peak_device_bytes <= std::max(live.peak_bound, dev.held));
  CHECK(st.arena_bytes <= st.planned_peak_bytes + st.planned_peak_bytes / 4);
  w.step(8);  // zero_grad gives the recording's gradients back; the new ones come from the pool
  st = a.stats();
  CHECK(st.persistent_bytes == weights);
  CHECK(st.carried == 6);
  CHECK(st.misses == 0);
  CHECK(dev.held == weights + st.arena_bytes + st.pool_bytes);
  const std::uint64_t pool = st.pool_bytes;
  w.step(8);
  CHECK(a.stats().pool_bytes == pool);  // the freed gradients' chunks were reused, not grown
  CHECK(live.overlaps == 0);
  CHECK(live.corrupted == 0);
  w.finish();
  a.step_begin();
  a.step_end();  // a step end gives the empty chunks back
  CHECK(dev.held == a.stats().arena_bytes);
}

TEST_CASE("small blocks served by the pool take small chunks, large ones the large chunks") {
  FakeDevice dev;
  PlannedAllocator a(dev, one_recorded_step());  // default chunks: 2 MiB for blocks up to 1 MiB, 20 MiB above
  LiveBlocks live;
  Workload w{a, live};
  w.setup();
  const std::uint64_t weights = dev.held;
  w.step(8);
  w.step(8);  // the carried gradients (at most 24 KiB each) come from the pool: one small chunk
  AllocatorStats st = a.stats();
  CHECK(st.carried == 6);
  CHECK(st.pool_bytes == AllocatorOptions{}.small_chunk_bytes);
  CHECK(dev.held == weights + st.arena_bytes + st.pool_bytes);
  // A block above small_block_bytes that the plan does not know (in a step) goes to a large chunk.
  a.step_begin();
  void* p = w.alloc(AllocatorOptions{}.small_block_bytes + 4096);
  st = a.stats();
  CHECK(st.misses == 1);
  CHECK(st.pool_bytes == AllocatorOptions{}.small_chunk_bytes + AllocatorOptions{}.pool_chunk_bytes);
  w.release(p);
  a.step_end();
  CHECK(live.overlaps == 0);
  CHECK(live.corrupted == 0);
}

TEST_CASE("a short last batch is served by the pool, counted, and overlaps nothing") {
  FakeDevice dev;
  PlannedAllocator a(dev, one_recorded_step());
  LiveBlocks live;
  Workload w{a, live};
  for (int s = 0; s < 3; ++s) w.step(8);
  const std::uint64_t carried_before = a.stats().carried;
  w.step(5);  // the short batch: activations differ in size, gradients match
  AllocatorStats st = a.stats();
  CHECK(st.misses > 0);
  CHECK(st.carried > carried_before);  // the gradients still match (live past the step: the pool's)
  CHECK(st.pool_bytes > 0);
  CHECK(st.replans == 0);
  w.step(8);  // the next epoch's full batches hit again
  CHECK(a.stats().misses == st.misses);
  CHECK(live.overlaps == 0);
  CHECK(live.corrupted == 0);
  check_plan(a);
  w.finish();
}

TEST_CASE("a run of steps with misses re-records and re-plans, and the new plan is verified") {
  FakeDevice dev;
  AllocatorOptions o = one_recorded_step();
  o.replan_after_miss_steps = 2;
  PlannedAllocator a(dev, o);
  LiveBlocks live;
  Workload w{a, live};
  w.step(8);
  w.step(8);
  w.step(4);  // miss step 1
  CHECK(a.stats().replaying);
  w.step(4);  // miss step 2: re-record next
  CHECK_FALSE(a.stats().replaying);
  w.step(4);  // recorded and planned
  AllocatorStats st = a.stats();
  CHECK(st.replaying);
  CHECK(st.replans == 1);
  CHECK(st.plans == 2);
  check_plan(a);
  const std::uint64_t misses = st.misses;
  w.step(4);
  w.step(4);
  CHECK(a.stats().misses == misses);
  CHECK(live.overlaps == 0);
  CHECK(live.corrupted == 0);
  w.finish();
  CHECK(dev.held == a.stats().device_bytes);
}

TEST_CASE("a one-off allocation of the recorded step (DDP rebuilding its buckets) does not make the replay miss") {
  FakeDevice dev;
  PlannedAllocator a(dev, one_recorded_step());
  LiveBlocks live;
  Workload w{a, live};
  w.one_off_bytes = 50000;  // made in the recorded step alone, before its forward, and kept
  w.step(8);
  for (int s = 0; s < 4; ++s) w.step(8);
  const AllocatorStats st = a.stats();
  CHECK(st.misses == 0);
  CHECK(st.resyncs == 4);  // each replayed step's first allocation skips the one-off's place
  CHECK(st.replans == 0);
  CHECK(st.hits > 0);
  CHECK(live.overlaps == 0);
  CHECK(live.corrupted == 0);
  check_plan(a);
  w.finish();
}

TEST_CASE("a block freed later than planned keeps its range: the block planned over it goes to the pool") {
  FakeDevice dev;
  PlannedAllocator a(dev, one_recorded_step());
  LiveBlocks live;
  a.step_begin();
  void* x = a.allocate(1 << 20, 0);
  a.deallocate(x, 0);
  void* y = a.allocate(1 << 20, 0);
  a.deallocate(y, 0);
  a.step_end();
  const auto planned = a.planned_step();
  REQUIRE(planned);
  CHECK(planned->second.offsets[0] == planned->second.offsets[1]);  // planned to share bytes
  a.step_begin();
  x = a.allocate(1 << 20, 0);
  live.add(x, 1 << 20);
  y = a.allocate(1 << 20, 0);  // x still held
  live.add(y, 1 << 20);
  CHECK(y != x);
  const AllocatorStats st = a.stats();
  CHECK(st.conflicts == 1);
  CHECK(st.misses == 1);
  CHECK(live.overlaps == 0);
  live.remove(x);
  live.remove(y);
  a.deallocate(x, 0);
  CHECK(a.stats().late_frees == 1);
  a.deallocate(y, 0);
  a.step_end();
  CHECK(live.corrupted == 0);
}

TEST_CASE("two threads allocating at once get disjoint blocks and consistent counts") {
  FakeDevice dev;
  PlannedAllocator a(dev, one_recorded_step());
  LiveBlocks live;
  auto worker = [&](unsigned seed) {
    std::vector<void*> mine;
    for (unsigned i = 0; i < 400; ++i) {
      const std::uint64_t bytes = 512 * (1 + (seed * 7919 + i * 104729) % 64);
      void* p = a.allocate(bytes, 0);
      live.add(p, bytes);
      mine.push_back(p);
      if (i % 3 == 2) {
        live.remove(mine.front());
        a.deallocate(mine.front(), 0);
        mine.erase(mine.begin());
      }
    }
    for (void* p : mine) {
      live.remove(p);
      a.deallocate(p, 0);
    }
  };
  for (int s = 0; s < 3; ++s) {
    a.step_begin();
    std::thread t1(worker, 1), t2(worker, 2);
    t1.join();
    t2.join();
    a.step_end();
  }
  const AllocatorStats st = a.stats();
  CHECK(st.hits + st.misses == 2 * 800);  // the first step was recorded
  CHECK(live.overlaps == 0);
  CHECK(live.corrupted == 0);
  CHECK(live.size() == 0);
}

TEST_CASE("allocations on a second stream stay out of the arena and return to the pool after its events") {
  FakeDevice dev;
  PlannedAllocator a(dev, one_recorded_step());
  LiveBlocks live;
  auto step = [&] {
    a.step_begin();
    void* x = a.allocate(10000, 0);
    live.add(x, 10000);
    void* side = a.allocate(3000, 7);  // a copy stream's buffer
    live.add(side, 3000);
    live.remove(side);
    a.deallocate(side, 7);
    live.remove(x);
    a.deallocate(x, 0);
    a.step_end();
  };
  step();
  const auto planned = a.planned_step();
  REQUIRE(planned);
  CHECK(planned->first.primary_stream == 0);
  CHECK(planned->second.offsets[1] == memplan::planner::kNotInArena);
  step();
  AllocatorStats st = a.stats();
  CHECK(st.other_stream == 1);
  CHECK(st.hits == 1);
  CHECK(st.misses == 0);
  CHECK(st.deferred_frees == 1);  // the replayed step's: the recorded one was its own allocation, given back
  dev.complete_events();
  step();
  CHECK(a.stats().deferred_frees == 1);
  CHECK(live.overlaps == 0);
}

TEST_CASE("misuse is reported: a foreign free, step_end outside a step, a zero record count") {
  FakeDevice dev;
  PlannedAllocator a(dev, one_recorded_step());
  int x = 0;
  CHECK_THROWS_AS(a.deallocate(&x, 0), memplan::Error);
  CHECK_THROWS_AS(a.step_end(), memplan::Error);
  AllocatorOptions o;
  o.record_steps = 0;
  CHECK_THROWS_AS(PlannedAllocator(dev, o), memplan::Error);
  CHECK(a.allocate(0, 0) == nullptr);
}

TEST_CASE("record_steps plans the last of the recorded steps, and the stats JSON names every counter") {
  FakeDevice dev;
  AllocatorOptions o;
  o.record_steps = 2;
  PlannedAllocator a(dev, o);
  LiveBlocks live;
  Workload w{a, live};
  w.step(8);
  CHECK_FALSE(a.stats().replaying);
  w.step(8);
  CHECK(a.stats().replaying);
  CHECK(a.stats().recorded_steps == 2);
  // The planned step begins with the frees of the first step's gradients.
  CHECK_FALSE(a.planned_step()->first.events.front().alloc);
  const auto j = stats_json(a.stats());
  for (const char* k : {"arena_bytes", "pool_bytes", "peak_pool_bytes", "device_bytes", "peak_device_bytes", "hits", "misses",
                        "replans", "resyncs", "steps", "packer", "caching_reserved_bytes"})
    CHECK(j.contains(k));
  w.finish();
}
