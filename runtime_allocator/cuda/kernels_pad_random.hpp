// CUDA kernels of Pad and PadGrad, CumSum (runtime_allocator/kernels/pad_index.hpp's index map, every mode) and RandomUniformLike
// (runtime_allocator/kernels/random_uniform.hpp's draws, bit-identical to the CPU kernels), and the ops running them
// (cuda_pad_random.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime_allocator/cuda/float_storage.hpp"
#include "runtime_allocator/cuda/kernels.hpp"
#include "runtime_allocator/kernels/pad_index.hpp"

namespace memplan::runtime::cuda {

struct PadShape {
  int rank = 0;
  int elem_bytes = 4;  // 1, 2, 4 or 8
  PadMode mode = PadMode::constant;
  std::int64_t out_dims[kMaxRank] = {};
  std::int64_t in_strides[kMaxRank] = {};  // in elements
  PadAxis axes[kMaxRank] = {};
};

// y (contiguous, out_dims) from x; `value` points to one device element written where constant mode pads, null for
// zero.
void pad(const PadShape& s, const void* x, const void* value, void* y, cudaStream_t stream);

// memplan PadGrad: dx (contiguous, in_dims) from dy (contiguous, out_dims): each element the float32 sum of the dy
// elements that read it (pad_preimage per axis, in the CPU kernel's order); float32, bf16 or f16 storage.
struct PadGradShape {
  int rank = 0;
  PadMode mode = PadMode::constant;
  FloatStorage storage = FloatStorage::f32;
  std::int64_t in_dims[kMaxRank] = {};
  std::int64_t out_dims[kMaxRank] = {};
  std::int64_t out_strides[kMaxRank] = {};  // in elements
  PadAxis axes[kMaxRank] = {};
};
void pad_grad(const PadGradShape& s, const void* dy, void* dx, cudaStream_t stream);

// memplan Roll of x viewed as [dims..., block]: row c of y (over the rolled axes and those between them) is row
// c - shift (mod dims) of x; each row is `block_bytes` contiguous bytes (the axes after the last rolled one).
struct RollShape {
  int rank = 0;
  std::int64_t dims[kMaxRank] = {};
  std::int64_t shift[kMaxRank] = {};  // in [0, dims)
  std::int64_t block_bytes = 0;
};
void roll(const RollShape& s, const void* x, void* y, cudaStream_t stream);

// CumSum of an [outer, len, inner] view: one thread per (outer, inner) line, summed in T in index order (the
// CPU kernel's order); dtype_code 0 float32, 1 float64, 2 int32, 3 int64.
void cum_sum(const void* x, void* y, int dtype_code, std::int64_t outer, std::int64_t len, std::int64_t inner, bool exclusive,
             bool reverse, cudaStream_t stream);

// GatherElements: y[i] = x at i's coordinates with the axis coordinate replaced by idx[i] (negative counts from
// the end; out of range writes zeros: the CPU kernel raises instead). Shapes of rank <= kMaxRank; y and idx
// share y_dims; elem_bytes 1, 2, 4 or 8; idx int64 (idx64) or int32.
struct GatherElementsShape {
  int rank = 0;
  int axis = 0;
  int elem_bytes = 4;
  bool idx64 = true;
  std::int64_t y_dims[kMaxRank] = {};
  std::int64_t x_strides[kMaxRank] = {};
  std::int64_t axis_dim = 0;
};
void gather_elements(const GatherElementsShape& s, const void* x, const void* idx, void* y, cudaStream_t stream);

// n float32 (or float64) draws of uniform_f32 (uniform_f64) under `key` in [low, high).
void random_uniform_f32(float* y, std::int64_t n, std::uint64_t key, float low, float high, cudaStream_t stream);
void random_uniform_f64(double* y, std::int64_t n, std::uint64_t key, double low, double high, cudaStream_t stream);

#ifndef __CUDACC__  // the executor's side (C++20, analysis/graph.hpp): not seen by nvcc's C++17
}  // namespace memplan::runtime::cuda
#include "analysis/graph.hpp"
namespace memplan::runtime::cuda {
struct ExecState;
void run_pad(ExecState& s, const analysis::Op& op);
void run_pad_grad(ExecState& s, const analysis::Op& op);
void run_random_uniform_like(ExecState& s, const analysis::Op& op);
void run_cum_sum(ExecState& s, const analysis::Op& op);
void run_roll(ExecState& s, const analysis::Op& op);
void run_gather_elements(ExecState& s, const analysis::Op& op);
#endif

}  // namespace memplan::runtime::cuda
