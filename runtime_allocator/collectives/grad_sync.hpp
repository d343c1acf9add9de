// Data-parallel gradient reduction woven into a run: each weight gradient (or bucket of gradients adjacent in
// memory) is all-reduced (or, under ZeRO, reduce-scattered) on the collectives' queue as soon as its producer has run, and the first op that touches
// its bytes afterwards (its optimizer update) waits for the reduction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "analysis/graph.hpp"
#include "runtime_allocator/backend.hpp"
#include "runtime_allocator/collectives/collectives.hpp"

namespace memplan::runtime {

// What the executor reduces across ranks (ExecOptions::data_parallel).
struct DataParallel {
  Collectives* collectives = nullptr;         // null: nothing is reduced (one process)
  std::vector<analysis::TensorId> gradients;  // each reduced in place, once per run: the mean over the ranks
  // Gradients produced one after another, adjacent in memory and of one dtype are reduced by one call up to this
  // many bytes (as DDP's 25 MiB buckets); 0: one call per gradient.
  std::uint64_t bucket_bytes = std::uint64_t{25} << 20;
  // ZeRO stage (runtime_allocator/collectives/zero_shard.hpp): 0 all-reduces every bucket; 1 and 2 reduce-scatter it, update
  // each rank's shard of the weights and optimizer state, and all-gather the updated weights. 3 is refused.
  int zero_stage = 0;
};

// A bucket of `count` elements over `world` ranks under ZeRO: rank r owns elements [r * chunk, (r + 1) * chunk)
// (reduce-scattered, updated there, then all-gathered) and every rank owns the tail [world * chunk, count) (fewer
// than `world` elements: all-reduced and updated alike on every rank): equal chunks without padding the arena.
struct BucketShard {
  std::uint64_t chunk = 0, tail = 0;
};
BucketShard bucket_shard(std::uint64_t count, int world);

// One reduction: a contiguous byte range holding one or more gradients.
struct GradBucket {
  std::vector<analysis::TensorId> gradients;  // in producer order
  std::byte* data = nullptr;
  std::uint64_t bytes = 0;
  analysis::DType dtype = analysis::DType::undefined;
  std::size_t after_step = 0;  // schedule step after which it is enqueued: the last member's producer
  std::size_t wait_step = 0;   // the first later step that touches a member's bytes (schedule size: none)
  Backend::Event ready = 0, done = 0;
};

// The buckets of `gradients` on `schedule`, every tensor at addr[t]: grouped in producer order while adjacent in
// memory, of one dtype, within bucket_bytes, and enqueued before any member is touched again. `touches(step, lo, hi)`
// says whether the op at `step` reads or writes bytes in [lo, hi) (its inputs, outputs and scratch region).
// Errors: ErrorKind::plan_mismatch for a gradient without a producer or memory, or two gradients sharing bytes.
using TouchesFn = std::function<bool(std::size_t step, const std::byte* lo, const std::byte* hi)>;
std::vector<GradBucket> gradient_buckets(const analysis::Graph& g, const std::vector<analysis::OpId>& schedule,
                                         const std::vector<std::byte*>& addr, const std::vector<analysis::TensorId>& gradients,
                                         std::uint64_t bucket_bytes, const TouchesFn& touches);

// The executor's hooks: `after(step)` enqueues the buckets whose last producer ran at `step`, `before(step)` makes
// the compute queue wait for those first touched at `step`, `finish()` for the rest (no reader in this run).
class GradientSync {
 public:
  // `steps`: the schedule's length. Creates two events per bucket on `backend`. `shard` (ZeRO): each bucket is
  // reduce-scattered (bucket_shard) instead of all-reduced.
  GradientSync(std::vector<GradBucket> buckets, std::size_t steps, Backend& backend, Collectives& collectives,
               bool shard = false);
  void before(std::size_t step);
  void after(std::size_t step);
  void finish();
  const std::vector<GradBucket>& buckets() const noexcept { return buckets_; }

 private:
  std::vector<GradBucket> buckets_;
  Backend& backend_;
  Collectives& coll_;
  bool shard_ = false;
  std::vector<std::vector<std::size_t>> enqueue_at_, wait_at_;  // per step: bucket indices
  std::vector<std::size_t> wait_at_end_;
};

}  // namespace memplan::runtime
