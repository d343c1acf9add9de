// A PyTorch allocator for one device: record a step, plan it with memplan, serve later steps from one arena.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime_allocator/pool.hpp"
#include "torch_allocator/device.hpp"
#include "torch_allocator/recording.hpp"
#include "torch_allocator/step_plan.hpp"

namespace memplan::torch_allocator {

struct AllocatorOptions {
  // Steps recorded (each block its own device allocation); the last one is planned. 2 by default: the first
  // step allocates what lives for the whole run (optimizer state), and the second frees the first's
  // gradients, which tells when a step's carried blocks are freed by the next (periodic blocks: in the arena).
  // With 1, carried blocks are served by the pool.
  int record_steps = 2;
  int replan_after_miss_steps = 2;  // this many consecutive steps with misses start a new recording
  std::uint64_t pool_chunk_bytes = 20ull << 20;
  // Blocks of at most small_block_bytes go to pools of small_chunk_bytes chunks (PyTorch's caching allocator keeps
  // 2 MiB segments for allocations up to 1 MiB): a loss scalar carried past the step holds 2 MiB, not 20. Only
  // where small_chunk_bytes is below pool_chunk_bytes.
  std::uint64_t small_block_bytes = 1ull << 20;
  std::uint64_t small_chunk_bytes = 2ull << 20;
};

struct AllocatorStats {
  std::uint64_t arena_bytes = 0;        // the current arena (0 before the first plan)
  std::uint64_t pool_bytes = 0;         // what the pools hold from the device now
  std::uint64_t peak_pool_bytes = 0;
  std::uint64_t persistent_bytes = 0;   // exact device allocations outside the arena held now (setup, recording)
  std::uint64_t device_bytes = 0;       // arenas (current and retired ones still in use) + pools + exact allocations
  std::uint64_t peak_device_bytes = 0;  // the most taken from the device at once, recording steps included
  std::uint64_t planned_peak_bytes = 0;  // most arena-block bytes live at once in the planned step
  std::uint64_t caching_reserved_bytes = 0;  // caching_allocator_estimate of the planned step
  std::uint64_t hits = 0;               // allocations served at their planned offset
  std::uint64_t misses = 0;             // allocations of a replayed step that did not match the plan
  std::uint64_t conflicts = 0;          // misses whose planned range was still held by an unfreed block
  std::uint64_t resyncs = 0;            // replayed allocations matched further on in the recording (one skipped)
  std::uint64_t late_frees = 0;         // arena blocks freed after the event the plan freed them at
  std::uint64_t other_stream = 0;       // allocations off the arena's stream (pool, by design)
  std::uint64_t carried = 0;            // replayed allocations of carried blocks that are not periodic (pool)
  std::uint64_t carried_in_arena = 0;   // hits of periodic blocks (live past the step, at their offset; in hits too)
  std::uint64_t periodic_bytes = 0;     // the current plan's periodic region (part of arena_bytes; 0: none)
  std::uint64_t periodic_blocks = 0;    // periodic blocks of the current plan
  std::uint64_t setup = 0;              // allocations before the first step (weights: exact allocations)
  std::uint64_t unstepped = 0;          // allocations outside begin/end of a step after the first step (pool)
  std::uint64_t replans = 0;            // plans made after the first
  std::uint64_t plans = 0;
  std::uint64_t steps = 0;              // steps ended
  std::uint64_t recorded_steps = 0;
  std::uint64_t deferred_frees = 0;     // pool frees waiting on a stream event now
  std::string packer;                   // of the current plan
  bool replaying = false;
};

// The statistics as a JSON object, one field per member (docs/torch-allocator.md).
nlohmann::json stats_json(const AllocatorStats& s);

// Device bytes follow the bytes live: allocations before the first step (weights) and every allocation of a
// recorded step are exact device allocations (DeviceMemory::allocate of the rounded size, given back when
// freed), so recording holds no freed bytes; blocks a recorded step leaves live stay such allocations. The
// arena is two device allocations: its main region is taken once the planned step has ended, its periodic
// region (StepPlan::periodic_bytes) when a replayed block first lands in it, i.e. after the recording's own
// carried blocks were freed. Replayed allocations the plan does not place (misses, other streams, carried
// blocks that are not periodic) go to per-stream pools, whose empty chunks go back to the device at every
// step end.
// Every call is serialised by one mutex. Misuse (a free of a pointer never handed out, step_end without
// step_begin) is ErrorKind::usage; device failures are ErrorKind::runtime.
class PlannedAllocator {
 public:
  PlannedAllocator(DeviceMemory& device, AllocatorOptions options = {});
  ~PlannedAllocator();
  PlannedAllocator(const PlannedAllocator&) = delete;
  PlannedAllocator& operator=(const PlannedAllocator&) = delete;

