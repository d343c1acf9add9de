// The device a runtime runs on: its memory (allocate, free, copies to and from the host) and its kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "analysis/graph.hpp"

namespace memplan::runtime {

// A tensor as a kernel sees it: bytes in the backend's memory, a dtype and a concrete shape.
// `data` is null for an omitted optional input or output.
struct TensorRef {
  std::byte* data = nullptr;
  analysis::DType dtype = analysis::DType::undefined;
  std::vector<std::int64_t> shape;
  std::uint64_t bytes = 0;

  std::int64_t elements() const noexcept;
  template <class T> T* as() const noexcept { return reinterpret_cast<T*>(data); }
};

// The kernels of one backend. `run` computes op's outputs from its inputs; both live in the backend's
// memory. An output may share its bytes with an input only where `alias_safe(op)` says so (elementwise
// kernels that read element i before writing element i); the executor stages every other overlap.
class KernelSet {
 public:
  virtual ~KernelSet() = default;
  virtual bool supports(const analysis::Op& op) const = 0;
  virtual bool alias_safe(const analysis::Op& op) const = 0;
  // Errors: ErrorKind::unsupported naming the op when no kernel exists or an attribute is not handled.
  virtual void run(const analysis::Op& op, const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) = 0;
};

// Memory of one device. Pointers it returns are device pointers: only its copies and kernels read them.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // `alignment` is a power of two; failure is ErrorKind::runtime naming the request.
  virtual std::byte* allocate(std::uint64_t bytes, std::uint64_t alignment) = 0;
  virtual void deallocate(std::byte* p, std::uint64_t bytes) noexcept = 0;
  virtual void copy_to_device(std::byte* dst, const std::byte* host_src, std::uint64_t bytes) = 0;
  virtual void copy_to_host(std::byte* host_dst, const std::byte* src, std::uint64_t bytes) = 0;
  virtual void copy_on_device(std::byte* dst, const std::byte* src, std::uint64_t bytes) = 0;
  // Waits for queued work (copies, kernels); a no-op on the host.
  virtual void synchronize() {}
  virtual KernelSet& kernels() = 0;
};

// Aligned host memory and the CPU reference kernels. `capacity_bytes` (0: unlimited) caps what is
// allocated at once, standing in for a device's memory in tests.
class HostBackend final : public Backend {
 public:
  explicit HostBackend(std::uint64_t capacity_bytes = 0);
  HostBackend(const HostBackend&) = delete;
  HostBackend& operator=(const HostBackend&) = delete;

  std::string name() const override { return "host"; }
  std::byte* allocate(std::uint64_t bytes, std::uint64_t alignment) override;
  void deallocate(std::byte* p, std::uint64_t bytes) noexcept override;
  void copy_to_device(std::byte* dst, const std::byte* host_src, std::uint64_t bytes) override;
  void copy_to_host(std::byte* host_dst, const std::byte* src, std::uint64_t bytes) override;
  void copy_on_device(std::byte* dst, const std::byte* src, std::uint64_t bytes) override;
  KernelSet& kernels() override;
  std::uint64_t allocated_bytes() const noexcept { return allocated_; }

 private:
  std::uint64_t capacity_ = 0;
  std::uint64_t allocated_ = 0;
  std::unordered_map<std::byte*, std::uint64_t> sizes_;  // live allocations and their rounded sizes
  std::unique_ptr<KernelSet> kernels_;  // made on first use
};

// The CPU reference kernels (float32; int64/int32 for shape arithmetic; bool for masks).
std::unique_ptr<KernelSet> make_cpu_kernels();

// One allocation of a backend, released when the owner goes.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend& backend, std::uint64_t bytes, std::uint64_t alignment);
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();
  std::byte* data() const noexcept { return ptr_; }
  std::uint64_t size() const noexcept { return bytes_; }

 private:
  void release() noexcept;
  Backend* backend_ = nullptr;
  std::byte* ptr_ = nullptr;
  std::uint64_t bytes_ = 0;
};

}  // namespace memplan::runtime
