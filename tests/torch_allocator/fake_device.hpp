// A host-memory stand-in for a GPU: counts the bytes taken, and events the test completes by hand.
#pragma once

#include <cstdlib>
#include <map>
#include <mutex>
#include <new>

#include "torch_allocator/device.hpp"

namespace memplan::torch_allocator::testing {

class FakeDevice final : public DeviceMemory {
 public:
  void* allocate(std::uint64_t bytes) override {
    std::lock_guard<std::mutex> lock(m_);
    void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (!p) throw std::bad_alloc();
    held += bytes;
    peak = std::max(peak, held);
    ++allocations;
    return p;
  }
  void deallocate(void* p, std::uint64_t bytes) noexcept override {
    std::lock_guard<std::mutex> lock(m_);
    held -= bytes;
    std::free(p);
  }
  Event record_event(StreamId stream) override {
    std::lock_guard<std::mutex> lock(m_);
    events[++next_] = {stream, false};
    return next_;
  }
  bool event_done(Event e) override {
    std::lock_guard<std::mutex> lock(m_);
    return events.at(e).second;
  }
  void destroy_event(Event e) noexcept override {
    std::lock_guard<std::mutex> lock(m_);
    events.erase(e);
  }
  // Marks every event recorded so far as passed (the streams caught up).
  void complete_events() {
    std::lock_guard<std::mutex> lock(m_);
    for (auto& [id, e] : events) e.second = true;
  }

  std::uint64_t held = 0, peak = 0, allocations = 0;
  std::map<Event, std::pair<StreamId, bool>> events;

 private:
  std::mutex m_;
  Event next_ = 0;
};

}  // namespace memplan::torch_allocator::testing
