// CUDA kernels of GatherND, ScatterND and ScatterElements (runtime_allocator/kernels/kernels_scatter.cpp's semantics; an index
// out of range is skipped, or gathers zeros, where the CPU kernels raise), and the ops running them (cuda_scatter.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "runtime_allocator/cuda/kernels.hpp"
#include "runtime_allocator/kernels/scatter_reduction.hpp"

namespace memplan::runtime::cuda {

// Index tuples of length k into data: tuple t picks the slice of `slice` contiguous elements at
// (t / per_batch) * batch_stride + sum_j wrap(idx[t * k + j], dims[j]) * strides[j].
struct IndexTuples {
  int k = 0;
  int elem_bytes = 4;  // 1, 2, 4 or 8
  bool idx64 = true;   // int64 indices, else int32
  std::int64_t tuples = 0, slice = 1, per_batch = 1, batch_stride = 0;
  std::int64_t dims[kMaxRank] = {};
  std::int64_t strides[kMaxRank] = {};
};

// With a reduction other than none (a store) the element type is float32, float64, int32 or int64 (ScatterDType),
// updated with atomic compare-and-swap.
enum class ScatterDType : int { f32, f64, i32, i64 };

// y[tuples * slice] gathered from data.
void gather_nd(const IndexTuples& s, const void* data, const void* idx, void* y, cudaStream_t stream);
// y (already a copy of data) updated with the tuples * slice updates.
void scatter_nd(const IndexTuples& s, ScatterReduction r, ScatterDType dt, const void* upd, const void* idx, void* y,
                cudaStream_t stream);

// ScatterElements: update i lands at i's coordinates (u_dims) with the axis coordinate replaced by idx[i].
struct ScatterElementsShape {
  int rank = 0;
  int axis = 0;
  int elem_bytes = 4;
  bool idx64 = true;
  std::int64_t u_dims[kMaxRank] = {};
  std::int64_t y_strides[kMaxRank] = {};
  std::int64_t axis_dim = 0;
};
void scatter_elements(const ScatterElementsShape& s, ScatterReduction r, ScatterDType dt, const void* upd, const void* idx,
                      void* y, cudaStream_t stream);

#ifndef __CUDACC__  // the executor's side (C++20, analysis/graph.hpp): not seen by nvcc's C++17
}  // namespace memplan::runtime::cuda
#include "analysis/graph.hpp"
namespace memplan::runtime::cuda {
struct ExecState;
void run_gather_nd(ExecState& s, const analysis::Op& op);
void run_scatter_nd(ExecState& s, const analysis::Op& op);
void run_scatter_elements(ExecState& s, const analysis::Op& op);
// Empty unless a reducing scatter's data is not float32, float64, int32 or int64.
std::string scatter_reason(const analysis::Graph& g, const analysis::Op& op);
#endif

}  // namespace memplan::runtime::cuda