  void* allocate(std::uint64_t size, StreamId stream);
  void deallocate(void* p, StreamId stream);
  void step_begin();
  void step_end();

  AllocatorStats stats() const;
  // Start of the current arena's main region (null before the first plan): block k of the plan with offset
  // o >= periodic_bytes is served at base + (o - periodic_bytes).
  const void* arena_base() const;
  // Where block k of the current plan is served (null: not in the arena, or its region not taken yet).
  const void* block_address(std::size_t k) const;
  // The step the current plan was made from, and that plan (none before the first plan).
  std::optional<std::pair<RecordedStep, StepPlan>> planned_step() const;

 private:
  enum class Where : std::uint8_t { arena, pool, exact };
  struct Live {
    Where where = Where::pool;
    std::uint64_t bytes = 0;
    StreamId stream = 0;
    std::size_t arena = 0;     // arenas_ index for Where::arena
    int part = 1;              // ArenaMemory::part for Where::arena
    std::uint64_t offset = 0;  // arena offset for Where::arena
    std::size_t block = 0;     // planned block for Where::arena
    std::uint64_t step = 0;    // step_serial_ of the step that allocated it (0: outside steps)
    std::uint32_t index = 0;   // its allocation index in that step
    std::int64_t carried_rank = -1;  // live at that step's end: rank among its blocks then live of these bytes
  };
  struct Region {
    void* base = nullptr;  // null: not taken (yet), or given back
    std::uint64_t bytes = 0;
    std::uint64_t live_blocks = 0;
  };
  struct ArenaMemory {
    Region part[2];  // [0]: the periodic region, offsets [0, split); [1]: the main region, [split, end)
    std::uint64_t split = 0;
  };
  struct Deferred {
    void* p = nullptr;
    StreamId stream = 0;
    std::uint64_t bytes = 0;
    std::vector<DeviceMemory::Event> events;
  };

  void* from_pool(std::uint64_t size, StreamId stream);
  void* exact(std::uint64_t size, StreamId stream);
  void* replay(std::uint64_t size, StreamId stream);
  bool range_free(std::uint64_t offset, std::uint64_t bytes) const;
  void release_pool_block(void* p, const Live& b);
  void poll_deferred();
  void make_plan();
  void release_arena_if_unused(std::size_t a);
  void rank_carried();
  runtime::PoolAllocator& pool_of(StreamId stream, std::uint64_t bytes);
  void release_pools();
  void note_device_bytes();

  mutable std::mutex mutex_;
  DeviceMemory& device_;
  AllocatorOptions options_;
  PoolBackend pool_backend_;
  std::map<std::pair<StreamId, bool>, std::unique_ptr<runtime::PoolAllocator>> pools_;  // (stream, small blocks)
  std::unordered_map<void*, Live> live_;
  std::vector<Deferred> deferred_;
  std::vector<ArenaMemory> arenas_;  // the last is current while replaying; earlier ones are retired
  std::map<std::uint64_t, std::uint64_t> arena_live_;  // current arena: offset -> end of each live block

  std::optional<StreamId> first_stream_;  // the arena's stream until a plan names one
  Recorder recorder_;
  int recording_left_ = 0;  // steps still to record before planning
  std::optional<RecordedStep> planned_;
  StepPlan plan_;
  bool replaying_ = false;
  bool in_step_ = false;
  bool stepped_ = false;          // a step has begun: later allocations outside steps are `unstepped`
  std::uint64_t exact_bytes_ = 0;  // held by Where::exact blocks
  std::size_t next_alloc_ = 0;  // the recorded block the step's next allocation is expected to be
  static constexpr std::size_t kResyncWindow = 256;  // how far on an unexpected allocation is looked for
  std::size_t match_recorded(std::uint64_t size, StreamId stream);
  std::uint64_t step_serial_ = 0;  // steps begun
  std::vector<void*> step_allocs_;  // the step's allocations in order (for rank_carried)
  std::uint32_t event_ = 0;      // events of the replayed step so far
  std::uint64_t step_misses_ = 0;
  int miss_steps_ = 0;           // consecutive replayed steps with misses
  AllocatorStats stats_;
};

}  // namespace memplan::torch_allocator
