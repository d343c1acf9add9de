// The CUDA backend: device memory (cudaMalloc), pinned host memory, compute and copy streams ordered by
// events, and the CUDA kernels behind the runtime's Backend and KernelSet interfaces.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime_allocator/backend.hpp"
#include "runtime_allocator/cuda/host_fallback.hpp"

namespace memplan::runtime::cuda {

struct CudaOptions {
  int device = 0;
  bool allow_tf32 = false;  // exact float32 matrix products unless asked
  // Ignore the plan's scratch regions: one cuDNN workspace beside the arena, sized for the algorithm
  // cuDNN ranks first for every convolution (what a runtime without planned workspaces does).
  bool side_workspace = false;
  // Ops the CUDA kernels refuse run on the host where the CPU kernels take them (CudaKernels' HostFallback),
  // reported by host_fallbacks(); off: the executor refuses the step naming the first such op.
  bool host_fallback = false;
};

struct CudaStats {
  std::uint64_t device_bytes = 0;       // cudaMalloc'd by the executor now (arena, buffers, pool chunks)
  std::uint64_t host_bytes = 0;         // pinned host memory now (swapped-out tensors)
  std::uint64_t workspace_bytes = 0;    // with side_workspace: the workspace beside the arena (else 0)
  std::uint64_t peak_device_bytes = 0;  // device memory in use at the end of a run (cudaMemGetInfo), over
                                        // what was in use before the backend was made; the highest so far
  double last_run_seconds = 0.0;        // device time of the last run (events)
  std::size_t fused_kernels = 0;        // NVRTC kernels compiled so far
  double nvrtc_seconds = 0.0;
};

// One device. Errors: ErrorKind::runtime when there is no such device or a CUDA call fails.
class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaOptions& options = {});
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda"; }
  std::byte* allocate(std::uint64_t bytes, std::uint64_t alignment) override;
  void deallocate(std::byte* p, std::uint64_t bytes) noexcept override;
  void copy_to_device(std::byte* dst, const std::byte* host_src, std::uint64_t bytes) override;
  void copy_to_host(std::byte* host_dst, const std::byte* src, std::uint64_t bytes) override;
  void copy_on_device(std::byte* dst, const std::byte* src, std::uint64_t bytes) override;
  void synchronize() override;
  KernelSet& kernels() override;
  std::uint64_t buffer_alignment() const override { return 256; }
  std::byte* allocate_host(std::uint64_t bytes, std::uint64_t alignment) override;
  void deallocate_host(std::byte* p, std::uint64_t bytes) noexcept override;
  Event create_event() override;
  void record_on_compute(Event e) override;
  void copy_async(std::byte* dst, const std::byte* src, std::uint64_t bytes, Event after, Event done) override;
  void compute_waits(Event e) override;
  void begin_run() override;
  double end_run() override;

  const CudaStats& stats() const;
  // The ops run on the host (with CudaOptions::host_fallback): name, type and why CUDA refused each.
  const std::vector<HostFallback>& host_fallbacks() const;
  // What this device's libraries ask as workspace for op `id` of g to run their first-ranked algorithm (cuDNN's
  // heuristics for a convolution, up to 256 MiB); nullopt for an op without a workspace. A planner asks it before
  // planning (planner::AssignOptions::workspace_query) so each convolution's scratch is what this device wants.
  std::optional<std::uint64_t> preferred_workspace(const analysis::Graph& g, analysis::OpId id);
  // The CUDA runtime's handles behind this backend, for code beside it that queues its own work ordered by this
  // backend's events (the NCCL collectives): its device, its compute stream (a cudaStream_t) and event e (a
  // cudaEvent_t made by create_event; ErrorKind::usage for another).
  int device() const noexcept;
  void* native_compute_stream() const noexcept;
  void* native_event(Event e) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The highest head dim (of Q/K and of V) the CUDA attention kernels take: a plan for this backend writes larger
// attention out as matmuls and a softmax (planner::FuseOptions::attention_max_head_dim). Needs no device.
int attention_max_head_dim() noexcept;
// True when a CUDA device is present and usable (false without a driver or without the CUDA build;
// never throws).
bool cuda_available() noexcept;
// The CUDA devices this process sees (0 without a driver; never throws).
int cuda_device_count() noexcept;

}  // namespace memplan::runtime::cuda
