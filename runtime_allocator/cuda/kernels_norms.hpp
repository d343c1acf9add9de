// CUDA kernels of memplan's RMSNormalization and RMSNormGrad over rows [rows, n] (fp32; semantics in
// analysis/fused_ops.hpp, as the CPU kernels in runtime_allocator/kernels/kernels_norms.cpp), and of
// InstanceNormalization, GroupNormalization and GroupNormGrad (kernels_group_norm.cu; as kernels/kernels_group_norm.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime_allocator/cuda/float_storage.hpp"

namespace memplan::runtime::cuda {

// y = x * rstd * scale (scale may be null), rstd = 1 / sqrt(mean(x^2) + eps) per row, written to rstd when
// not null. One block per row; y may alias x.
void rms_norm(const float* x, const float* scale, float* y, float* rstd, std::int64_t rows, std::int64_t n, float eps,
              cudaStream_t stream);

// dx = rstd * dy * scale - x * rstd^3 * mean(dy * scale * x) per row (one block per row; dx may be null);
// dscale (may be null) = column sums of dy * x * rstd over the rows.
void rms_norm_grad(const float* dy, const float* x, const float* scale, const float* rstd, float* dx, float* dscale,
                   std::int64_t rows, std::int64_t n, cudaStream_t stream);

// InstanceNormalization and GroupNormalization of x [samples, channels, plane] in rows of one sample and group of
// channels/groups consecutive channels (runtime_allocator/kernels/norm_groups.hpp; instance norm: groups = channels).
struct GroupNormShape {
  std::int64_t samples = 0, channels = 0, groups = 0, plane = 0;
  bool scale_per_group = false;  // scale and bias [groups] (GroupNormalization-18), else [channels]
};

// y (may alias x) in `storage`, float32 scale and bias; the float32 mean and inverse std per row written where not null.
struct GroupNormArgs {
  GroupNormShape shape;
  const void* x = nullptr;
  const float *scale = nullptr, *bias = nullptr;
  void* y = nullptr;
  float *mean = nullptr, *invstd = nullptr;
  float epsilon = 1e-5f;
  FloatStorage storage = FloatStorage::f32;
};
void group_norm(const GroupNormArgs& a, cudaStream_t stream);

// GroupNormGrad: dx (may be null; may alias dy) from dy, x, scale and the saved statistics; dscale and dbias (either may
// be null) the sums of dy * xhat and dy per parameter. `sums`: device scratch of 2 * samples * channels floats.
struct GroupNormGradArgs {
  GroupNormShape shape;
  const void *dy = nullptr, *x = nullptr;
  const float *scale = nullptr, *mean = nullptr, *invstd = nullptr;
  void* dx = nullptr;
  float *dscale = nullptr, *dbias = nullptr;
  FloatStorage storage = FloatStorage::f32;
};
void group_norm_grad(const GroupNormGradArgs& a, float* sums, cudaStream_t stream);

}  // namespace memplan::runtime::cuda
