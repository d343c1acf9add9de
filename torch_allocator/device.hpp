// Raw device memory and stream events as the planned allocator needs them: a fake in tests, CUDA in the .so.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runtime_allocator/backend.hpp"

namespace memplan::torch_allocator {

// A stream as PyTorch hands it to a pluggable allocator (a cudaStream_t), compared by value only.
using StreamId = std::uintptr_t;

// Memory of one device. `allocate` fails with ErrorKind::runtime; `deallocate` may be called while work
// queued on any stream still uses the memory (cudaFree waits for the device); events mark a point of a
// stream's work.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual void* allocate(std::uint64_t bytes) = 0;
  virtual void deallocate(void* p, std::uint64_t bytes) noexcept = 0;
  using Event = std::uint64_t;
  // An event recorded now on `stream`: done once the work queued there so far has finished.
  virtual Event record_event(StreamId stream) = 0;
  virtual bool event_done(Event e) = 0;
  virtual void destroy_event(Event e) noexcept = 0;
};

// The pool allocator's Backend over a DeviceMemory: memory only (no kernels, copies or host memory), and
// a tally of the bytes it holds from the device.
class PoolBackend final : public runtime::Backend {
 public:
  explicit PoolBackend(DeviceMemory& device) : device_(device) {}
  std::string name() const override { return "planned allocator pool"; }
  std::byte* allocate(std::uint64_t bytes, std::uint64_t alignment) override;
  void deallocate(std::byte* p, std::uint64_t bytes) noexcept override;
  void copy_to_device(std::byte*, const std::byte*, std::uint64_t) override { unsupported("copies"); }
  void copy_to_host(std::byte*, const std::byte*, std::uint64_t) override { unsupported("copies"); }
  void copy_on_device(std::byte*, const std::byte*, std::uint64_t) override { unsupported("copies"); }
  runtime::KernelSet& kernels() override { unsupported("kernels"); }
  std::byte* allocate_host(std::uint64_t, std::uint64_t) override { unsupported("host memory"); }
  void deallocate_host(std::byte*, std::uint64_t) noexcept override {}
  Event create_event() override { unsupported("events"); }
  void record_on_compute(Event) override { unsupported("events"); }
  void copy_async(std::byte*, const std::byte*, std::uint64_t, Event, Event) override { unsupported("copies"); }
  void compute_waits(Event) override { unsupported("events"); }
  void begin_run() override {}
  double end_run() override { return 0.0; }
  std::uint64_t held_bytes() const noexcept { return held_; }

 private:
  [[noreturn]] static void unsupported(const char* what);
  DeviceMemory& device_;
  std::uint64_t held_ = 0;
};

}  // namespace memplan::torch_allocator
