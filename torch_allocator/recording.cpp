// The recorder: allocation and free events of one step, in order, with each block's lifetime.
#include "torch_allocator/recording.hpp"

#include <map>

#include "analysis/error.hpp"

namespace memplan::torch_allocator {

std::uint64_t round_block(std::uint64_t size) { return align_up(size == 0 ? 1 : size, kBlockAlignment); }

void Recorder::begin() {
  step_ = RecordedStep{};
  live_.clear();
  active_ = true;
}

void Recorder::on_alloc(const void* p, std::uint64_t size, StreamId stream) {
  const auto k = static_cast<std::int64_t>(step_.blocks.size());
  step_.blocks.push_back(RecordedBlock{size, round_block(size), stream, step_.event_count(), kNotFreed});
  step_.events.push_back(RecordedEvent{true, k, step_.blocks.back().bytes});
  live_[p] = static_cast<std::size_t>(k);
}

void Recorder::on_free(const void* p, std::uint64_t bytes) {
  auto it = live_.find(p);
  if (it == live_.end()) {
    step_.events.push_back(RecordedEvent{false, -1, bytes});
    return;
  }
  RecordedBlock& b = step_.blocks[it->second];
  b.free_event = step_.event_count();
  step_.events.push_back(RecordedEvent{false, static_cast<std::int64_t>(it->second), b.bytes});
  live_.erase(it);
}

RecordedStep Recorder::finish() {
  std::map<StreamId, std::size_t> count;
  for (const auto& b : step_.blocks) ++count[b.stream];
  std::size_t best = 0;
  for (const auto& b : step_.blocks)  // first seen among the most used
    if (count[b.stream] > best) {
      best = count[b.stream];
      step_.primary_stream = b.stream;
    }
  active_ = false;
  live_.clear();
  return std::move(step_);
}

}  // namespace memplan::torch_allocator
