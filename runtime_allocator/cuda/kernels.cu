// Hand-written CUDA kernels of the executor: strided copies, softmax, layer norm, reductions, gather.
#include <cfloat>

#include "runtime_allocator/cuda/block_reduce.cuh"
#include "runtime_allocator/cuda/half_io.cuh"
#include "runtime_allocator/cuda/cuda_context.hpp"
#include "runtime_allocator/cuda/kernels.hpp"

namespace memplan::runtime::cuda {

namespace {

template <typename T>
__global__ void strided_copy_kernel(StridedCopy c, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t r = i, so = 0, d = 0;
    for (int k = c.rank - 1; k >= 0; --k) {
      const std::int64_t q = r % c.dims[k];
      r /= c.dims[k];
      so += q * c.src_strides[k];
      d += q * c.dst_strides[k];
    }
    static_cast<T*>(c.dst)[d] = static_cast<const T*>(c.src)[so];
  }
}

__global__ void softmax_kernel(const float* x, float* y, std::int64_t n, std::int64_t inner, bool log_softmax) {
  const std::int64_t row = blockIdx.x;
  const std::int64_t base = (row / inner) * n * inner + row % inner;
  float m = -FLT_MAX;
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, x[base + j * inner]);
  m = block_reduce<true>(m);
  float s = 0.0f;
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) s += expf(x[base + j * inner] - m);
  s = block_reduce<false>(s);
  const float ls = logf(s);
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float z = x[base + j * inner] - m;
    y[base + j * inner] = log_softmax ? z - ls : expf(z) / s;
  }
}

__global__ void layer_norm_kernel(const float* x, const float* scale, const float* bias, float* y, float* mean_out,
                                  float* rstd_out, std::int64_t n, float eps) {
  const float* xr = x + blockIdx.x * n;
  float* yr = y + blockIdx.x * n;
  float s = 0.0f;
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) s += xr[j];
  const float mean = block_reduce<false>(s) / static_cast<float>(n);
  float v = 0.0f;
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float d = xr[j] - mean;
    v += d * d;
  }
  const float rstd = 1.0f / sqrtf(block_reduce<false>(v) / static_cast<float>(n) + eps);
  if (threadIdx.x == 0 && mean_out) mean_out[blockIdx.x] = mean;
  if (threadIdx.x == 0 && rstd_out) rstd_out[blockIdx.x] = rstd;
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    float r = (xr[j] - mean) * rstd;
    if (scale) r *= scale[j];
    if (bias) r += bias[j];
    yr[j] = r;
  }
}

// T: the storage of x and y (float, __nv_bfloat16, __half); the sums are float32.
template <typename T>
__global__ void reduce_kernel(const T* x, T* y, ReduceSpec s, std::int64_t red_count) {
  std::int64_t r = blockIdx.x, base = 0;
  for (int k = s.out_rank - 1; k >= 0; --k) {
    base += (r % s.out_dims[k]) * s.out_strides[k];
    r /= s.out_dims[k];
  }
  const bool is_max = s.kind == ReduceSpec::max, is_min = s.kind == ReduceSpec::min;
  float acc = is_max ? -FLT_MAX : is_min ? FLT_MAX : 0.0f;
  for (std::int64_t i = threadIdx.x; i < red_count; i += blockDim.x) {
    std::int64_t q = i, off = base;
    for (int k = s.red_rank - 1; k >= 0; --k) {
      off += (q % s.red_dims[k]) * s.red_strides[k];
      q /= s.red_dims[k];
    }
    const float v = widen(x[off]);
    acc = is_max ? fmaxf(acc, v) : is_min ? fminf(acc, v) : acc + v;
  }
  if (is_min)
    acc = -block_reduce<true>(-acc);
  else if (is_max)
    acc = block_reduce<true>(acc);
  else
    acc = block_reduce<false>(acc);
  if (threadIdx.x == 0) y[blockIdx.x] = narrow<T>((s.kind == ReduceSpec::mean ? acc / static_cast<float>(red_count) : acc) * s.scale);
}

template <typename T>
__global__ void gather_kernel(const T* data, const std::int64_t* idx, T* out, std::int64_t axis_dim, std::int64_t inner,
                              std::int64_t count, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t in = i % inner, c = (i / inner) % count, o = i / (inner * count);
    std::int64_t k = idx[c];
    if (k < 0) k += axis_dim;
    out[i] = (k >= 0 && k < axis_dim) ? data[(o * axis_dim + k) * inner + in] : T{};  // out of range: zero
  }
}

