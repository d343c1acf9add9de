// The global staging buffer PyTorch's CUDA reduction kernel takes from the caching allocator inside one op
// (aten/src/ATen/native/cuda/Reduce.cuh: setReduceConfig, ReduceConfig::global_memory_size), for the eager
// prediction: a sum over many rows into many outputs (a bias gradient, autograd's sum_to_size of a broadcast)
// splits each output across thread blocks and stages their partial sums in global memory. The launch
// configuration is recomputed from the (contiguous) input's shape and the reduced dims; the same rule as
// python/memplan_torch/cuda_kernels.py, which estimate_step uses (checked on an H200: a 1024 x 8000 bias-gradient
// sum takes 62.5 MiB).
#pragma once

#include <cstdint>
#include <vector>

namespace memplan::planner {

struct CudaReduceDevice {
  std::uint32_t multiprocessors = 132;  // H100 and H200 (sm_90)
  std::uint32_t max_threads_per_multiprocessor = 2048;
};

// Bytes of the staging buffer plus the semaphores (0 when the kernel needs none) for a reduction of a contiguous
// tensor of `shape` over the dims where `reduced` is true; `element_bytes` is the input's element size (the
// accumulator is 8 bytes for 8-byte inputs, else 4).
std::uint64_t cuda_reduction_staging_bytes(const std::vector<std::int64_t>& shape, const std::vector<bool>& reduced,
                                           std::uint32_t element_bytes, const CudaReduceDevice& device = {});

}  // namespace memplan::planner
