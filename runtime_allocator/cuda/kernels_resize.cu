// CUDA kernels of Resize and its gradient (see kernels_resize.hpp).
#include "runtime_allocator/cuda/block_reduce.cuh"
#include "runtime_allocator/cuda/cuda_context.hpp"
#include "runtime_allocator/cuda/kernels_resize.hpp"

namespace memplan::runtime::cuda {

namespace {

__device__ __forceinline__ std::int64_t first_index() { return blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; }
__device__ __forceinline__ std::int64_t stride() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

// The taps of output element i along each axis and the input strides; false where it samples outside the input.
__device__ bool taps_of(const ResizeShape& s, std::int64_t i, ResizeTap* taps, std::int64_t* xs) {
  std::int64_t rest = i, step = 1;
  bool inside = true;
  for (int d = s.rank - 1; d >= 0; --d) {
    taps[d] = resize_tap(s.mode, s.axes[d], rest % s.axes[d].out);
    rest /= s.axes[d].out;
    xs[d] = step;
    step *= s.axes[d].in;
    inside = inside && !taps[d].outside;
  }
  return inside;
}

template <typename T>
__global__ void nearest_kernel(ResizeShape s, const T* x, T* y, std::int64_t n) {
  ResizeTap taps[kResizeMaxRank];
  std::int64_t xs[kResizeMaxRank];
  for (std::int64_t i = first_index(); i < n; i += stride()) {
    if (!taps_of(s, i, taps, xs)) {
      y[i] = T(0);
      continue;
    }
    std::int64_t off = 0;
    for (int d = 0; d < s.rank; ++d) off += taps[d].i[0] * xs[d];
    y[i] = x[off];
  }
}

// Calls f(offset, weight) for each input element output element i reads with a nonzero weight.
template <typename F>
__device__ void for_each_corner(const ResizeShape& s, const ResizeTap* taps, const std::int64_t* xs, F&& f) {
  resize_for_each_corner(s.rank, taps, xs, f);
}

__global__ void float_kernel(ResizeShape s, const float* x, float* y, std::int64_t n) {
  ResizeTap taps[kResizeMaxRank];
  std::int64_t xs[kResizeMaxRank];
  for (std::int64_t i = first_index(); i < n; i += stride()) {
    if (!taps_of(s, i, taps, xs)) {
      y[i] = s.mode.extrapolation;
      continue;
    }
    float acc = 0.0f;
    for_each_corner(s, taps, xs, [&](std::int64_t off, float w) { acc += w * x[off]; });
    y[i] = acc;
  }
}

__global__ void backward_kernel(ResizeShape s, const float* dy, float* dx, std::int64_t n) {
  ResizeTap taps[kResizeMaxRank];
  std::int64_t xs[kResizeMaxRank];
  for (std::int64_t i = first_index(); i < n; i += stride()) {
    if (!taps_of(s, i, taps, xs)) continue;
    const float g = dy[i];
    for_each_corner(s, taps, xs, [&](std::int64_t off, float w) { atomicAdd(dx + off, w * g); });
  }
}

std::int64_t count(const ResizeShape& s, bool out) {
  std::int64_t n = 1;
  for (int d = 0; d < s.rank; ++d) n *= out ? s.axes[d].out : s.axes[d].in;
  return n;
}

}  // namespace

void resize_forward(const ResizeShape& s, const void* x, void* y, cudaStream_t stream) {
  const std::int64_t n = count(s, true);
  if (n == 0) return;
  if (s.f32) {
    float_kernel<<<grid_for(n), kThreads, 0, stream>>>(s, static_cast<const float*>(x), static_cast<float*>(y), n);
  } else {
    switch (s.elem_bytes) {
      case 1:
        nearest_kernel<<<grid_for(n), kThreads, 0, stream>>>(s, static_cast<const std::uint8_t*>(x),
                                                             static_cast<std::uint8_t*>(y), n);
        break;
      case 2:
        nearest_kernel<<<grid_for(n), kThreads, 0, stream>>>(s, static_cast<const std::uint16_t*>(x),
                                                             static_cast<std::uint16_t*>(y), n);
        break;
      case 4:
        nearest_kernel<<<grid_for(n), kThreads, 0, stream>>>(s, static_cast<const std::uint32_t*>(x),
                                                             static_cast<std::uint32_t*>(y), n);
        break;
      case 8:
        nearest_kernel<<<grid_for(n), kThreads, 0, stream>>>(s, static_cast<const std::uint64_t*>(x),
                                                             static_cast<std::uint64_t*>(y), n);
        break;
      default:
        fail(ErrorKind::unsupported, "Resize of " + std::to_string(s.elem_bytes) + "-byte elements");
    }
  }
  check_launch("resize_forward");
}

void resize_backward(const ResizeShape& s, const float* dy, float* dx, cudaStream_t stream) {
  const std::int64_t n = count(s, true), m = count(s, false);
  if (m == 0) return;
  check(cudaMemsetAsync(dx, 0, static_cast<std::size_t>(m) * sizeof(float), stream), "ResizeGrad zeros");
  if (n == 0) return;
  backward_kernel<<<grid_for(n), kThreads, 0, stream>>>(s, dy, dx, n);
  check_launch("resize_backward");
}

}  // namespace memplan::runtime::cuda
