// Hand-written CUDA kernels of the executor: data movement, softmax, layer norm, reductions, gather.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime_allocator/cuda/float_storage.hpp"

namespace memplan::runtime::cuda {

inline constexpr int kMaxRank = 8;


// Copies a `dims`-shaped region element by element: dst[sum i_k*dst_strides[k]] = src[sum i_k*src_strides[k]].
// Covers transpose, slice, split, concat (one copy per part), expand and broadcasting (stride 0).
struct StridedCopy {
  int rank = 0;
  int elem_bytes = 4;  // 1, 2, 4 or 8
  std::int64_t dims[kMaxRank] = {};
  std::int64_t src_strides[kMaxRank] = {};
  std::int64_t dst_strides[kMaxRank] = {};
  const void* src = nullptr;
  void* dst = nullptr;
};
void strided_copy(const StridedCopy& c, cudaStream_t stream);

// Softmax (or log-softmax) over the middle axis of x viewed as [outer, n, inner].
void softmax(const float* x, float* y, std::int64_t outer, std::int64_t n, std::int64_t inner, bool log_softmax,
             cudaStream_t stream);

// Layer normalisation of each row of x [rows, n]; scale and bias (either may be null) have n elements. mean and rstd
// (either may be null) receive each row's mean and 1/sqrt(variance + epsilon).
void layer_norm(const float* x, const float* scale, const float* bias, float* y, float* mean, float* rstd, std::int64_t rows,
                std::int64_t n, float epsilon, cudaStream_t stream);

// Reduces x over some axes: out element j sits at multi-index (out_dims) whose input base offset uses
// out_strides; the reduced elements are at red_dims/red_strides from that base.
// x and y hold `storage` elements (bf16/f16 sums are float32, the result rounded once).
struct ReduceSpec {
  enum Kind : int { sum = 0, mean = 1, max = 2, min = 3 };
  enum Storage : int { f32 = 0, bf16 = 1, f16 = 2 };
  Kind kind = sum;
  Storage storage = f32;
  float scale = 1.0f;  // applied to sums and means
  int out_rank = 0;
  std::int64_t out_dims[kMaxRank] = {};
  std::int64_t out_strides[kMaxRank] = {};
  int red_rank = 0;
  std::int64_t red_dims[kMaxRank] = {};
  std::int64_t red_strides[kMaxRank] = {};
};
// `partials` (may be null when reduce_partial_floats is 0): device scratch of reduce_partial_floats(spec, sms) floats.
// Sums and means over a contiguous prefix of axes into a contiguous suffix (a bias gradient: [B, S, C] -> [C]) run
// as column reductions: coalesced rows, the rows split over blocks whose partial sums are added in a fixed order
// (deterministic); every other reduction one block per output element.
void reduce(const void* x, void* y, const ReduceSpec& spec, cudaStream_t stream, float* partials = nullptr, int sms = 0);
std::size_t reduce_partial_floats(const ReduceSpec& spec, int sms);

// Gather along an axis: data viewed as [outer, axis_dim, inner] (elements of elem_bytes), int64 indices
// (negative ones count from the end) -> out [outer, count, inner].
void gather(const void* data, const std::int64_t* indices, void* out, std::int64_t outer, std::int64_t axis_dim,
            std::int64_t inner, std::int64_t count, int elem_bytes, cudaStream_t stream);

}  // namespace memplan::runtime::cuda
