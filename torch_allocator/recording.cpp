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

void Recorder::on_free(const void* p, std::uint64_t bytes, std::int64_t earlier_rank) {
  auto it = live_.find(p);
  if (it == live_.end()) {
    step_.events.push_back(RecordedEvent{false, -1, bytes, earlier_rank < 0 ? -1 : earlier_rank});
    return;
  }
  RecordedBlock& b = step_.blocks[it->second];
  b.free_event = step_.event_count();
  step_.events.push_back(RecordedEvent{false, static_cast<std::int64_t>(it->second), b.bytes, -1});
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
  link_carried(step_);
  active_ = false;
  live_.clear();
  return std::move(step_);
}

void link_carried(RecordedStep& step) {
  std::map<std::uint64_t, std::vector<std::size_t>> carried;  // bytes -> carried blocks, in allocation order
  for (std::size_t k = 0; k < step.blocks.size(); ++k) {
    step.blocks[k].next_free_event = kNotFreed;
    if (step.blocks[k].free_event == kNotFreed) carried[step.blocks[k].bytes].push_back(k);
  }
  for (std::uint32_t e = 0; e < step.event_count(); ++e) {
    const RecordedEvent& ev = step.events[e];
    if (ev.alloc || ev.block >= 0 || ev.earlier_rank < 0) continue;
    auto it = carried.find(ev.bytes);
    if (it == carried.end() || static_cast<std::uint64_t>(ev.earlier_rank) >= it->second.size()) continue;
    RecordedBlock& b = step.blocks[it->second[static_cast<std::size_t>(ev.earlier_rank)]];
    if (b.next_free_event == kNotFreed) b.next_free_event = e;
  }
}

}  // namespace memplan::torch_allocator
