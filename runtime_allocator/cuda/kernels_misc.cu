// CUDA kernels of Range, Trilu, IsInf and NonZero (see kernels_misc.hpp).
#include <type_traits>

#include "runtime_allocator/cuda/block_reduce.cuh"
#include "runtime_allocator/cuda/cuda_context.hpp"
#include "runtime_allocator/cuda/kernels_misc.hpp"

namespace memplan::runtime::cuda {

namespace {

__device__ __forceinline__ std::int64_t first_index() { return blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; }
__device__ __forceinline__ std::int64_t stride() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

template <typename T>
__global__ void range_kernel(const T* start, const T* delta, T* y, std::int64_t n) {
  const T s = *start, d = *delta;
  for (std::int64_t k = first_index(); k < n; k += stride()) {
    if constexpr (std::is_floating_point_v<T>)
      y[k] = static_cast<T>(static_cast<double>(s) + static_cast<double>(k) * static_cast<double>(d));
    else
      y[k] = static_cast<T>(static_cast<std::uint64_t>(s) + static_cast<std::uint64_t>(k) * static_cast<std::uint64_t>(d));
  }
}

// U: an unsigned integer of the element's size; a float's sign bit is masked off.
template <typename U>
__global__ void non_zero_kernel(NonZeroShape s, const U* x, std::int64_t* y, std::int64_t capacity, std::int64_t* count) {
  std::int64_t n = 1;
  for (int d = 0; d < s.rank; ++d) n *= s.dims[d];
  const U mask = s.is_float ? static_cast<U>(~(U(1) << (sizeof(U) * 8 - 1))) : static_cast<U>(~U(0));
  std::int64_t k = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if ((x[i] & mask) == 0) continue;
    if (k < capacity) {
      std::int64_t rest = i;
      for (int d = s.rank - 1; d >= 0; --d) {
        y[d * capacity + k] = rest % s.dims[d];
        rest /= s.dims[d];
      }
    }
    ++k;
  }
  *count = k;
}

template <typename T>
__global__ void trilu_kernel(const T* x, T* y, std::int64_t n, std::int64_t rows, std::int64_t cols, std::int64_t k, bool upper) {
  for (std::int64_t e = first_index(); e < n; e += stride()) {
    const std::int64_t j = e % cols, i = (e / cols) % rows;
    y[e] = (upper ? j - i >= k : j - i <= k) ? x[e] : T(0);
  }
}

template <typename T>
__global__ void is_inf_kernel(const T* x, bool* y, std::int64_t n, bool positive, bool negative) {
  for (std::int64_t i = first_index(); i < n; i += stride()) {
    const T v = x[i];
    y[i] = isinf(v) && (v > 0 ? positive : negative);
  }
}

}  // namespace

void range(RangeDType dt, const void* start, const void* delta, void* y, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  switch (dt) {
    case RangeDType::f32:
      range_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const float*>(start), static_cast<const float*>(delta),
                                                         static_cast<float*>(y), n);
      break;
    case RangeDType::f64:
      range_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const double*>(start), static_cast<const double*>(delta),
                                                         static_cast<double*>(y), n);
      break;
    case RangeDType::i32:
      range_kernel<<<grid_for(n), kThreads, 0, stream>>>(
          static_cast<const std::int32_t*>(start), static_cast<const std::int32_t*>(delta), static_cast<std::int32_t*>(y), n);
      break;
    case RangeDType::i64:
      range_kernel<<<grid_for(n), kThreads, 0, stream>>>(
          static_cast<const std::int64_t*>(start), static_cast<const std::int64_t*>(delta), static_cast<std::int64_t*>(y), n);
      break;
  }
  check_launch("range");
}

void trilu(const void* x, void* y, std::int64_t count, std::int64_t rows, std::int64_t cols, std::int64_t k, bool upper,
           int elem_bytes, cudaStream_t stream) {
  if (count == 0) return;
  switch (elem_bytes) {
    case 1:
      trilu_kernel<<<grid_for(count), kThreads, 0, stream>>>(static_cast<const std::uint8_t*>(x), static_cast<std::uint8_t*>(y),
                                                             count, rows, cols, k, upper);
      break;
    case 2:
      trilu_kernel<<<grid_for(count), kThreads, 0, stream>>>(static_cast<const std::uint16_t*>(x), static_cast<std::uint16_t*>(y),
                                                             count, rows, cols, k, upper);
      break;
    case 4:
      trilu_kernel<<<grid_for(count), kThreads, 0, stream>>>(static_cast<const std::uint32_t*>(x), static_cast<std::uint32_t*>(y),
                                                             count, rows, cols, k, upper);
      break;
    case 8:
      trilu_kernel<<<grid_for(count), kThreads, 0, stream>>>(static_cast<const std::uint64_t*>(x), static_cast<std::uint64_t*>(y),
                                                             count, rows, cols, k, upper);
      break;
    default:
      fail(ErrorKind::unsupported, "Trilu of " + std::to_string(elem_bytes) + "-byte elements");
  }
  check_launch("trilu");
}

void is_inf(const void* x, bool f64, bool* y, std::int64_t n, bool positive, bool negative, cudaStream_t stream) {
  if (n == 0) return;
  if (f64)
    is_inf_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const double*>(x), y, n, positive, negative);
  else
    is_inf_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const float*>(x), y, n, positive, negative);
  check_launch("is_inf");
}

void non_zero(const NonZeroShape& s, const void* x, std::int64_t* y, std::int64_t capacity, std::int64_t* count,
              cudaStream_t stream) {
  switch (s.elem_bytes) {
    case 1: non_zero_kernel<<<1, 1, 0, stream>>>(s, static_cast<const std::uint8_t*>(x), y, capacity, count); break;
    case 2: non_zero_kernel<<<1, 1, 0, stream>>>(s, static_cast<const std::uint16_t*>(x), y, capacity, count); break;
    case 4: non_zero_kernel<<<1, 1, 0, stream>>>(s, static_cast<const std::uint32_t*>(x), y, capacity, count); break;
    case 8: non_zero_kernel<<<1, 1, 0, stream>>>(s, static_cast<const std::uint64_t*>(x), y, capacity, count); break;
    default: fail(ErrorKind::unsupported, "NonZero of " + std::to_string(s.elem_bytes) + "-byte elements");
  }
  check_launch("non_zero");
}

}  // namespace memplan::runtime::cuda
