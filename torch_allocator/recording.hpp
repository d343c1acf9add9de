// The allocation sequence of one recorded training step: blocks in allocation order, their streams and lifetimes.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "torch_allocator/device.hpp"

namespace memplan::torch_allocator {

// PyTorch's caching allocator rounds every block to 512 bytes; the plan uses the same granule.
inline constexpr std::uint64_t kBlockAlignment = 512;
inline constexpr std::uint32_t kNotFreed = UINT32_MAX;

// One allocation of the step. Events number the step's allocations and frees in the order they came.
struct RecordedBlock {
  std::uint64_t size = 0;   // as requested
  std::uint64_t bytes = 0;  // rounded up to kBlockAlignment
  StreamId stream = 0;
  std::uint32_t alloc_event = 0;
  std::uint32_t free_event = kNotFreed;  // kNotFreed: still live when the step ended (carried into the next)
  // A carried block: the event of the following step that frees it, taken from this step (steady state: the
  // next step frees this step's block where this step freed the previous step's one, link_carried);
  // kNotFreed: not known (not carried, the first step recorded, or no matching free).
  std::uint32_t next_free_event = kNotFreed;
};

struct RecordedEvent {
  bool alloc = true;
  std::int64_t block = -1;  // index into blocks; -1: the free of a block allocated before the step
  std::uint64_t bytes = 0;
  // A free of block -1 allocated by the previous step: its rank among the blocks of that step live at its end
  // with the same bytes, in allocation order (0: the first); -1: unknown (allocated earlier, or no step before).
  std::int64_t earlier_rank = -1;
};

struct RecordedStep {
  std::vector<RecordedBlock> blocks;  // in allocation order: the k-th allocation of the step is blocks[k]
  std::vector<RecordedEvent> events;
  StreamId primary_stream = 0;  // the stream with the most allocations (ties: the first seen); the arena's
  std::uint32_t event_count() const noexcept { return static_cast<std::uint32_t>(events.size()); }
  // A periodic block: carried (live past the step) on the primary stream, and the next step frees it before
  // it allocates the block again (next_free_event < alloc_event: gradients made by the backward and freed
  // by the next step's zero_grad). Its arena range holds the previous step's instance over events
  // [0, next_free_event] and this step's over [alloc_event, end]: one offset, a two-piece lifetime.
  bool periodic(std::size_t k) const noexcept {
    const RecordedBlock& b = blocks[k];
    return b.stream == primary_stream && b.free_event == kNotFreed && b.next_free_event < b.alloc_event;
  }
  // Blocks the arena holds: allocated on the primary stream and freed within the step, and periodic blocks.
  // Blocks of other streams and other carried blocks (optimizer state, an output held across the step
  // boundary: two instances live at once) stay outside it.
  bool in_arena(std::size_t k) const noexcept {
    return blocks[k].stream == primary_stream && (blocks[k].free_event != kNotFreed || periodic(k));
  }
};

// Sets each carried block's next_free_event from the step's frees of the previous step's blocks: the free
// with earlier_rank r of b bytes is, in the following step, the free of this step's r-th carried block of b
// bytes (in allocation order) when this step has such a block. Other next_free_events become kNotFreed.
void link_carried(RecordedStep& step);

// Logs one step. Frees of pointers it did not see allocated are the step's frees of earlier blocks; the
// caller names the rank of those the previous step left live (RecordedEvent::earlier_rank).
class Recorder {
 public:
  void begin();
  void on_alloc(const void* p, std::uint64_t size, StreamId stream);
  void on_free(const void* p, std::uint64_t bytes, std::int64_t earlier_rank = -1);
  // The step as recorded; sets primary_stream and links carried blocks (link_carried). The recorder is
  // empty afterwards.
  RecordedStep finish();
  bool active() const noexcept { return active_; }

 private:
  bool active_ = false;
  RecordedStep step_;
  std::unordered_map<const void*, std::size_t> live_;  // pointer -> block
};

std::uint64_t round_block(std::uint64_t size);

}  // namespace memplan::torch_allocator
