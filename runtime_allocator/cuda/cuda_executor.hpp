// Runs a Plan's schedule on a CUDA device: one arena allocation, tensors at their planned offsets.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "analysis/graph.hpp"
#include "planner/plan.hpp"

namespace memplan::runtime::cuda {

// A tensor's value on the host: dtype, dims and raw little-endian bytes.
struct HostValue {
  analysis::DType dtype = analysis::DType::f32;
  std::vector<std::int64_t> dims;
  std::vector<std::byte> bytes;
};

struct CudaRunOptions {
  int device = 0;
  bool allow_tf32 = false;                  // exact float32 matrix products unless asked
  bool synthesize_missing_weights = false;  // weights kept as external data get deterministic values
  // Ignore the plan's scratch regions: one cuDNN workspace beside the arena, sized for the algorithm
  // cuDNN ranks first for every convolution (what a runtime without planned workspaces does).
  bool side_workspace = false;
};

struct CudaRunStats {
  std::uint64_t arena_bytes = 0;      // the plan's arena: one cudaMalloc
  std::uint64_t resident_bytes = 0;   // graph inputs, weights, tensors the plan keeps outside the arena
  std::uint64_t workspace_bytes = 0;  // with side_workspace: the workspace beside the arena (else 0)
  std::uint64_t host_bytes = 0;       // pinned host memory of swapped-out tensors
  std::uint64_t peak_device_bytes = 0;  // device memory in use at the end of the last run, from cudaMemGetInfo,
                                        // over what was in use before the executor was made
  double last_run_seconds = 0.0;      // device time of the last run (events)
  std::size_t fused_kernels = 0;      // NVRTC kernels compiled so far
  double nvrtc_seconds = 0.0;
};

// Executes `g` (concrete shapes; weight bytes imported with keep_weight_data) by `plan`. Arena tensors
// live at plan.tensor_offset; SwapOut/SwapIn (domain memplan) move tensors to pinned host buffers and
// back on a copy stream ordered by events. Unsupported ops are ErrorKind::unsupported naming the op.
class CudaExecutor {
 public:
  CudaExecutor(const analysis::Graph& g, const planner::Plan& plan, const CudaRunOptions& opts = {});
  CudaExecutor(const CudaExecutor&) = delete;
  CudaExecutor& operator=(const CudaExecutor&) = delete;
  ~CudaExecutor();

  // Uploads the given graph inputs (by name), runs the schedule once, returns the graph outputs in order.
  std::vector<HostValue> run(const std::map<std::string, HostValue>& inputs);
  // Runs the schedule on whatever inputs the device holds; returns device seconds.
  double run_device();
  // The bytes tensor t holds on the device now (a gradient or updated weight after a training step).
  HostValue read(analysis::TensorId t) const;
  const CudaRunStats& stats() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// True when a CUDA device is present and usable (false without a driver; never throws).
bool cuda_available() noexcept;

}  // namespace memplan::runtime::cuda
