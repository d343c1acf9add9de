// Hand-written CUDA kernels of the losses (see kernels_loss.hpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "runtime_allocator/cuda/block_reduce.cuh"
#include "runtime_allocator/cuda/cuda_context.hpp"
#include "runtime_allocator/cuda/kernels_loss.hpp"

namespace memplan::runtime::cuda {

namespace {

__device__ __forceinline__ float load(const float* p, std::int64_t i) { return p[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16* p, std::int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ float load(const __half* p, std::int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ void store(float* p, std::int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, std::int64_t i, float v) { p[i] = __float2bfloat16(v); }
__device__ __forceinline__ void store(__half* p, std::int64_t i, float v) { p[i] = __float2half(v); }

__device__ __forceinline__ bool labelled(std::int64_t label, std::int64_t classes, std::int64_t ignore) {
  return label != ignore && label >= 0 && label < classes;
}

// The number of labelled rows and dloss / that count, for the gradient (one loss at a time per process, as
// the MSE partials in kernels_training.cu).
__device__ float g_ce_scale;

// Contiguous rows (the class axis last: a language model's vocabulary, up to 256k): a block per row, two
// passes over the row (max, then the sum of exp), each a fixed-order block reduction.
template <class T>
__global__ void ce_rows_kernel(const T* y, float* lse, std::int64_t classes) {
  const std::int64_t row = blockIdx.x;
  const T* yr = y + row * classes;
  float m = -FLT_MAX;
  for (std::int64_t c = threadIdx.x; c < classes; c += blockDim.x) m = fmaxf(m, load(yr, c));
  m = block_reduce<true>(m);
  float s = 0.0f;
  for (std::int64_t c = threadIdx.x; c < classes; c += blockDim.x) s += expf(load(yr, c) - m);
  s = block_reduce<false>(s);
  if (threadIdx.x == 0) lse[row] = m + logf(s);
}

// Strided rows (axis 1 of [N, C, H, W]: neighbouring rows are neighbouring elements): a thread per row.
template <class T>
__global__ void ce_strided_kernel(const T* y, float* lse, ClassRows r) {
  for (std::int64_t row = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; row < r.rows();
       row += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = r.base(row);
    float m = -FLT_MAX;
    for (std::int64_t c = 0; c < r.classes; ++c) m = fmaxf(m, load(y, b + c * r.inner));
    float s = 0.0f;
    for (std::int64_t c = 0; c < r.classes; ++c) s += expf(load(y, b + c * r.inner) - m);
    lse[row] = m + logf(s);
  }
}

// One block: the mean over labelled rows of lse - y[label] (each thread a fixed set of rows, then the block sum).
template <class T>
__global__ void ce_mean_kernel(const T* y, const float* lse, const std::int64_t* labels, float* loss, ClassRows r,
                               std::int64_t ignore) {
  float s = 0.0f, n = 0.0f;
  for (std::int64_t row = threadIdx.x; row < r.rows(); row += blockDim.x) {
    const std::int64_t label = labels[row];
    if (!labelled(label, r.classes, ignore)) continue;
    s += lse[row] - load(y, r.base(row) + label * r.inner);
    n += 1.0f;
  }
  s = block_reduce<false>(s);
  n = block_reduce<false>(n);
  if (threadIdx.x == 0) *loss = s / n;
}

__global__ void ce_scale_kernel(const std::int64_t* labels, const float* dloss, ClassRows r, std::int64_t ignore) {
  float n = 0.0f;
  for (std::int64_t row = threadIdx.x; row < r.rows(); row += blockDim.x) n += labelled(labels[row], r.classes, ignore) ? 1.0f : 0.0f;
  n = block_reduce<false>(n);
  if (threadIdx.x == 0) g_ce_scale = (dloss ? *dloss : 1.0f) / n;
}

// Elementwise over y: reads element i before writing element i (dy may alias y).
template <class T>
__global__ void ce_grad_kernel(const T* y, const float* lse, const std::int64_t* labels, T* dy, ClassRows r, std::int64_t ignore) {
  const float scale = g_ce_scale;
  const std::int64_t n = r.rows() * r.classes;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t c = (i / r.inner) % r.classes;
    const std::int64_t row = (i / (r.inner * r.classes)) * r.inner + i % r.inner;
    const std::int64_t label = labels[row];
    const float v = labelled(label, r.classes, ignore) ? (expf(load(y, i) - lse[row]) - (c == label ? 1.0f : 0.0f)) * scale : 0.0f;
    store(dy, i, v);
  }
}

__global__ void sum_kernel(const float* y, float* loss, std::int64_t n) {
  float s = 0.0f;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) s += y[i];
  s = block_reduce<false>(s);
  if (threadIdx.x == 0) *loss = s;
}

__global__ void fill_kernel(const float* dloss, float* dy, std::int64_t n) {
  const float v = dloss ? *dloss : 1.0f;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    dy[i] = v;
}

template <class T>
void forward(const T* y, const std::int64_t* labels, float* loss, float* lse, const ClassRows& r, std::int64_t ignore,
             cudaStream_t stream) {
  if (r.inner == 1)
    ce_rows_kernel<T><<<static_cast<unsigned>(r.rows()), block_for_row(r.classes), 0, stream>>>(y, lse, r.classes);
  else
    ce_strided_kernel<T><<<grid_for(r.rows()), kThreads, 0, stream>>>(y, lse, r);
  check_launch("CrossEntropyLoss");
  ce_mean_kernel<T><<<1, 1024, 0, stream>>>(y, lse, labels, loss, r, ignore);
  check_launch("CrossEntropyLoss");
}

template <class T>
void backward(const T* y, const float* lse, const std::int64_t* labels, const float* dloss, T* dy, const ClassRows& r,
              std::int64_t ignore, cudaStream_t stream) {
  ce_scale_kernel<<<1, 1024, 0, stream>>>(labels, dloss, r, ignore);
  check_launch("CrossEntropyLossGrad");
  ce_grad_kernel<T><<<grid_for(r.rows() * r.classes), kThreads, 0, stream>>>(y, lse, labels, dy, r, ignore);
  check_launch("CrossEntropyLossGrad");
}

// LinearCrossEntropy: a block per row of the chunk's float32 logits (see linear_ce_rows).
__global__ void linear_ce_rows_kernel(float* logits, const float* bias, const std::int64_t* labels, std::int64_t classes,
                                      std::int64_t ignore, float* row_loss, float* row_keep) {
  const std::int64_t row = blockIdx.x;
  float* yr = logits + row * classes;
  if (bias)
    for (std::int64_t c = threadIdx.x; c < classes; c += blockDim.x) yr[c] += bias[c];
  __syncthreads();
  float m = -FLT_MAX;
  for (std::int64_t c = threadIdx.x; c < classes; c += blockDim.x) m = fmaxf(m, yr[c]);
  m = block_reduce<true>(m);
  float s = 0.0f;
  for (std::int64_t c = threadIdx.x; c < classes; c += blockDim.x) s += expf(yr[c] - m);
  s = block_reduce<false>(s);
  const float lse = m + logf(s);
  const std::int64_t label = labels[row];
  const bool keep = labelled(label, classes, ignore);
  const float picked = keep ? yr[label] : 0.0f;  // every thread reads it before any writes the row
  __syncthreads();
  if (threadIdx.x == 0) {
    row_loss[row] = keep ? lse - picked : 0.0f;
    row_keep[row] = keep ? 1.0f : 0.0f;
  }
  for (std::int64_t c = threadIdx.x; c < classes; c += blockDim.x)
    yr[c] = keep ? expf(yr[c] - lse) - (c == label ? 1.0f : 0.0f) : 0.0f;
}

__global__ void linear_ce_accumulate_kernel(const float* row_loss, const float* row_keep, std::int64_t rows, float* acc) {
  float s = 0.0f, n = 0.0f;
  for (std::int64_t r = threadIdx.x; r < rows; r += blockDim.x) s += row_loss[r], n += row_keep[r];
  s = block_reduce<false>(s);
  n = block_reduce<false>(n);
  if (threadIdx.x == 0) acc[0] += s, acc[1] += n;
}

__global__ void linear_ce_bias_kernel(const float* g, std::int64_t rows, std::int64_t classes, float* db) {
  for (std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; c < classes;
       c += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (std::int64_t r = 0; r < rows; ++r) s += g[r * classes + c];
    db[c] += s;
  }
}

__global__ void linear_ce_scale_kernel(const float* acc, float* p, std::int64_t n) {
  const float scale = 1.0f / acc[1];
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    p[i] *= scale;
}

__global__ void linear_ce_loss_kernel(const float* acc, float* loss) { *loss = acc[0] / acc[1]; }

}  // namespace

void cross_entropy(const void* y, LogitsType dtype, const std::int64_t* labels, float* loss, float* lse,
                   const ClassRows& r, std::int64_t ignore_index, cudaStream_t stream) {
  if (dtype == LogitsType::bf16)
    forward(static_cast<const __nv_bfloat16*>(y), labels, loss, lse, r, ignore_index, stream);
  else if (dtype == LogitsType::f16)
    forward(static_cast<const __half*>(y), labels, loss, lse, r, ignore_index, stream);
  else
    forward(static_cast<const float*>(y), labels, loss, lse, r, ignore_index, stream);
}

void cross_entropy_grad(const void* y, LogitsType dtype, const float* lse, const std::int64_t* labels, const float* dloss,
                        void* dy, const ClassRows& r, std::int64_t ignore_index, cudaStream_t stream) {
  if (dtype == LogitsType::bf16)
    backward(static_cast<const __nv_bfloat16*>(y), lse, labels, dloss, static_cast<__nv_bfloat16*>(dy), r, ignore_index, stream);
  else if (dtype == LogitsType::f16)
    backward(static_cast<const __half*>(y), lse, labels, dloss, static_cast<__half*>(dy), r, ignore_index, stream);
  else
    backward(static_cast<const float*>(y), lse, labels, dloss, static_cast<float*>(dy), r, ignore_index, stream);
}

void sum_loss(const float* y, float* loss, std::int64_t n, cudaStream_t stream) {
  sum_kernel<<<1, 1024, 0, stream>>>(y, loss, n);
  check_launch("SumLoss");
}

void linear_ce_rows(float* logits, const float* bias, const std::int64_t* labels, std::int64_t rows, std::int64_t classes,
                    std::int64_t ignore_index, float* row_loss, float* row_keep, cudaStream_t stream) {
  if (rows <= 0) return;
  linear_ce_rows_kernel<<<static_cast<unsigned>(rows), block_for_row(classes), 0, stream>>>(logits, bias, labels, classes, ignore_index,
                                                                                            row_loss, row_keep);
  check_launch("LinearCrossEntropy rows");
}

void linear_ce_accumulate(const float* row_loss, const float* row_keep, std::int64_t rows, float* acc, cudaStream_t stream) {
  linear_ce_accumulate_kernel<<<1, 1024, 0, stream>>>(row_loss, row_keep, rows, acc);
  check_launch("LinearCrossEntropy accumulate");
}

void linear_ce_bias_grad(const float* g, std::int64_t rows, std::int64_t classes, float* db, cudaStream_t stream) {
  linear_ce_bias_kernel<<<grid_for(classes), kThreads, 0, stream>>>(g, rows, classes, db);
  check_launch("LinearCrossEntropy bias gradient");
}

void linear_ce_finish(const float* acc, float* loss, float* dx, std::int64_t nx, float* dw, std::int64_t nw, float* db,
                      std::int64_t nb, cudaStream_t stream) {
  for (auto [p, n] : {std::pair{dx, nx}, std::pair{dw, nw}, std::pair{db, nb}})
    if (p && n > 0) {
      linear_ce_scale_kernel<<<grid_for(n), kThreads, 0, stream>>>(acc, p, n);
      check_launch("LinearCrossEntropy scale");
    }
  linear_ce_loss_kernel<<<1, 1, 0, stream>>>(acc, loss);
  check_launch("LinearCrossEntropy loss");
}

void fill_loss_grad(const float* dloss, float* dy, std::int64_t n, cudaStream_t stream) {
  fill_kernel<<<grid_for(n), kThreads, 0, stream>>>(dloss, dy, n);
  check_launch("SumLossGrad");
}

}  // namespace memplan::runtime::cuda
