// Hand-written CUDA kernels of InstanceNormalization, GroupNormalization and GroupNormGrad (see kernels_norms.hpp):
// float32, bf16 or f16 data with float32 arithmetic, parameters and statistics; rows of norm_groups.hpp.
#include "runtime_allocator/cuda/block_reduce.cuh"
#include "runtime_allocator/cuda/cuda_context.hpp"
#include "runtime_allocator/cuda/half_io.cuh"
#include "runtime_allocator/cuda/kernels_norms.hpp"

namespace memplan::runtime::cuda {

namespace {

// Flat channel index n * C + c -> its scale and bias index.
__device__ __forceinline__ std::int64_t param_of(const GroupNormShape& s, std::int64_t nc) {
  const std::int64_t c = nc % s.channels;
  return s.scale_per_group ? c / (s.channels / s.groups) : c;
}

// One block per row (sample, group): the mean first, then the variance of the deviations (two reads of the row, as the
// CPU kernel).
template <typename T>
__global__ void group_norm_kernel(GroupNormShape s, const T* x, const float* scale, const float* bias, T* y, float* mean_out,
                                  float* invstd_out, float eps) {
  const std::int64_t r = blockIdx.x, len = s.channels / s.groups * s.plane;
  const T* xr = x + r * len;
  float sum = 0.0f;
  for (std::int64_t j = threadIdx.x; j < len; j += blockDim.x) sum += widen(xr[j]);
  const float mean = block_reduce<false>(sum) / static_cast<float>(len);
  float v = 0.0f;
  for (std::int64_t j = threadIdx.x; j < len; j += blockDim.x) {
    const float d = widen(xr[j]) - mean;
    v += d * d;
  }
  const float inv = rsqrtf(block_reduce<false>(v) / static_cast<float>(len) + eps);
  if (threadIdx.x == 0 && mean_out) mean_out[r] = mean;
  if (threadIdx.x == 0 && invstd_out) invstd_out[r] = inv;
  // The reductions' barriers: every read of the row precedes the writes (y may alias x).
  for (std::int64_t j = threadIdx.x; j < len; j += blockDim.x) {
    const std::int64_t p = param_of(s, r * len / s.plane + j / s.plane);
    y[r * len + j] = narrow<T>((widen(xr[j]) - mean) * inv * scale[p] + bias[p]);
  }
}

// One block per (sample, channel): the sums of dy and dy * xhat over the plane into sums[2 nc], sums[2 nc + 1].
template <typename T>
__global__ void channel_sums_kernel(GroupNormShape s, const T* dy, const T* x, const float* mean, const float* invstd,
                                    float* sums) {
  const std::int64_t nc = blockIdx.x, r = nc / (s.channels / s.groups);
  const float m = mean[r], iv = invstd[r];
  float sg = 0.0f, sgx = 0.0f;
  for (std::int64_t j = threadIdx.x; j < s.plane; j += blockDim.x) {
    const float g = widen(dy[nc * s.plane + j]);
    sg += g;
    sgx += g * (widen(x[nc * s.plane + j]) - m) * iv;
  }
  sg = block_reduce<false>(sg);
  sgx = block_reduce<false>(sgx);
  if (threadIdx.x == 0) {
    sums[2 * nc] = sg;
    sums[2 * nc + 1] = sgx;
  }
}

// dScale and dB: per parameter, the channel sums added in sample order (deterministic, no atomics).
__global__ void param_grad_kernel(GroupNormShape s, const float* sums, float* dscale, float* dbias) {
  const std::int64_t p = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t k = s.channels / s.groups, params = s.scale_per_group ? s.groups : s.channels;
  if (p >= params) return;
  const std::int64_t c0 = s.scale_per_group ? p * k : p, c1 = s.scale_per_group ? c0 + k : c0 + 1;
  float sg = 0.0f, sgx = 0.0f;
  for (std::int64_t n = 0; n < s.samples; ++n)
    for (std::int64_t c = c0; c < c1; ++c) {
      sg += sums[2 * (n * s.channels + c)];
      sgx += sums[2 * (n * s.channels + c) + 1];
    }
  if (dscale) dscale[p] = sgx;
  if (dbias) dbias[p] = sg;
}

// One block per row: mean(g) and mean(g * xhat) from the channel sums (g = dy * scale[c]), then dx.
template <typename T>
__global__ void group_norm_dx_kernel(GroupNormShape s, const T* dy, const T* x, const float* scale, const float* mean,
                                     const float* invstd, const float* sums, T* dx) {
  const std::int64_t r = blockIdx.x, k = s.channels / s.groups, len = k * s.plane;
  float mg = 0.0f, mgx = 0.0f;
  for (std::int64_t c = threadIdx.x; c < k; c += blockDim.x) {
    const std::int64_t nc = r * k + c;
    const float w = scale[param_of(s, nc)];
    mg += w * sums[2 * nc];
    mgx += w * sums[2 * nc + 1];
  }
  mg = block_reduce<false>(mg) / static_cast<float>(len);
  mgx = block_reduce<false>(mgx) / static_cast<float>(len);
  const float m = mean[r], iv = invstd[r];
  for (std::int64_t j = threadIdx.x; j < len; j += blockDim.x) {
    const std::int64_t e = r * len + j;
    const float w = scale[param_of(s, e / s.plane)];
    dx[e] = narrow<T>(iv * (w * widen(dy[e]) - mg - (widen(x[e]) - m) * iv * mgx));
  }
}

}  // namespace

void group_norm(const GroupNormArgs& a, cudaStream_t stream) {
  const GroupNormShape& s = a.shape;
  const std::int64_t rows = s.samples * s.groups, len = s.channels / s.groups * s.plane;
  if (rows == 0 || len == 0) return;
  by_float_storage(a.storage, [&](auto tag) {
    using T = decltype(tag);
    group_norm_kernel<T><<<static_cast<unsigned>(rows), block_for_row(len), 0, stream>>>(
        s, static_cast<const T*>(a.x), a.scale, a.bias, static_cast<T*>(a.y), a.mean, a.invstd, a.epsilon);
  });
  check_launch("group_norm");
}

void group_norm_grad(const GroupNormGradArgs& a, float* sums, cudaStream_t stream) {
  const GroupNormShape& s = a.shape;
  const std::int64_t channels = s.samples * s.channels, rows = s.samples * s.groups;
  const std::int64_t params = s.scale_per_group ? s.groups : s.channels;
  if (channels == 0) {
    if (a.dscale) check(cudaMemsetAsync(a.dscale, 0, static_cast<std::size_t>(params) * sizeof(float), stream), "GroupNormGrad zero");
    if (a.dbias) check(cudaMemsetAsync(a.dbias, 0, static_cast<std::size_t>(params) * sizeof(float), stream), "GroupNormGrad zero");
    return;
  }
  by_float_storage(a.storage, [&](auto tag) {
    using T = decltype(tag);
    channel_sums_kernel<T><<<static_cast<unsigned>(channels), block_for_row(s.plane), 0, stream>>>(
        s, static_cast<const T*>(a.dy), static_cast<const T*>(a.x), a.mean, a.invstd, sums);
    check_launch("group_norm_grad (sums)");
    if (a.dx)
      group_norm_dx_kernel<T><<<static_cast<unsigned>(rows), block_for_row(s.channels / s.groups * s.plane), 0, stream>>>(
          s, static_cast<const T*>(a.dy), static_cast<const T*>(a.x), a.scale, a.mean, a.invstd, sums, static_cast<T*>(a.dx));
  });
  check_launch("group_norm_grad");
  if (!a.dscale && !a.dbias) return;
  param_grad_kernel<<<grid_for(params), kThreads, 0, stream>>>(s, sums, a.dscale, a.dbias);
  check_launch("group_norm_grad (parameters)");
}

}  // namespace memplan::runtime::cuda