template <typename T>
void launch_gather(const void* data, const std::int64_t* indices, void* out, std::int64_t outer, std::int64_t axis_dim,
                   std::int64_t inner, std::int64_t count, cudaStream_t stream) {
  const std::int64_t n = outer * count * inner;
  gather_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(data), indices, static_cast<T*>(out),
                                                         axis_dim, inner, count, n);
}

}  // namespace

void strided_copy(const StridedCopy& c, cudaStream_t stream) {
  std::int64_t n = 1;
  for (int k = 0; k < c.rank; ++k) n *= c.dims[k];
  if (n == 0) return;
  switch (c.elem_bytes) {
    case 1: strided_copy_kernel<unsigned char><<<grid_for(n), kThreads, 0, stream>>>(c, n); break;
    case 2: strided_copy_kernel<unsigned short><<<grid_for(n), kThreads, 0, stream>>>(c, n); break;
    case 4: strided_copy_kernel<unsigned int><<<grid_for(n), kThreads, 0, stream>>>(c, n); break;
    case 8: strided_copy_kernel<unsigned long long><<<grid_for(n), kThreads, 0, stream>>>(c, n); break;
    default: fail(ErrorKind::unsupported, "strided copy of " + std::to_string(c.elem_bytes) + "-byte elements");
  }
  check_launch("strided_copy");
}

void softmax(const float* x, float* y, std::int64_t outer, std::int64_t n, std::int64_t inner, bool log_softmax,
             cudaStream_t stream) {
  if (outer * inner == 0 || n == 0) return;
  softmax_kernel<<<static_cast<unsigned>(outer * inner), block_for_row(n), 0, stream>>>(x, y, n, inner, log_softmax);
  check_launch("softmax");
}

void layer_norm(const float* x, const float* scale, const float* bias, float* y, float* mean, float* rstd, std::int64_t rows,
                std::int64_t n, float epsilon, cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  layer_norm_kernel<<<static_cast<unsigned>(rows), block_for_row(n), 0, stream>>>(x, scale, bias, y, mean, rstd, n, epsilon);
  check_launch("layer_norm");
}

void reduce(const void* x, void* y, const ReduceSpec& spec, cudaStream_t stream) {
  std::int64_t outs = 1, reds = 1;
  for (int k = 0; k < spec.out_rank; ++k) outs *= spec.out_dims[k];
  for (int k = 0; k < spec.red_rank; ++k) reds *= spec.red_dims[k];
  if (outs == 0) return;
  const unsigned blocks = static_cast<unsigned>(outs);
  if (spec.storage == ReduceSpec::bf16)
    reduce_kernel<<<blocks, block_for_row(reds), 0, stream>>>(static_cast<const __nv_bfloat16*>(x), static_cast<__nv_bfloat16*>(y),
                                                              spec, reds);
  else if (spec.storage == ReduceSpec::f16)
    reduce_kernel<<<blocks, block_for_row(reds), 0, stream>>>(static_cast<const __half*>(x), static_cast<__half*>(y), spec, reds);
  else
    reduce_kernel<<<blocks, block_for_row(reds), 0, stream>>>(static_cast<const float*>(x), static_cast<float*>(y), spec, reds);
  check_launch("reduce");
}

void gather(const void* data, const std::int64_t* indices, void* out, std::int64_t outer, std::int64_t axis_dim,
            std::int64_t inner, std::int64_t count, int elem_bytes, cudaStream_t stream) {
  if (outer * inner * count == 0) return;
  switch (elem_bytes) {
    case 1: launch_gather<unsigned char>(data, indices, out, outer, axis_dim, inner, count, stream); break;
    case 2: launch_gather<unsigned short>(data, indices, out, outer, axis_dim, inner, count, stream); break;
    case 4: launch_gather<unsigned int>(data, indices, out, outer, axis_dim, inner, count, stream); break;
    case 8: launch_gather<unsigned long long>(data, indices, out, outer, axis_dim, inner, count, stream); break;
    default: fail(ErrorKind::unsupported, "gather of " + std::to_string(elem_bytes) + "-byte elements");
  }
  check_launch("gather");
}

}  // namespace memplan::runtime::cuda
