// CUDA kernels of RandomNormal(Like) and Bernoulli (see kernels_random.hpp).
#include "runtime_allocator/cuda/block_reduce.cuh"
#include "runtime_allocator/cuda/cuda_context.hpp"
#include "runtime_allocator/cuda/kernels_random.hpp"
#include "runtime_allocator/kernels/random_normal.hpp"

namespace memplan::runtime::cuda {

namespace {

__device__ __forceinline__ std::int64_t first_index() { return blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; }
__device__ __forceinline__ std::int64_t stride() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

template <typename T>
__global__ void normal_kernel(T* y, std::int64_t n, std::uint64_t key, double mean, double scale) {
  for (std::int64_t i = first_index(); i < n; i += stride()) {
    if constexpr (sizeof(T) == 4) y[i] = normal_f32(key, static_cast<std::uint64_t>(i), mean, scale);
    else y[i] = normal_f64(key, static_cast<std::uint64_t>(i), mean, scale);
  }
}

template <typename P, typename Y>
__global__ void bernoulli_kernel(const P* p, Y* y, std::int64_t n, std::uint64_t key) {
  for (std::int64_t i = first_index(); i < n; i += stride())
    y[i] = bernoulli_draw(key, static_cast<std::uint64_t>(i), static_cast<double>(p[i])) ? Y(1) : Y(0);
}

template <typename P>
void launch_bernoulli(const P* p, void* y, int y_code, std::int64_t n, std::uint64_t key, cudaStream_t stream) {
  switch (y_code) {
    case 0: bernoulli_kernel<<<grid_for(n), kThreads, 0, stream>>>(p, static_cast<float*>(y), n, key); break;
    case 1: bernoulli_kernel<<<grid_for(n), kThreads, 0, stream>>>(p, static_cast<double*>(y), n, key); break;
    case 2: bernoulli_kernel<<<grid_for(n), kThreads, 0, stream>>>(p, static_cast<std::int32_t*>(y), n, key); break;
    case 3: bernoulli_kernel<<<grid_for(n), kThreads, 0, stream>>>(p, static_cast<std::int64_t*>(y), n, key); break;
    default: bernoulli_kernel<<<grid_for(n), kThreads, 0, stream>>>(p, static_cast<std::uint8_t*>(y), n, key); break;
  }
}

}  // namespace

void random_normal(void* y, bool f64, std::int64_t n, std::uint64_t key, double mean, double scale, cudaStream_t stream) {
  if (n == 0) return;
  if (f64) normal_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<double*>(y), n, key, mean, scale);
  else normal_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<float*>(y), n, key, mean, scale);
  check_launch("random_normal");
}

void bernoulli(const void* p, bool p_f64, void* y, int y_code, std::int64_t n, std::uint64_t key, cudaStream_t stream) {
  if (n == 0) return;
  if (p_f64) launch_bernoulli(static_cast<const double*>(p), y, y_code, n, key, stream);
  else launch_bernoulli(static_cast<const float*>(p), y, y_code, n, key, stream);
  check_launch("bernoulli");
}

}  // namespace memplan::runtime::cuda
