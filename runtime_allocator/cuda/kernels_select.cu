// CUDA kernels of ArgMax/ArgMin and TopK (see kernels_select.hpp).
#include "runtime_allocator/cuda/block_reduce.cuh"
#include "runtime_allocator/cuda/cuda_context.hpp"
#include "runtime_allocator/cuda/kernels_select.hpp"

namespace memplan::runtime::cuda {

namespace {

__device__ __forceinline__ std::int64_t first_index() { return blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; }
__device__ __forceinline__ std::int64_t stride() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

template <typename T>
__global__ void arg_kernel(const T* x, std::int64_t* y, std::int64_t outer, std::int64_t len, std::int64_t inner, bool max,
                           bool last) {
  for (std::int64_t line = first_index(); line < outer * inner; line += stride()) {
    const T* p = x + (line / inner) * len * inner + line % inner;
    std::int64_t best = 0;
    for (std::int64_t k = 1; k < len; ++k) {
      const T v = p[k * inner], b = p[best * inner];
      const bool better = max ? (last ? !(v < b) : b < v) : (last ? !(b < v) : v < b);
      if (better) best = k;
    }
    y[line] = best;
  }
}

// Element a comes before element b in TopK's order.
template <typename T>
__device__ __forceinline__ bool before(T va, std::int64_t a, T vb, std::int64_t b, bool largest) {
  if (va == vb) return a < b;
  return largest ? vb < va : va < vb;
}

template <typename T>
__global__ void top_k_kernel(const T* x, T* values, std::int64_t* indices, std::int64_t outer, std::int64_t len,
                             std::int64_t inner, std::int64_t k, bool largest) {
  for (std::int64_t line = first_index(); line < outer * inner; line += stride()) {
    const std::int64_t o = line / inner, i = line % inner;
    const T* p = x + o * len * inner + i;
    std::int64_t prev = -1;
    for (std::int64_t j = 0; j < k; ++j) {  // the first element after the previous pick
      std::int64_t best = -1;
      for (std::int64_t e = 0; e < len; ++e) {
        if (prev >= 0 && !before(p[prev * inner], prev, p[e * inner], e, largest)) continue;
        if (best < 0 || before(p[e * inner], e, p[best * inner], best, largest)) best = e;
      }
      prev = best;
      const std::int64_t at = (o * k + j) * inner + i;
      if (values) values[at] = p[best * inner];
      if (indices) indices[at] = best;
    }
  }
}

template <typename F>
void by_dtype(SelectDType dt, F&& f) {
  switch (dt) {
    case SelectDType::f32:
      return f(float{});
    case SelectDType::f64:
      return f(double{});
    case SelectDType::i32:
      return f(std::int32_t{});
    case SelectDType::i64:
      return f(std::int64_t{});
  }
}

}  // namespace

void arg_select(SelectDType dt, const void* x, std::int64_t* y, std::int64_t outer, std::int64_t len, std::int64_t inner,
                bool max, bool last, cudaStream_t stream) {
  if (outer * inner == 0) return;
  by_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    arg_kernel<T><<<grid_for(outer * inner), kThreads, 0, stream>>>(static_cast<const T*>(x), y, outer, len, inner, max, last);
  });
  check_launch("arg_select");
}

void top_k(SelectDType dt, const void* x, void* values, std::int64_t* indices, std::int64_t outer, std::int64_t len,
           std::int64_t inner, std::int64_t k, bool largest, cudaStream_t stream) {
  if (outer * inner == 0 || k == 0) return;
  by_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    top_k_kernel<T><<<grid_for(outer * inner), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(values), indices,
                                                                      outer, len, inner, k, largest);
  });
  check_launch("top_k");
}

}  // namespace memplan::runtime::cuda
