// Hand-written CUDA kernels of the executor: strided copies, softmax, layer norm, reductions, gather.
#include <algorithm>
#include <cfloat>
#include <cstdint>

#include "runtime_allocator/cuda/block_reduce.cuh"
#include "runtime_allocator/cuda/half_io.cuh"
#include "runtime_allocator/cuda/cuda_context.hpp"
#include "runtime_allocator/cuda/kernels.hpp"

namespace memplan::runtime::cuda {

namespace {

// One thread per unit T of the destination; I is the index type (32-bit where every offset fits: the div/mod chain
// is the kernel's cost).
template <typename T, typename I>
__global__ void strided_copy_kernel(StridedCopy c, I n) {
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < n; i += static_cast<I>(gridDim.x) * blockDim.x) {
    I r = i, so = 0, d = 0;
    for (int k = c.rank - 1; k >= 0; --k) {
      const I dim = static_cast<I>(c.dims[k]);
      const I q = r % dim;
      r /= dim;
      so += q * static_cast<I>(c.src_strides[k]);
      d += q * static_cast<I>(c.dst_strides[k]);
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

namespace {

// The copy with size-1 axes dropped, axes contiguous in both source and destination merged, and the innermost axis
// (contiguous in both) moved in the widest unit (up to 16 bytes) its length, the other strides and both addresses
// allow: the same bytes moved by fewer, wider threads with a shorter index chain.
StridedCopy simplified(const StridedCopy& c) {
  StridedCopy o;
  o.src = c.src;
  o.dst = c.dst;
  o.elem_bytes = c.elem_bytes;
  for (int k = 0; k < c.rank; ++k) {
    if (c.dims[k] == 1) continue;
    const int j = o.rank - 1;
    if (j >= 0 && o.src_strides[j] == c.dims[k] * c.src_strides[k] && o.dst_strides[j] == c.dims[k] * c.dst_strides[k]) {
      o.dims[j] *= c.dims[k];
      o.src_strides[j] = c.src_strides[k];
      o.dst_strides[j] = c.dst_strides[k];
      continue;
    }
    o.dims[o.rank] = c.dims[k];
    o.src_strides[o.rank] = c.src_strides[k];
    o.dst_strides[o.rank] = c.dst_strides[k];
    ++o.rank;
  }
  if (o.rank == 0) {  // one element
    o.rank = 1;
    o.dims[0] = 1;
    o.src_strides[0] = o.dst_strides[0] = 1;
  }
  const int last = o.rank - 1;
  if (o.src_strides[last] != 1 || o.dst_strides[last] != 1) return o;
  const std::int64_t eb = c.elem_bytes;
  for (std::int64_t w = 16; w > eb; w /= 2) {
    bool ok = (o.dims[last] * eb) % w == 0 && reinterpret_cast<std::uintptr_t>(c.src) % w == 0 &&
              reinterpret_cast<std::uintptr_t>(c.dst) % w == 0;
    for (int k = 0; ok && k < last; ++k) ok = (o.src_strides[k] * eb) % w == 0 && (o.dst_strides[k] * eb) % w == 0;
    if (!ok) continue;
    const std::int64_t per = w / eb;
    o.elem_bytes = static_cast<int>(w);
    o.dims[last] /= per;
    for (int k = 0; k < last; ++k) {
      o.src_strides[k] /= per;
      o.dst_strides[k] /= per;
    }
    break;
  }
  return o;
}

template <typename T>
void launch_strided_copy(const StridedCopy& c, std::int64_t n, cudaStream_t stream) {
  std::int64_t src_end = 0, dst_end = 0;  // the largest offsets
  bool negative = false;                   // a reversed axis (offsets below the base): signed 64-bit indices
  for (int k = 0; k < c.rank; ++k) {
    src_end += (c.dims[k] - 1) * c.src_strides[k];
    dst_end += (c.dims[k] - 1) * c.dst_strides[k];
    negative = negative || c.src_strides[k] < 0 || c.dst_strides[k] < 0;
  }
  constexpr std::int64_t kFits32 = 0x7fffffffLL;
  if (!negative && n <= kFits32 && src_end < kFits32 && dst_end < kFits32)
    strided_copy_kernel<T, unsigned int><<<grid_for(n), kThreads, 0, stream>>>(c, static_cast<unsigned int>(n));
  else
    strided_copy_kernel<T, std::int64_t><<<grid_for(n), kThreads, 0, stream>>>(c, n);
}

}  // namespace

void strided_copy(const StridedCopy& copy, cudaStream_t stream) {
  for (int k = 0; k < copy.rank; ++k)
    if (copy.dims[k] == 0) return;
  const StridedCopy c = simplified(copy);
  std::int64_t n = 1;
  for (int k = 0; k < c.rank; ++k) n *= c.dims[k];
  switch (c.elem_bytes) {
    case 1: launch_strided_copy<unsigned char>(c, n, stream); break;
    case 2: launch_strided_copy<unsigned short>(c, n, stream); break;
    case 4: launch_strided_copy<unsigned int>(c, n, stream); break;
    case 8: launch_strided_copy<unsigned long long>(c, n, stream); break;
    case 16: launch_strided_copy<uint4>(c, n, stream); break;
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

namespace {

// The reduction as [rows, cols] summed over rows when it is a sum or mean over a contiguous prefix of the axes of a
// contiguous input (size-1 axes aside), keeping the contiguous suffix; false otherwise.
bool column_shape(const ReduceSpec& s, std::int64_t& rows, std::int64_t& cols) {
  if (s.kind != ReduceSpec::sum && s.kind != ReduceSpec::mean) return false;
  std::int64_t stride = 1;
  cols = 1;
  for (int k = s.out_rank - 1; k >= 0; --k) {
    if (s.out_dims[k] == 1) continue;
    if (s.out_strides[k] != stride) return false;
    stride *= s.out_dims[k];
    cols *= s.out_dims[k];
  }
  rows = 1;
  for (int k = s.red_rank - 1; k >= 0; --k) {
    if (s.red_dims[k] == 1) continue;
    if (s.red_strides[k] != stride) return false;
    stride *= s.red_dims[k];
    rows *= s.red_dims[k];
  }
  return true;
}

constexpr int kColTile = 32;   // columns per block (one warp's lanes: coalesced rows)
constexpr int kRowLanes = 8;   // warps per block, each its own rows

// Row chunks: enough blocks to fill the device about 4 times over, each chunk at least 64 rows.
std::int64_t column_chunks(std::int64_t rows, std::int64_t cols, int sms) {
  const std::int64_t tiles = (cols + kColTile - 1) / kColTile;
  const std::int64_t want = (4LL * (sms > 0 ? sms : 132) + tiles - 1) / tiles;
  return std::max<std::int64_t>(1, std::min<std::int64_t>({want, (rows + 63) / 64, 256}));
}

// Block (column tile, chunk): sums rows [chunk * per, ...) of its 32 columns; warps take rows kRowLanes apart, each
// lane one column, and add up in shared memory in lane order. One chunk: the result, scaled; else a partial sum.
template <typename T>
__global__ void column_sum_kernel(const T* x, T* y, float* partials, std::int64_t rows, std::int64_t cols, std::int64_t per,
                                  float scale, bool direct) {
  __shared__ float part[kRowLanes][kColTile + 1];
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * per, r1 = min(rows, r0 + per);
  float acc = 0.0f;
  if (c < cols) {
    std::int64_t r = r0 + threadIdx.y;
    for (; r + 3 * kRowLanes < r1; r += 4 * kRowLanes) {  // four loads in flight per thread
      const float a = widen(x[r * cols + c]), b = widen(x[(r + kRowLanes) * cols + c]);
      const float d = widen(x[(r + 2 * kRowLanes) * cols + c]), e = widen(x[(r + 3 * kRowLanes) * cols + c]);
      acc += a;
      acc += b;
      acc += d;
      acc += e;
    }
    for (; r < r1; r += kRowLanes) acc += widen(x[r * cols + c]);
  }
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  float sum = 0.0f;
#pragma unroll
  for (int w = 0; w < kRowLanes; ++w) sum += part[w][threadIdx.x];
  if (direct) y[c] = narrow<T>(sum * scale);
  else partials[blockIdx.y * cols + c] = sum;
}

// y[c] = scale * sum over the chunks' partial sums, in chunk order.
template <typename T>
__global__ void column_finish_kernel(const float* partials, T* y, std::int64_t chunks, std::int64_t cols, float scale) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float sum = 0.0f;
  for (std::int64_t p = 0; p < chunks; ++p) sum += partials[p * cols + c];
  y[c] = narrow<T>(sum * scale);
}

template <typename T>
void column_sum(const T* x, T* y, float* partials, std::int64_t rows, std::int64_t cols, float scale, int sms, cudaStream_t stream) {
  const std::int64_t chunks = column_chunks(rows, cols, sms), per = (rows + chunks - 1) / chunks;
  const dim3 grid(static_cast<unsigned>((cols + kColTile - 1) / kColTile), static_cast<unsigned>(chunks));
  column_sum_kernel<<<grid, dim3(kColTile, kRowLanes), 0, stream>>>(x, y, partials, rows, cols, per, scale, chunks == 1);
  if (chunks > 1)
    column_finish_kernel<<<static_cast<unsigned>((cols + 255) / 256), 256, 0, stream>>>(partials, y, chunks, cols, scale);
}

}  // namespace

std::size_t reduce_partial_floats(const ReduceSpec& spec, int sms) {
  std::int64_t rows = 0, cols = 0;
  if (!column_shape(spec, rows, cols) || rows == 0 || cols == 0) return 0;
  const std::int64_t chunks = column_chunks(rows, cols, sms);
  return chunks > 1 ? static_cast<std::size_t>(chunks * cols) : 0;
}

void reduce(const void* x, void* y, const ReduceSpec& spec, cudaStream_t stream, float* partials, int sms) {
  std::int64_t outs = 1, reds = 1;
  for (int k = 0; k < spec.out_rank; ++k) outs *= spec.out_dims[k];
  for (int k = 0; k < spec.red_rank; ++k) reds *= spec.red_dims[k];
  if (outs == 0) return;
  std::int64_t rows = 0, cols = 0;
  if (reds > 0 && column_shape(spec, rows, cols) && (partials || reduce_partial_floats(spec, sms) == 0)) {
    const float scale = spec.kind == ReduceSpec::mean ? spec.scale / static_cast<float>(reds) : spec.scale;
    if (spec.storage == ReduceSpec::bf16)
      column_sum(static_cast<const __nv_bfloat16*>(x), static_cast<__nv_bfloat16*>(y), partials, rows, cols, scale, sms, stream);
    else if (spec.storage == ReduceSpec::f16)
      column_sum(static_cast<const __half*>(x), static_cast<__half*>(y), partials, rows, cols, scale, sms, stream);
    else
      column_sum(static_cast<const float*>(x), static_cast<float*>(y), partials, rows, cols, scale, sms, stream);
    check_launch("column reduce");
    return;
  }
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
