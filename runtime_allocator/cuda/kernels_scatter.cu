// CUDA kernels of GatherND, ScatterND and ScatterElements (see kernels_scatter.hpp).
#include <cstring>
#include <type_traits>

#include "runtime_allocator/cuda/block_reduce.cuh"
#include "runtime_allocator/cuda/cuda_context.hpp"
#include "runtime_allocator/cuda/kernels_scatter.hpp"

namespace memplan::runtime::cuda {

namespace {

__device__ __forceinline__ std::int64_t first_index() { return blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; }
__device__ __forceinline__ std::int64_t stride() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

__device__ __forceinline__ std::int64_t load_index(const void* idx, bool idx64, std::int64_t i) {
  return idx64 ? static_cast<const std::int64_t*>(idx)[i] : static_cast<std::int64_t>(static_cast<const std::int32_t*>(idx)[i]);
}

// The data offset of tuple t, or -1 when an index is out of range.
__device__ std::int64_t tuple_offset(const IndexTuples& s, const void* idx, std::int64_t t) {
  std::int64_t off = (t / s.per_batch) * s.batch_stride;
  for (int j = 0; j < s.k; ++j) {
    std::int64_t v = load_index(idx, s.idx64, t * s.k + j);
    if (v < 0) v += s.dims[j];
    if (v < 0 || v >= s.dims[j]) return -1;
    off += v * s.strides[j];
  }
  return off;
}

template <typename T>
__device__ __forceinline__ T combine(ScatterReduction r, T a, T b) {
  switch (r) {
    case ScatterReduction::add:
      return a + b;
    case ScatterReduction::mul:
      return a * b;
    case ScatterReduction::max:
      return a < b ? b : a;
    case ScatterReduction::min:
      return b < a ? b : a;
    default:
      return b;
  }
}

// *p = combine(r, *p, u) atomically (compare-and-swap on the element's bits).
template <typename T>
__device__ void atomic_combine(T* p, T u, ScatterReduction r) {
  using Bits = std::conditional_t<sizeof(T) == 4, unsigned int, unsigned long long>;
  Bits* a = reinterpret_cast<Bits*>(p);
  Bits old = *a, assumed;
  do {
    assumed = old;
    T cur;
    memcpy(&cur, &assumed, sizeof(T));
    const T next = combine(r, cur, u);
    Bits nb;
    memcpy(&nb, &next, sizeof(T));
    old = atomicCAS(a, assumed, nb);
  } while (assumed != old);
}

template <typename T>
__global__ void gather_nd_kernel(IndexTuples s, const T* data, const void* idx, T* y, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += stride()) {
    const std::int64_t off = tuple_offset(s, idx, i / s.slice);
    y[i] = off < 0 ? T(0) : data[off + i % s.slice];
  }
}

template <typename T, bool kReduce>
__global__ void scatter_nd_kernel(IndexTuples s, ScatterReduction r, const T* upd, const void* idx, T* y, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += stride()) {
    const std::int64_t off = tuple_offset(s, idx, i / s.slice);
    if (off < 0) continue;
    if constexpr (kReduce)
      atomic_combine(y + off + i % s.slice, upd[i], r);
    else
      y[off + i % s.slice] = upd[i];
  }
}

template <typename T, bool kReduce>
__global__ void scatter_elements_kernel(ScatterElementsShape s, ScatterReduction r, const T* upd, const void* idx, T* y,
                                        std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += stride()) {
    std::int64_t j = load_index(idx, s.idx64, i);
    if (j < 0) j += s.axis_dim;
    if (j < 0 || j >= s.axis_dim) continue;
    std::int64_t rest = i, off = 0;
    for (int d = s.rank - 1; d >= 0; --d) {
      const std::int64_t c = rest % s.u_dims[d];
      rest /= s.u_dims[d];
      off += (d == s.axis ? j : c) * s.y_strides[d];
    }
    if constexpr (kReduce)
      atomic_combine(y + off, upd[i], r);
    else
      y[off] = upd[i];
  }
}

// Calls f(T{}) with T an unsigned type of `elem_bytes` bytes (stores move bits only).
template <typename F>
void by_size(int elem_bytes, const char* what, F&& f) {
  switch (elem_bytes) {
    case 1:
      return f(std::uint8_t{});
    case 2:
      return f(std::uint16_t{});
    case 4:
      return f(std::uint32_t{});
    case 8:
      return f(std::uint64_t{});
    default:
      fail(ErrorKind::unsupported, std::string(what) + " of " + std::to_string(elem_bytes) + "-byte elements");
  }
}

// Calls f(T{}) with the arithmetic type of dt.
template <typename F>
void by_dtype(ScatterDType dt, F&& f) {
  switch (dt) {
    case ScatterDType::f32:
      return f(float{});
    case ScatterDType::f64:
      return f(double{});
    case ScatterDType::i32:
      return f(std::int32_t{});
    case ScatterDType::i64:
      return f(std::int64_t{});
  }
}

}  // namespace

void gather_nd(const IndexTuples& s, const void* data, const void* idx, void* y, cudaStream_t stream) {
  const std::int64_t n = s.tuples * s.slice;
  if (n == 0) return;
  by_size(s.elem_bytes, "GatherND", [&](auto tag) {
    using T = decltype(tag);
    gather_nd_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(s, static_cast<const T*>(data), idx, static_cast<T*>(y), n);
  });
  check_launch("gather_nd");
}

void scatter_nd(const IndexTuples& s, ScatterReduction r, ScatterDType dt, const void* upd, const void* idx, void* y,
                cudaStream_t stream) {
  const std::int64_t n = s.tuples * s.slice;
  if (n == 0) return;
  if (r == ScatterReduction::none) {
    by_size(s.elem_bytes, "ScatterND", [&](auto tag) {
      using T = decltype(tag);
      scatter_nd_kernel<T, false>
          <<<grid_for(n), kThreads, 0, stream>>>(s, r, static_cast<const T*>(upd), idx, static_cast<T*>(y), n);
    });
  } else {
    by_dtype(dt, [&](auto tag) {
      using T = decltype(tag);
      scatter_nd_kernel<T, true>
          <<<grid_for(n), kThreads, 0, stream>>>(s, r, static_cast<const T*>(upd), idx, static_cast<T*>(y), n);
    });
  }
  check_launch("scatter_nd");
}

void scatter_elements(const ScatterElementsShape& s, ScatterReduction r, ScatterDType dt, const void* upd, const void* idx,
                      void* y, cudaStream_t stream) {
  std::int64_t n = 1;
  for (int d = 0; d < s.rank; ++d) n *= s.u_dims[d];
  if (n == 0) return;
  if (r == ScatterReduction::none) {
    by_size(s.elem_bytes, "ScatterElements", [&](auto tag) {
      using T = decltype(tag);
      scatter_elements_kernel<T, false>
          <<<grid_for(n), kThreads, 0, stream>>>(s, r, static_cast<const T*>(upd), idx, static_cast<T*>(y), n);
    });
  } else {
    by_dtype(dt, [&](auto tag) {
      using T = decltype(tag);
      scatter_elements_kernel<T, true>
          <<<grid_for(n), kThreads, 0, stream>>>(s, r, static_cast<const T*>(upd), idx, static_cast<T*>(y), n);
    });
  }
  check_launch("scatter_elements");
}

}  // namespace memplan::runtime::cuda
