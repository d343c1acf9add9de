// CUDA kernels of Pad, PadGrad and RandomUniformLike (see kernels_pad_random.hpp).
#include "runtime_allocator/cuda/block_reduce.cuh"
#include "runtime_allocator/cuda/cuda_context.hpp"
#include "runtime_allocator/cuda/half_io.cuh"
#include "runtime_allocator/cuda/kernels_pad_random.hpp"
#include "runtime_allocator/kernels/random_uniform.hpp"

namespace memplan::runtime::cuda {

namespace {

__device__ __forceinline__ std::int64_t first_index() { return blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; }
__device__ __forceinline__ std::int64_t stride() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

// I: the type the output index is split in (32-bit where the output fits: the div/mod chain is the kernel's cost).
template <typename T, typename I>
__global__ void pad_kernel(PadShape s, const T* x, const T* value, T* y, std::int64_t n) {
  const T fill = value ? *value : T(0);
  for (std::int64_t i = first_index(); i < n; i += stride()) {
    I rest = static_cast<I>(i);
    std::int64_t off = 0;
    bool padded = false;
    for (int d = s.rank - 1; d >= 0; --d) {
      const I dim = static_cast<I>(s.out_dims[d]);
      const std::int64_t src = pad_source(s.mode, s.axes[d], static_cast<std::int64_t>(rest % dim));
      rest /= dim;
      padded = padded || src < 0;
      off += src * s.in_strides[d];
    }
    y[i] = padded ? fill : x[off];
  }
}

// One thread per dx element: the dy elements that read it, the product of the axes' preimages in odometer order.
template <typename T>
__global__ void pad_grad_kernel(PadGradShape s, const T* dy, T* dx, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += stride()) {
    PadPreimage pre[kMaxRank];
    std::int64_t k[kMaxRank] = {};
    std::int64_t rest = i;
    bool done = false;  // an element that was cropped away reads nothing
    for (int d = s.rank - 1; d >= 0; --d) {
      pre[d] = pad_preimage(s.mode, s.axes[d], s.out_dims[d], rest % s.in_dims[d]);
      rest /= s.in_dims[d];
      done = done || pre[d].size() == 0;
    }
    float acc = 0.0f;
    while (!done) {
      std::int64_t off = 0;
      for (int d = 0; d < s.rank; ++d) off += pre[d].at(k[d]) * s.out_strides[d];
      acc += widen(dy[off]);
      int d = s.rank - 1;
      while (d >= 0 && ++k[d] == pre[d].size()) k[d--] = 0;
      done = d < 0;
    }
    dx[i] = narrow<T>(acc);
  }
}

// One thread per unit (T) of y: its row over the rolled axes read from the rolled-back row.
template <typename T>
__global__ void roll_kernel(RollShape s, const T* x, T* y, std::int64_t n, std::int64_t units_per_block) {
  for (std::int64_t i = first_index(); i < n; i += stride()) {
    std::int64_t row = i / units_per_block, src = 0, scale = 1;
    for (int d = s.rank - 1; d >= 0; --d) {
      const std::int64_t dim = s.dims[d], c = row % dim;
      row /= dim;
      src += ((c - s.shift[d] + dim) % dim) * scale;
      scale *= dim;
    }
    y[i] = x[src * units_per_block + i % units_per_block];
  }
}

template <typename T>
void launch_roll(const RollShape& s, const void* x, void* y, std::int64_t rows, cudaStream_t stream) {
  const std::int64_t units = s.block_bytes / static_cast<std::int64_t>(sizeof(T)), n = rows * units;
  roll_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(s, static_cast<const T*>(x), static_cast<T*>(y), n, units);
}

__global__ void uniform_f32_kernel(float* y, std::int64_t n, std::uint64_t key, float low, float high) {
  for (std::int64_t i = first_index(); i < n; i += stride()) y[i] = uniform_f32(key, static_cast<std::uint64_t>(i), low, high);
}

__global__ void uniform_f64_kernel(double* y, std::int64_t n, std::uint64_t key, double low, double high) {
  for (std::int64_t i = first_index(); i < n; i += stride()) y[i] = uniform_f64(key, static_cast<std::uint64_t>(i), low, high);
}

template <typename T>
__global__ void cum_sum_kernel(const T* x, T* y, std::int64_t outer, std::int64_t len, std::int64_t inner, bool exclusive,
                               bool reverse) {
  for (std::int64_t line = first_index(); line < outer * inner; line += stride()) {
    const std::int64_t o = line / inner, i = line % inner;
    T acc = T(0);
    for (std::int64_t k = 0; k < len; ++k) {
      const std::int64_t at = (o * len + (reverse ? len - 1 - k : k)) * inner + i;
      const T v = x[at];
      if (exclusive) {
        y[at] = acc;
        acc = static_cast<T>(acc + v);
      } else {
        acc = static_cast<T>(acc + v);
        y[at] = acc;
      }
    }
  }
}

template <typename T>
void launch_cum_sum(const void* x, void* y, std::int64_t outer, std::int64_t len, std::int64_t inner, bool exclusive, bool reverse,
                    cudaStream_t stream) {
  cum_sum_kernel<T><<<grid_for(outer * inner), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), outer, len, inner,
                                                                       exclusive, reverse);
}

