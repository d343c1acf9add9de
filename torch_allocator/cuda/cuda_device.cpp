// CUDA device memory and events for the planned allocator; every call runs on the allocator's device.
#include "torch_allocator/cuda/cuda_device.hpp"

#include <cuda_runtime_api.h>

#include <string>

#include "analysis/error.hpp"

namespace memplan::torch_allocator {
namespace {

// Makes `device` current for the scope, restoring the caller's device after (PyTorch may call with
// another device current, e.g. freeing from a different thread).
class OnDevice {
 public:
  explicit OnDevice(int device) {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != device) cudaSetDevice(device);
    else previous_ = -1;
  }
  ~OnDevice() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;

 private:
  int previous_ = -1;
};

void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) fail(ErrorKind::runtime, "planned allocator: " + what + ": " + cudaGetErrorString(e));
}
}  // namespace

void* CudaDevice::allocate(std::uint64_t bytes) {
  OnDevice on(device_);
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) cudaGetLastError();  // clear the sticky-free error state of a failed cudaMalloc
  check(e, "cudaMalloc of " + std::to_string(bytes) + " bytes on device " + std::to_string(device_));
  return p;
}

void CudaDevice::deallocate(void* p, std::uint64_t /*bytes*/) noexcept {
  OnDevice on(device_);
  cudaFree(p);
}

DeviceMemory::Event CudaDevice::record_event(StreamId stream) {
  OnDevice on(device_);
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  check(cudaEventRecord(e, reinterpret_cast<cudaStream_t>(stream)), "cudaEventRecord");
  return reinterpret_cast<Event>(e);
}

bool CudaDevice::event_done(Event e) {
  const cudaError_t r = cudaEventQuery(reinterpret_cast<cudaEvent_t>(e));
  if (r == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  check(r, "cudaEventQuery");
  return true;
}

void CudaDevice::destroy_event(Event e) noexcept { cudaEventDestroy(reinterpret_cast<cudaEvent_t>(e)); }

}  // namespace memplan::torch_allocator
