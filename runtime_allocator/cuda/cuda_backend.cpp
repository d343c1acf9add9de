// The CUDA backend's memory, streams and events: cudaMalloc'd device memory, pinned host memory, a
// compute stream and a copy stream for swaps ordered by events, timing and memory statistics.
#include "runtime_allocator/cuda/cuda_backend.hpp"

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "runtime_allocator/cuda/cuda_kernels.hpp"

namespace memplan::runtime::cuda {

bool cuda_available() noexcept { return device_count() > 0; }

struct CudaBackend::Impl {
  CudaOptions opts;
  Context ctx;
  std::unique_ptr<CudaKernels> kernels;
  std::unordered_map<std::byte*, std::uint64_t> device, host;  // live allocations
  std::vector<cudaEvent_t> events;
  cudaEvent_t start = nullptr, stop = nullptr;
  std::size_t free_before = 0;
  CudaStats stats;

  explicit Impl(const CudaOptions& o) : opts(o), ctx(o.device, o.allow_tf32) {
    std::size_t total = 0;
    check(cudaMemGetInfo(&free_before, &total), "cudaMemGetInfo");
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    kernels = std::make_unique<CudaKernels>(ctx, o.side_workspace);
  }
  ~Impl() {
    kernels.reset();  // its workspace before the context
    for (auto e : events) (void)cudaEventDestroy(e);
    if (start) (void)cudaEventDestroy(start);
    if (stop) (void)cudaEventDestroy(stop);
    for (auto& [p, n] : device) (void)cudaFree(p);
    for (auto& [p, n] : host) (void)cudaFreeHost(p);
  }
};

CudaBackend::CudaBackend(const CudaOptions& options) : impl_(std::make_unique<Impl>(options)) {}
CudaBackend::~CudaBackend() = default;

// cudaMalloc aligns to 256 bytes; a larger alignment is not offered.
std::byte* CudaBackend::allocate(std::uint64_t bytes, std::uint64_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > 256)
    fail(ErrorKind::runtime, "CUDA allocation: alignment " + std::to_string(alignment) + " is not a power of two up to 256");
  void* p = nullptr;
  check(cudaMalloc(&p, std::max<std::uint64_t>(bytes, 1)), "cudaMalloc of " + std::to_string(bytes) + " bytes");
  impl_->device[static_cast<std::byte*>(p)] = bytes;
  impl_->stats.device_bytes += bytes;
  return static_cast<std::byte*>(p);
}

void CudaBackend::deallocate(std::byte* p, std::uint64_t /*bytes*/) noexcept {
  auto it = impl_->device.find(p);
  if (it == impl_->device.end()) return;
  impl_->stats.device_bytes -= it->second;
  impl_->device.erase(it);
  (void)cudaFree(p);
}

std::byte* CudaBackend::allocate_host(std::uint64_t bytes, std::uint64_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > 256)
    fail(ErrorKind::runtime, "pinned allocation: alignment " + std::to_string(alignment) + " is not a power of two up to 256");
  void* p = nullptr;
  check(cudaMallocHost(&p, std::max<std::uint64_t>(bytes, 1)), "cudaMallocHost of " + std::to_string(bytes) + " bytes");
  impl_->host[static_cast<std::byte*>(p)] = bytes;
  impl_->stats.host_bytes += bytes;
  return static_cast<std::byte*>(p);
}

void CudaBackend::deallocate_host(std::byte* p, std::uint64_t /*bytes*/) noexcept {
  auto it = impl_->host.find(p);
  if (it == impl_->host.end()) return;
  impl_->stats.host_bytes -= it->second;
  impl_->host.erase(it);
  (void)cudaFreeHost(p);
}

// Copies are ordered on the compute stream; the host side waits where it reads or reuses its buffer.
void CudaBackend::copy_to_device(std::byte* dst, const std::byte* host_src, std::uint64_t bytes) {
  if (!bytes) return;
  check(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyDefault, impl_->ctx.stream()), "upload of " + std::to_string(bytes) + " bytes");
  check(cudaStreamSynchronize(impl_->ctx.stream()), "upload");  // the caller may free its host bytes next
}

void CudaBackend::copy_to_host(std::byte* host_dst, const std::byte* src, std::uint64_t bytes) {
  if (!bytes) return;
  check(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDefault, impl_->ctx.stream()), "download of " + std::to_string(bytes) + " bytes");
  impl_->ctx.synchronize();
}

void CudaBackend::copy_on_device(std::byte* dst, const std::byte* src, std::uint64_t bytes) {
  if (!bytes || dst == src) return;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, impl_->ctx.stream()), "device copy of " + std::to_string(bytes) + " bytes");
}

void CudaBackend::synchronize() { impl_->ctx.synchronize(); }

KernelSet& CudaBackend::kernels() { return *impl_->kernels; }

Backend::Event CudaBackend::create_event() {
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  impl_->events.push_back(e);
  return static_cast<Event>(impl_->events.size() - 1);
}

void CudaBackend::record_on_compute(Event e) { check(cudaEventRecord(impl_->events.at(e), impl_->ctx.stream()), "cudaEventRecord"); }

void CudaBackend::copy_async(std::byte* dst, const std::byte* src, std::uint64_t bytes, Event after, Event done) {
  const cudaStream_t cs = impl_->ctx.copy_stream();
  check(cudaStreamWaitEvent(cs, impl_->events.at(after), 0), "copy stream wait");
  if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cs), "swap copy of " + std::to_string(bytes) + " bytes");
  check(cudaEventRecord(impl_->events.at(done), cs), "cudaEventRecord after a swap copy");
}

void CudaBackend::compute_waits(Event e) {
  check(cudaStreamWaitEvent(impl_->ctx.stream(), impl_->events.at(e), 0), "compute stream wait for a swap");
}

void CudaBackend::begin_run() { check(cudaEventRecord(impl_->start, impl_->ctx.stream()), "cudaEventRecord"); }

double CudaBackend::end_run() {
  Impl& m = *impl_;
  check(cudaEventRecord(m.stop, m.ctx.stream()), "cudaEventRecord");
  m.ctx.synchronize();
  float ms = 0.0f;
  check(cudaEventElapsedTime(&ms, m.start, m.stop), "cudaEventElapsedTime");
  std::size_t free_now = 0, total = 0;
  check(cudaMemGetInfo(&free_now, &total), "cudaMemGetInfo");
  m.stats.peak_device_bytes = std::max<std::uint64_t>(m.stats.peak_device_bytes, m.free_before > free_now ? m.free_before - free_now : 0);
  m.stats.last_run_seconds = ms / 1e3;
  return m.stats.last_run_seconds;
}

const CudaStats& CudaBackend::stats() const {
  Impl& m = *impl_;
  m.stats.fused_kernels = m.kernels->fused().compiled_count();
  m.stats.nvrtc_seconds = m.kernels->fused().compile_seconds();
  m.stats.workspace_bytes = m.kernels->workspace_bytes();
  return m.stats;
}

}  // namespace memplan::runtime::cuda
