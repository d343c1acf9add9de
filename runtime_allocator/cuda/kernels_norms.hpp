// CUDA kernels of memplan's RMSNormalization and RMSNormGrad over rows [rows, n] (fp32; semantics in
// analysis/fused_ops.hpp, as the CPU kernels in runtime_allocator/kernels/kernels_norms.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace memplan::runtime::cuda {

// y = x * rstd * scale (scale may be null), rstd = 1 / sqrt(mean(x^2) + eps) per row, written to rstd when
// not null. One block per row; y may alias x.
void rms_norm(const float* x, const float* scale, float* y, float* rstd, std::int64_t rows, std::int64_t n, float eps,
              cudaStream_t stream);

// dx = rstd * dy * scale - x * rstd^3 * mean(dy * scale * x) per row (one block per row; dx may be null);
// dscale (may be null) = column sums of dy * x * rstd over the rows.
void rms_norm_grad(const float* dy, const float* x, const float* scale, const float* rstd, float* dx, float* dscale,
                   std::int64_t rows, std::int64_t n, cudaStream_t stream);

}  // namespace memplan::runtime::cuda
