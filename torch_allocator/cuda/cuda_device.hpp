// DeviceMemory on one CUDA device: cudaMalloc / cudaFree, and cudaEvent_t recorded on PyTorch's streams.
#pragma once

#include "torch_allocator/device.hpp"

namespace memplan::torch_allocator {

class CudaDevice final : public DeviceMemory {
 public:
  explicit CudaDevice(int device) : device_(device) {}
  void* allocate(std::uint64_t bytes) override;
  void deallocate(void* p, std::uint64_t bytes) noexcept override;
  Event record_event(StreamId stream) override;
  bool event_done(Event e) override;
  void destroy_event(Event e) noexcept override;

 private:
  int device_;
};

}  // namespace memplan::torch_allocator
