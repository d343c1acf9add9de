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
};

struct RecordedEvent {
  bool alloc = true;
  std::int64_t block = -1;  // index into blocks; -1: the free of a block allocated before the step
  std::uint64_t bytes = 0;
};

struct RecordedStep {
  std::vector<RecordedBlock> blocks;  // in allocation order: the k-th allocation of the step is blocks[k]
  std::vector<RecordedEvent> events;
  StreamId primary_stream = 0;  // the stream with the most allocations (ties: the first seen); the arena's
  std::uint32_t event_count() const noexcept { return static_cast<std::uint32_t>(events.size()); }
  // Blocks the arena holds: allocated on the primary stream and freed within the step. Blocks of other
  // streams and blocks live past the step's end (carried: gradients, optimizer state) stay outside it.
  bool in_arena(std::size_t k) const noexcept { return blocks[k].stream == primary_stream && blocks[k].free_event != kNotFreed; }
};

// Logs one step. Frees of pointers it did not see allocated are the step's frees of earlier blocks.
class Recorder {
 public:
  void begin();
  void on_alloc(const void* p, std::uint64_t size, StreamId stream);
  void on_free(const void* p, std::uint64_t bytes);
  // The step as recorded; sets primary_stream. The recorder is empty afterwards.
  RecordedStep finish();
  bool active() const noexcept { return active_; }

 private:
  bool active_ = false;
  RecordedStep step_;
  std::unordered_map<const void*, std::size_t> live_;  // pointer -> block
};

std::uint64_t round_block(std::uint64_t size);

}  // namespace memplan::torch_allocator
