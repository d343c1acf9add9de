// Hand-written CUDA kernels of RMSNormalization and RMSNormGrad (see kernels_norms.hpp).
#include "runtime_allocator/cuda/block_reduce.cuh"
#include "runtime_allocator/cuda/cuda_context.hpp"
#include "runtime_allocator/cuda/kernels_norms.hpp"

namespace memplan::runtime::cuda {

namespace {

// Rows whose length is a multiple of 4 on 16-byte aligned bases are read as float4.
__device__ inline bool vectorizable(const void* p, std::int64_t n) {
  return (n & 3) == 0 && (reinterpret_cast<std::uintptr_t>(p) & 15) == 0;
}

__global__ void rms_norm_kernel(const float* x, const float* scale, float* y, float* rstd_out, std::int64_t n, float eps) {
  const std::int64_t r = blockIdx.x;
  const float* xr = x + r * n;
  float* yr = y + r * n;
  const bool vec = vectorizable(x, n) && vectorizable(y, n) && (!scale || vectorizable(scale, n));
  float ss = 0.0f;
  if (vec) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    for (std::int64_t j = threadIdx.x; j < n / 4; j += blockDim.x) {
      const float4 v = x4[j];
      ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
  } else {
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) ss += xr[j] * xr[j];
  }
  const float rstd = rsqrtf(block_reduce<false>(ss) / static_cast<float>(n) + eps);
  if (threadIdx.x == 0 && rstd_out) rstd_out[r] = rstd;
  if (vec) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    const float4* s4 = reinterpret_cast<const float4*>(scale);
    float4* y4 = reinterpret_cast<float4*>(yr);
    for (std::int64_t j = threadIdx.x; j < n / 4; j += blockDim.x) {
      float4 v = x4[j];
      const float4 s = scale ? s4[j] : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
      v.x *= rstd * s.x;
      v.y *= rstd * s.y;
      v.z *= rstd * s.z;
      v.w *= rstd * s.w;
      y4[j] = v;
    }
  } else {
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) yr[j] = xr[j] * rstd * (scale ? scale[j] : 1.0f);
  }
}

__global__ void rms_norm_dx_kernel(const float* dy, const float* x, const float* scale, const float* rstd, float* dx,
                                   std::int64_t n) {
  const std::int64_t r = blockIdx.x;
  const float* xr = x + r * n;
  const float* gr = dy + r * n;
  const float iv = rstd[r];
  float dot = 0.0f;
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) dot += gr[j] * (scale ? scale[j] : 1.0f) * xr[j];
  // The reduction's barriers: every read of the row precedes the writes (dx may alias dy).
  const float c = block_reduce<false>(dot) / static_cast<float>(n) * iv * iv * iv;
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) dx[r * n + j] = iv * gr[j] * (scale ? scale[j] : 1.0f) - xr[j] * c;
}

// Column sums over chunks of rows: block (32 columns, 8 row lanes); one atomic add per column and block.
constexpr int kCols = 32, kRowLanes = 8, kRowsPerBlock = 256;

__global__ void rms_norm_scale_kernel(const float* dy, const float* x, const float* rstd, float* dscale, std::int64_t rows,
                                      std::int64_t n) {
  __shared__ float part[kRowLanes][kCols];
  const std::int64_t j = blockIdx.x * static_cast<std::int64_t>(kCols) + threadIdx.x;
  const std::int64_t r0 = blockIdx.y * static_cast<std::int64_t>(kRowsPerBlock);
  const std::int64_t r1 = r0 + kRowsPerBlock < rows ? r0 + kRowsPerBlock : rows;
  float s = 0.0f;
  if (j < n)
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) s += dy[r * n + j] * x[r * n + j] * rstd[r];
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || j >= n) return;
  for (int k = 1; k < kRowLanes; ++k) s += part[k][threadIdx.x];
  atomicAdd(dscale + j, s);
}

}  // namespace

void rms_norm(const float* x, const float* scale, float* y, float* rstd, std::int64_t rows, std::int64_t n, float eps,
              cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  rms_norm_kernel<<<static_cast<unsigned>(rows), block_for_row(n), 0, stream>>>(x, scale, y, rstd, n, eps);
  check_launch("rms_norm");
}

void rms_norm_grad(const float* dy, const float* x, const float* scale, const float* rstd, float* dx, float* dscale,
                   std::int64_t rows, std::int64_t n, cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  if (dscale) {
    check(cudaMemsetAsync(dscale, 0, static_cast<std::size_t>(n) * sizeof(float), stream), "RMSNormGrad zero");
    const dim3 grid(static_cast<unsigned>((n + kCols - 1) / kCols),
                    static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock));
    rms_norm_scale_kernel<<<grid, dim3(kCols, kRowLanes), 0, stream>>>(dy, x, rstd, dscale, rows, n);
    check_launch("rms_norm_grad (scale)");
  }
  if (dx) {
    rms_norm_dx_kernel<<<static_cast<unsigned>(rows), block_for_row(n), 0, stream>>>(dy, x, scale, rstd, dx, n);
    check_launch("rms_norm_grad");
  }
}

}  // namespace memplan::runtime::cuda
