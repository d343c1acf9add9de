// The CUDA backend's memory, streams and events: cudaMalloc'd device memory, pinned host memory, a
// compute stream and a copy stream for swaps ordered by events, timing and memory statistics.
#include "runtime_allocator/cuda/cuda_backend.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "analysis/ops.hpp"
#include "runtime_allocator/cuda/attention_params.hpp"
#include "runtime_allocator/cuda/cuda_kernels.hpp"

namespace memplan::runtime::cuda {

bool cuda_available() noexcept { return device_count() > 0; }
int attention_max_head_dim() noexcept { return kAttentionMaxHeadDim; }
int cuda_device_count() noexcept { return device_count(); }

struct CudaBackend::Impl {
  CudaOptions opts;
  Context ctx;
  std::unique_ptr<CudaKernels> kernels;
  std::unordered_map<std::byte*, std::uint64_t> device, host;  // live allocations by the address handed out
  std::unordered_map<std::byte*, void*> raw;                    // handed-out address -> what cudaMalloc/Host returned
  std::vector<cudaEvent_t> events;
  cudaEvent_t start = nullptr, stop = nullptr;
  std::size_t free_before = 0;
  CudaStats stats;

  std::byte* take(std::uint64_t bytes, std::uint64_t alignment, bool on_host);
  void give(std::byte* p, bool on_host) noexcept;

  explicit Impl(const CudaOptions& o) : opts(o), ctx(o.device, o.allow_tf32) {
    std::size_t total = 0;
    check(cudaMemGetInfo(&free_before, &total), "cudaMemGetInfo");
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    kernels = std::make_unique<CudaKernels>(ctx, o.side_workspace, o.host_fallback);
  }
  ~Impl() {
    kernels.reset();  // its workspace before the context
    for (auto e : events) (void)cudaEventDestroy(e);
    if (start) (void)cudaEventDestroy(start);
    if (stop) (void)cudaEventDestroy(stop);
    for (auto& [p, n] : device) (void)cudaFree(raw.at(p));
    for (auto& [p, n] : host) (void)cudaFreeHost(raw.at(p));
  }
};

CudaBackend::CudaBackend(const CudaOptions& options) : impl_(std::make_unique<Impl>(options)) {}
CudaBackend::~CudaBackend() = default;

std::optional<std::uint64_t> CudaBackend::preferred_workspace(const analysis::Graph& g, analysis::OpId id) {
  const analysis::OpInfo* info = analysis::op_registry().find(g.ops.at(id));
  if (!info || !info->uses_workspace) return std::nullopt;
  return impl_->kernels->preferred_workspace(g, id);
}

namespace {
// cudaMalloc and cudaMallocHost align to 256 bytes; a larger power-of-two alignment (the pool's 4 KiB
// chunks) is met by asking for alignment - 256 more bytes and handing out the aligned address inside.
std::uint64_t padding_for(std::uint64_t alignment, const char* what) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > (std::uint64_t{1} << 21))
    fail(ErrorKind::runtime, std::string(what) + ": alignment " + std::to_string(alignment) + " is not a power of two up to 2 MiB");
  return alignment > 256 ? alignment - 256 : 0;
}
std::byte* aligned_inside(void* p, std::uint64_t alignment) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  return reinterpret_cast<std::byte*>((a + alignment - 1) / alignment * alignment);
}
}  // namespace

// One allocation of either kind: `live` and `counted` are the device or the host books.
std::byte* CudaBackend::Impl::take(std::uint64_t bytes, std::uint64_t alignment, bool on_host) {
  const char* what = on_host ? "pinned allocation" : "CUDA allocation";
  const std::uint64_t pad = padding_for(alignment, what);
  const std::uint64_t n = std::max<std::uint64_t>(checked_add(bytes, pad, what), 1);
  void* p = nullptr;
  if (on_host) check(cudaMallocHost(&p, n), "cudaMallocHost of " + std::to_string(bytes) + " bytes");
  else check(cudaMalloc(&p, n), "cudaMalloc of " + std::to_string(bytes) + " bytes");
  std::byte* at = aligned_inside(p, alignment);
  (on_host ? host : device)[at] = bytes + pad;
  raw[at] = p;
  (on_host ? stats.host_bytes : stats.device_bytes) += bytes + pad;
  return at;
}

void CudaBackend::Impl::give(std::byte* p, bool on_host) noexcept {
  auto& live = on_host ? host : device;
  auto it = live.find(p);
  if (it == live.end()) return;
  (on_host ? stats.host_bytes : stats.device_bytes) -= it->second;
  live.erase(it);
  if (on_host) (void)cudaFreeHost(raw[p]);
  else (void)cudaFree(raw[p]);
  raw.erase(p);
}

std::byte* CudaBackend::allocate(std::uint64_t bytes, std::uint64_t alignment) { return impl_->take(bytes, alignment, false); }
void CudaBackend::deallocate(std::byte* p, std::uint64_t /*bytes*/) noexcept { impl_->give(p, false); }
std::byte* CudaBackend::allocate_host(std::uint64_t bytes, std::uint64_t alignment) { return impl_->take(bytes, alignment, true); }
void CudaBackend::deallocate_host(std::byte* p, std::uint64_t /*bytes*/) noexcept { impl_->give(p, true); }

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
const std::vector<HostFallback>& CudaBackend::host_fallbacks() const { return impl_->kernels->host_fallbacks(); }

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

int CudaBackend::device() const noexcept { return impl_->ctx.device(); }
void* CudaBackend::native_compute_stream() const noexcept { return impl_->ctx.stream(); }
void* CudaBackend::native_event(Event e) const {
  if (e >= impl_->events.size()) fail(ErrorKind::usage, "event " + std::to_string(e) + " was not made by this CUDA backend");
  return impl_->events[e];
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
