// The pool's Backend over raw device memory: allocations forwarded and counted, everything else refused.
#include "torch_allocator/device.hpp"

#include "analysis/error.hpp"

namespace memplan::torch_allocator {

std::byte* PoolBackend::allocate(std::uint64_t bytes, std::uint64_t alignment) {
  void* p = device_.allocate(bytes);
  if (reinterpret_cast<std::uintptr_t>(p) % alignment != 0) {
    device_.deallocate(p, bytes);
    fail(ErrorKind::runtime, "planned allocator: the device returned memory not aligned to " + std::to_string(alignment) + " bytes");
  }
  held_ += bytes;
  return static_cast<std::byte*>(p);
}

void PoolBackend::deallocate(std::byte* p, std::uint64_t bytes) noexcept {
  device_.deallocate(p, bytes);
  held_ -= bytes;
}

void PoolBackend::unsupported(const char* what) {
  fail(ErrorKind::unsupported, std::string("the planned allocator's pool backend has no ") + what);
}

}  // namespace memplan::torch_allocator