template <typename T, typename I>
__global__ void gather_elements_kernel(GatherElementsShape s, const T* x, const I* idx, T* y, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += stride()) {
    std::int64_t j = static_cast<std::int64_t>(idx[i]);
    if (j < 0) j += s.axis_dim;
    if (j < 0 || j >= s.axis_dim) {
      y[i] = T(0);
      continue;
    }
    std::int64_t rest = i, off = 0;
    for (int d = s.rank - 1; d >= 0; --d) {
      const std::int64_t c = rest % s.y_dims[d];
      rest /= s.y_dims[d];
      off += (d == s.axis ? j : c) * s.x_strides[d];
    }
    y[i] = x[off];
  }
}

template <typename T>
void launch_gather_elements(const GatherElementsShape& s, const void* x, const void* idx, void* y, std::int64_t n, cudaStream_t stream) {
  if (s.idx64)
    gather_elements_kernel<T, std::int64_t><<<grid_for(n), kThreads, 0, stream>>>(s, static_cast<const T*>(x), static_cast<const std::int64_t*>(idx),
                                                                                 static_cast<T*>(y), n);
  else
    gather_elements_kernel<T, std::int32_t><<<grid_for(n), kThreads, 0, stream>>>(s, static_cast<const T*>(x), static_cast<const std::int32_t*>(idx),
                                                                                 static_cast<T*>(y), n);
}

template <typename T>
void launch_pad(const PadShape& s, const void* x, const void* value, void* y, std::int64_t n, cudaStream_t stream) {
  if (n <= 0x7fffffffLL)
    pad_kernel<T, unsigned int><<<grid_for(n), kThreads, 0, stream>>>(s, static_cast<const T*>(x), static_cast<const T*>(value),
                                                                       static_cast<T*>(y), n);
  else
    pad_kernel<T, std::int64_t><<<grid_for(n), kThreads, 0, stream>>>(s, static_cast<const T*>(x), static_cast<const T*>(value),
                                                                       static_cast<T*>(y), n);
}

}  // namespace

void pad(const PadShape& s, const void* x, const void* value, void* y, cudaStream_t stream) {
  std::int64_t n = 1;
  for (int d = 0; d < s.rank; ++d) n *= s.out_dims[d];
  if (n == 0) return;
  switch (s.elem_bytes) {
    case 1: launch_pad<std::uint8_t>(s, x, value, y, n, stream); break;
    case 2: launch_pad<std::uint16_t>(s, x, value, y, n, stream); break;
    case 4: launch_pad<std::uint32_t>(s, x, value, y, n, stream); break;
    case 8: launch_pad<std::uint64_t>(s, x, value, y, n, stream); break;
    default: fail(ErrorKind::unsupported, "Pad of " + std::to_string(s.elem_bytes) + "-byte elements");
  }
  check_launch("pad");
}

