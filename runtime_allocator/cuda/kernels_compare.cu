// CUDA kernels of the comparison, logic, integer arithmetic, Cast and Sin/Cos ops (see kernels_compare.hpp).
#include <type_traits>

#include "runtime_allocator/cuda/block_reduce.cuh"
#include "runtime_allocator/cuda/half_io.cuh"
#include "runtime_allocator/cuda/cuda_context.hpp"
#include "runtime_allocator/cuda/kernels_compare.hpp"

namespace memplan::runtime::cuda {

namespace {

__device__ __forceinline__ std::int64_t offset_of(const BroadcastShape &b, int k, std::int64_t i) {
  std::int64_t off = 0;
  for (int d = b.rank - 1; d >= 0; --d) {
    off += (i % b.dims[d]) * b.strides[k][d];
    i /= b.dims[d];
  }
  return off;
}

__device__ __forceinline__ std::int64_t first_index() { return blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; }
__device__ __forceinline__ std::int64_t stride() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

template <typename T>
__device__ __forceinline__ bool apply(CompareOp op, T x, T y) {
  switch (op) {
    case CompareOp::equal: return x == y;
    case CompareOp::greater: return x > y;
    case CompareOp::greater_equal: return x >= y;
    case CompareOp::less: return x < y;
    case CompareOp::less_equal: return x <= y;
    case CompareOp::logical_and: return x != T(0) && y != T(0);
    case CompareOp::logical_or: return x != T(0) || y != T(0);
    case CompareOp::logical_xor: return (x != T(0)) != (y != T(0));
  }
  return false;
}

template <typename T>
__global__ void compare_kernel(CompareOp op, const T *a, const T *b, std::uint8_t *out, BroadcastShape s, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += stride())
    out[i] = apply(op, a[offset_of(s, 0, i)], b[offset_of(s, 1, i)]) ? 1 : 0;
}

template <typename T>
__device__ __forceinline__ T apply(IntOp op, T x, T y) {
  using U = std::make_unsigned_t<T>;  // wraps instead of overflowing
  switch (op) {
    case IntOp::add: return static_cast<T>(static_cast<U>(x) + static_cast<U>(y));
    case IntOp::sub: return static_cast<T>(static_cast<U>(x) - static_cast<U>(y));
    case IntOp::mul: return static_cast<T>(static_cast<U>(x) * static_cast<U>(y));
    case IntOp::min: return x < y ? x : y;
    case IntOp::max: return x < y ? y : x;
    case IntOp::mod:
    case IntOp::fmod: {
      if (y == 0) return T(0);
      if (y == T(-1)) return T(0);  // the lowest value % -1 overflows
      const T r = static_cast<T>(x % y);
      return op == IntOp::mod && r != 0 && (r < 0) != (y < 0) ? static_cast<T>(r + y) : r;
    }
    case IntOp::bit_and: return static_cast<T>(x & y);
    case IntOp::bit_or: return static_cast<T>(x | y);
    case IntOp::bit_xor: return static_cast<T>(x ^ y);
  }
  return x;
}

template <typename T>
__global__ void int_binary_kernel(IntOp op, const T *a, const T *b, T *out, BroadcastShape s, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += stride()) out[i] = apply(op, a[offset_of(s, 0, i)], b[offset_of(s, 1, i)]);
}

__global__ void not_kernel(const std::uint8_t *x, std::uint8_t *out, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += stride()) out[i] = x[i] == 0 ? 1 : 0;
}

template <typename From, typename To>
__global__ void cast_kernel(const From *x, To *out, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += stride()) {
    const auto v = widen(x[i]);
    if constexpr (std::is_same_v<To, std::uint8_t>) out[i] = v != decltype(v)(0) ? 1 : 0;
    else out[i] = narrow<To>(v);
  }
}

template <typename T>
__global__ void sin_cos_kernel(const T *x, T *out, std::int64_t n, bool cosine) {
  for (std::int64_t i = first_index(); i < n; i += stride()) {
    const float v = widen(x[i]);
    out[i] = narrow<T>(cosine ? cosf(v) : sinf(v));
  }
}

std::int64_t count(const BroadcastShape &s) {
  std::int64_t n = 1;
  for (int d = 0; d < s.rank; ++d) n *= s.dims[d];
  return n;
}

// Calls f(T{}) with the C++ type of `t` (f32, i64, i32, bool: the comparisons' types).
template <typename F>
void by_type(ElemType t, F &&f) {
  switch (t) {
    case ElemType::f32: return f(float{});
    case ElemType::i64: return f(std::int64_t{});
    case ElemType::i32: return f(std::int32_t{});
    case ElemType::boolean: return f(std::uint8_t{});
    case ElemType::bf16:
    case ElemType::f16: break;
  }
  fail(ErrorKind::unsupported, "comparisons of bfloat16 or float16");
}

// by_type and the 16-bit float types (Cast).
template <typename F>
void by_cast_type(ElemType t, F &&f) {
  if (t == ElemType::bf16) return f(__nv_bfloat16{});
  if (t == ElemType::f16) return f(__half{});
  by_type(t, f);
}

}  // namespace

void compare(CompareOp op, ElemType type, const void *a, const void *b, std::uint8_t *out, const BroadcastShape &shape,
             cudaStream_t stream) {
  const std::int64_t n = count(shape);
  if (n == 0) return;
  by_type(type, [&](auto tag) {
    using T = decltype(tag);
    compare_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(op, static_cast<const T *>(a), static_cast<const T *>(b), out, shape, n);
  });
  check_launch("compare");
}

void int_binary(IntOp op, ElemType type, const void *a, const void *b, void *out, const BroadcastShape &shape,
                cudaStream_t stream) {
  const std::int64_t n = count(shape);
  if (n == 0) return;
  if (type == ElemType::i64)
    int_binary_kernel<std::int64_t><<<grid_for(n), kThreads, 0, stream>>>(
        op, static_cast<const std::int64_t *>(a), static_cast<const std::int64_t *>(b), static_cast<std::int64_t *>(out), shape, n);
  else if (type == ElemType::i32)
    int_binary_kernel<std::int32_t><<<grid_for(n), kThreads, 0, stream>>>(
        op, static_cast<const std::int32_t *>(a), static_cast<const std::int32_t *>(b), static_cast<std::int32_t *>(out), shape, n);
  else
    fail(ErrorKind::unsupported, "integer arithmetic of int64 or int32 only");
  check_launch("int_binary");
}

void logical_not(const std::uint8_t *x, std::uint8_t *out, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  not_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, out, n);
  check_launch("logical_not");
}

void cast(const void *x, ElemType from, void *out, ElemType to, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  by_cast_type(from, [&](auto f) {
    using From = decltype(f);
    by_cast_type(to, [&](auto t) {
      using To = decltype(t);
      cast_kernel<From, To><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const From *>(x), static_cast<To *>(out), n);
    });
  });
  check_launch("cast");
}

void sin_cos(const void *x, void *out, FloatStorage storage, std::int64_t n, bool cosine, cudaStream_t stream) {
  if (n == 0) return;
  by_float_storage(storage, [&](auto tag) {
    using T = decltype(tag);
    sin_cos_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T *>(x), static_cast<T *>(out), n, cosine);
  });
  check_launch("sin_cos");
}

}  // namespace memplan::runtime::cuda
