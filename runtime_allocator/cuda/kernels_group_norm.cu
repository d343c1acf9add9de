// Hand-written CUDA kernels of InstanceNormalization and InstanceNormGrad (see kernels_norms.hpp): one block per
// sample and channel; float32, bf16 or f16 data with float32 arithmetic, parameters and statistics.
#include "runtime_allocator/cuda/block_reduce.cuh"
#include "runtime_allocator/cuda/cuda_context.hpp"
#include "runtime_allocator/cuda/half_io.cuh"
#include "runtime_allocator/cuda/kernels_norms.hpp"

namespace memplan::runtime::cuda {

namespace {

// The mean first, then the variance of the deviations (two reads of the row, as the CPU kernel).
template <typename T>
__global__ void instance_norm_kernel(const T* x, const float* scale, const float* bias, T* y, float* mean_out,
                                     float* invstd_out, std::int64_t channels, std::int64_t plane, float eps) {
  const std::int64_t r = blockIdx.x;
  const T* xr = x + r * plane;
  float s = 0.0f;
  for (std::int64_t j = threadIdx.x; j < plane; j += blockDim.x) s += widen(xr[j]);
  const float mean = block_reduce<false>(s) / static_cast<float>(plane);
  float v = 0.0f;
  for (std::int64_t j = threadIdx.x; j < plane; j += blockDim.x) {
    const float d = widen(xr[j]) - mean;
    v += d * d;
  }
  const float inv = rsqrtf(block_reduce<false>(v) / static_cast<float>(plane) + eps);
  if (threadIdx.x == 0 && mean_out) mean_out[r] = mean;
  if (threadIdx.x == 0 && invstd_out) invstd_out[r] = inv;
  const float g = scale[r % channels] * inv, b = bias[r % channels];
  // The reductions' barriers: every read of the row precedes the writes (y may alias x).
  for (std::int64_t j = threadIdx.x; j < plane; j += blockDim.x) y[r * plane + j] = narrow<T>((widen(xr[j]) - mean) * g + b);
}

// Per row: the sums of dy and dy * xhat to `sums` (2 floats a row), then dx (when asked).
template <typename T>
__global__ void instance_norm_grad_kernel(const T* dy, const T* x, const float* scale, const float* mean,
                                          const float* invstd, T* dx, float* sums, std::int64_t channels,
                                          std::int64_t plane) {
  const std::int64_t r = blockIdx.x;
  const T* xr = x + r * plane;
  const T* gr = dy + r * plane;
  const float m = mean[r], iv = invstd[r];
  float sg = 0.0f, sgx = 0.0f;
  for (std::int64_t j = threadIdx.x; j < plane; j += blockDim.x) {
    const float g = widen(gr[j]);
    sg += g;
    sgx += g * (widen(xr[j]) - m) * iv;
  }
  sg = block_reduce<false>(sg);
  sgx = block_reduce<false>(sgx);
  if (threadIdx.x == 0) {
    sums[2 * r] = sg;
    sums[2 * r + 1] = sgx;
  }
  if (!dx) return;
  const float n = static_cast<float>(plane), w = scale[r % channels] * iv, mg = sg / n, mgx = sgx / n;
  for (std::int64_t j = threadIdx.x; j < plane; j += blockDim.x)
    dx[r * plane + j] = narrow<T>(w * (widen(gr[j]) - mg - (widen(xr[j]) - m) * iv * mgx));
}

// dScale[c] and dB[c]: the rows' sums of channel c added in sample order (deterministic, no atomics).
__global__ void instance_norm_param_kernel(const float* sums, float* dscale, float* dbias, std::int64_t samples,
                                           std::int64_t channels) {
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (c >= channels) return;
  float sg = 0.0f, sgx = 0.0f;
  for (std::int64_t n = 0; n < samples; ++n) {
    sg += sums[2 * (n * channels + c)];
    sgx += sums[2 * (n * channels + c) + 1];
  }
  if (dscale) dscale[c] = sgx;
  if (dbias) dbias[c] = sg;
}

}  // namespace

void instance_norm(const InstanceNormArgs& a, cudaStream_t stream) {
  const std::int64_t rows = a.samples * a.channels;
  if (rows == 0 || a.plane == 0) return;
  by_float_storage(a.storage, [&](auto tag) {
    using T = decltype(tag);
    instance_norm_kernel<T><<<static_cast<unsigned>(rows), block_for_row(a.plane), 0, stream>>>(
        static_cast<const T*>(a.x), a.scale, a.bias, static_cast<T*>(a.y), a.mean, a.invstd, a.channels, a.plane, a.epsilon);
  });
  check_launch("instance_norm");
}

void instance_norm_grad(const InstanceNormGradArgs& a, float* sums, cudaStream_t stream) {
  const std::int64_t rows = a.samples * a.channels;
  if (rows == 0) return;
  if (a.plane == 0) {  // no elements: every gradient is zero
    if (a.dscale) check(cudaMemsetAsync(a.dscale, 0, static_cast<std::size_t>(a.channels) * sizeof(float), stream), "InstanceNormGrad zero");
    if (a.dbias) check(cudaMemsetAsync(a.dbias, 0, static_cast<std::size_t>(a.channels) * sizeof(float), stream), "InstanceNormGrad zero");
    return;
  }
  by_float_storage(a.storage, [&](auto tag) {
    using T = decltype(tag);
    instance_norm_grad_kernel<T><<<static_cast<unsigned>(rows), block_for_row(a.plane), 0, stream>>>(
        static_cast<const T*>(a.dy), static_cast<const T*>(a.x), a.scale, a.mean, a.invstd, static_cast<T*>(a.dx), sums,
        a.channels, a.plane);
  });
  check_launch("instance_norm_grad");
  if (!a.dscale && !a.dbias) return;
  instance_norm_param_kernel<<<grid_for(a.channels), kThreads, 0, stream>>>(sums, a.dscale, a.dbias, a.samples, a.channels);
  check_launch("instance_norm_grad (parameters)");
}

}  // namespace memplan::runtime::cuda