void pad_grad(const PadGradShape& s, const void* dy, void* dx, cudaStream_t stream) {
  std::int64_t n = 1;
  for (int d = 0; d < s.rank; ++d) n *= s.in_dims[d];
  if (n == 0) return;
  by_float_storage(s.storage, [&](auto tag) {
    using T = decltype(tag);
    pad_grad_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(s, static_cast<const T*>(dy), static_cast<T*>(dx), n);
  });
  check_launch("pad_grad");
}

void roll(const RollShape& s, const void* x, void* y, cudaStream_t stream) {
  std::int64_t rows = 1;
  for (int d = 0; d < s.rank; ++d) rows *= s.dims[d];
  if (rows == 0 || s.block_bytes == 0) return;
  // The widest unit dividing the moved block and both addresses: 16-byte loads for a block of channels.
  const auto aligned = [&](std::int64_t u) {
    return s.block_bytes % u == 0 && reinterpret_cast<std::uintptr_t>(x) % u == 0 && reinterpret_cast<std::uintptr_t>(y) % u == 0;
  };
  if (aligned(16)) launch_roll<uint4>(s, x, y, rows, stream);
  else if (aligned(8)) launch_roll<std::uint64_t>(s, x, y, rows, stream);
  else if (aligned(4)) launch_roll<std::uint32_t>(s, x, y, rows, stream);
  else if (aligned(2)) launch_roll<std::uint16_t>(s, x, y, rows, stream);
  else launch_roll<std::uint8_t>(s, x, y, rows, stream);
  check_launch("roll");
}

void cum_sum(const void* x, void* y, int dtype_code, std::int64_t outer, std::int64_t len, std::int64_t inner, bool exclusive,
             bool reverse, cudaStream_t stream) {
  if (outer * inner == 0 || len == 0) return;
  switch (dtype_code) {
    case 0: launch_cum_sum<float>(x, y, outer, len, inner, exclusive, reverse, stream); break;
    case 1: launch_cum_sum<double>(x, y, outer, len, inner, exclusive, reverse, stream); break;
    case 2: launch_cum_sum<std::int32_t>(x, y, outer, len, inner, exclusive, reverse, stream); break;
    case 3: launch_cum_sum<std::int64_t>(x, y, outer, len, inner, exclusive, reverse, stream); break;
    default: fail(ErrorKind::unsupported, "CumSum of dtype code " + std::to_string(dtype_code));
  }
  check_launch("cum_sum");
}

void gather_elements(const GatherElementsShape& s, const void* x, const void* idx, void* y, cudaStream_t stream) {
  std::int64_t n = 1;
  for (int d = 0; d < s.rank; ++d) n *= s.y_dims[d];
  if (n == 0) return;
  switch (s.elem_bytes) {
    case 1: launch_gather_elements<std::uint8_t>(s, x, idx, y, n, stream); break;
    case 2: launch_gather_elements<std::uint16_t>(s, x, idx, y, n, stream); break;
    case 4: launch_gather_elements<std::uint32_t>(s, x, idx, y, n, stream); break;
    case 8: launch_gather_elements<std::uint64_t>(s, x, idx, y, n, stream); break;
    default: fail(ErrorKind::unsupported, "GatherElements of " + std::to_string(s.elem_bytes) + "-byte elements");
  }
  check_launch("gather_elements");
}

void random_uniform_f32(float* y, std::int64_t n, std::uint64_t key, float low, float high, cudaStream_t stream) {
  if (n == 0) return;
  uniform_f32_kernel<<<grid_for(n), kThreads, 0, stream>>>(y, n, key, low, high);
  check_launch("random_uniform_f32");
}

void random_uniform_f64(double* y, std::int64_t n, std::uint64_t key, double low, double high, cudaStream_t stream) {
  if (n == 0) return;
  uniform_f64_kernel<<<grid_for(n), kThreads, 0, stream>>>(y, n, key, low, high);
  check_launch("random_uniform_f64");
}

}  // namespace memplan::runtime::cuda
