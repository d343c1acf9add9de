// Device helpers shared by the hand-written kernels: launch sizes and a block-wide sum or max.
#pragma once

#include <cfloat>
#include <cstdint>

namespace memplan::runtime::cuda {

inline constexpr int kThreads = 256;

inline unsigned grid_for(std::int64_t n, int threads = kThreads) {
  const std::int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65535 * 16 ? (blocks > 0 ? blocks : 1) : 65535 * 16);
}

// Threads per block for a kernel that gives one block to each row of n elements.
inline int block_for_row(std::int64_t n) { return n >= 1024 ? 1024 : n >= 256 ? 256 : 64; }

// Sum (or max) of one value per thread over the block; every thread gets the result.
template <bool kMax>
__device__ float block_reduce(float v) {
  __shared__ float part[32];
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, w) : v + w;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // part[] may still be read from a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  v = lane < warps ? part[lane] : (kMax ? -FLT_MAX : 0.0f);
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, w) : v + w;
  }
  return v;
}

}  // namespace memplan::runtime::cuda
