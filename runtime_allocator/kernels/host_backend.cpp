// The host backend: aligned host memory with an optional cap, plain memcpy, the CPU reference kernels.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "runtime_allocator/backend.hpp"

namespace memplan::runtime {

std::int64_t TensorRef::elements() const noexcept {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

HostBackend::HostBackend(std::uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

std::byte* HostBackend::aligned(std::uint64_t bytes, std::uint64_t alignment, bool capped) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    fail(ErrorKind::runtime, "host allocation: alignment " + std::to_string(alignment) + " is not a power of two");
  alignment = std::max<std::uint64_t>(alignment, sizeof(void*));
  const std::uint64_t rounded = align_up(std::max<std::uint64_t>(bytes, 1), alignment);
  if (capped && capacity_ != 0 && (rounded > capacity_ || allocated_ > capacity_ - rounded))
    fail(ErrorKind::runtime, "host backend: " + std::to_string(bytes) + " bytes requested, " +
                                 std::to_string(allocated_) + " of " + std::to_string(capacity_) + " in use");
  void* p = std::aligned_alloc(static_cast<std::size_t>(alignment), static_cast<std::size_t>(rounded));
  if (!p) fail(ErrorKind::runtime, "host backend: out of memory allocating " + std::to_string(bytes) + " bytes");
  (capped ? allocated_ : host_allocated_) += rounded;
  (capped ? sizes_ : host_sizes_)[static_cast<std::byte*>(p)] = rounded;
  return static_cast<std::byte*>(p);
}

std::byte* HostBackend::allocate(std::uint64_t bytes, std::uint64_t alignment) { return aligned(bytes, alignment, true); }

// Host memory of swapped-out tensors: the capacity stands in for a device's memory and does not cover it.
std::byte* HostBackend::allocate_host(std::uint64_t bytes, std::uint64_t alignment) {
  return aligned(bytes, alignment, false);
}

void HostBackend::deallocate(std::byte* p, std::uint64_t /*bytes*/) noexcept {
  auto it = sizes_.find(p);
  if (it == sizes_.end()) return;  // not ours: never free what we did not allocate
  allocated_ -= it->second;
  sizes_.erase(it);
  std::free(p);
}

void HostBackend::deallocate_host(std::byte* p, std::uint64_t /*bytes*/) noexcept {
  auto it = host_sizes_.find(p);
  if (it == host_sizes_.end()) return;
  host_allocated_ -= it->second;
  host_sizes_.erase(it);
  std::free(p);
}

void HostBackend::copy_async(std::byte* dst, const std::byte* src, std::uint64_t bytes, Event, Event) {
  if (bytes && dst != src) std::memmove(dst, src, bytes);
}

static double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
void HostBackend::begin_run() { run_start_ = now_seconds(); }
double HostBackend::end_run() { return now_seconds() - run_start_; }

void HostBackend::copy_to_device(std::byte* dst, const std::byte* host_src, std::uint64_t bytes) {
  if (bytes) std::memmove(dst, host_src, bytes);
}
void HostBackend::copy_to_host(std::byte* host_dst, const std::byte* src, std::uint64_t bytes) {
  if (bytes) std::memmove(host_dst, src, bytes);
}
void HostBackend::copy_on_device(std::byte* dst, const std::byte* src, std::uint64_t bytes) {
  if (bytes) std::memmove(dst, src, bytes);
}

KernelSet& HostBackend::kernels() {
  if (!kernels_) kernels_ = make_cpu_kernels();
  return *kernels_;
}

DeviceBuffer::DeviceBuffer(Backend& backend, std::uint64_t bytes, std::uint64_t alignment)
    : backend_(&backend), ptr_(backend.allocate(bytes, alignment)), bytes_(bytes) {}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : backend_(o.backend_), ptr_(o.ptr_), bytes_(o.bytes_) {
  o.ptr_ = nullptr;
  o.bytes_ = 0;
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    release();
    backend_ = o.backend_;
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}
DeviceBuffer::~DeviceBuffer() { release(); }
void DeviceBuffer::release() noexcept {
  if (ptr_) backend_->deallocate(ptr_, bytes_);
  ptr_ = nullptr;
}

}  // namespace memplan::runtime
