// CUDA kernels of Range (the CPU kernel's values: floats from double arithmetic, integers wrapping), Trilu (any
// element size), IsInf and NonZero, and the ops running them (cuda_misc.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace memplan::runtime::cuda {

enum class RangeDType : int { f32, f64, i32, i64 };

// y[k] = start + k * delta for k < n; start and delta are device scalars of y's dtype.
void range(RangeDType dt, const void* start, const void* delta, void* y, std::int64_t n, cudaStream_t stream);
// Trilu of `count` elements of `elem_bytes` bytes, each trailing [rows, cols] matrix: kept where j - i >= k (upper) or
// j - i <= k (lower), else zero.
void trilu(const void* x, void* y, std::int64_t count, std::int64_t rows, std::int64_t cols, std::int64_t k, bool upper,
           int elem_bytes, cudaStream_t stream);
// y (bool) = x is +inf (when `positive`) or -inf (when `negative`); x float32 (f64 false: float32) or float64.
void is_inf(const void* x, bool f64, bool* y, std::int64_t n, bool positive, bool negative, cudaStream_t stream);

// NonZero of x (rank <= 8, dims[]; n elements of elem_bytes bytes; `is_float`: -0 counts as zero): the row-major
// indices of its nonzero elements into y [rank, capacity] (those past capacity not written) and their number into
// *count (device). One thread in element order: NonZero's inputs are masks and position ids, and the order is the
// CPU kernel's.
struct NonZeroShape {
  int rank = 0;
  std::int64_t dims[8] = {};
  int elem_bytes = 4;
  bool is_float = false;
};
void non_zero(const NonZeroShape& s, const void* x, std::int64_t* y, std::int64_t capacity, std::int64_t* count,
              cudaStream_t stream);

#ifndef __CUDACC__  // the executor's side (C++20, analysis/graph.hpp): not seen by nvcc's C++17
}  // namespace memplan::runtime::cuda
#include "analysis/graph.hpp"
namespace memplan::runtime::cuda {
struct ExecState;
void run_range(ExecState& s, const analysis::Op& op);
void run_trilu(ExecState& s, const analysis::Op& op);
void run_is_inf(ExecState& s, const analysis::Op& op);
void run_non_zero(ExecState& s, const analysis::Op& op);
#endif

}  // namespace memplan::runtime::cuda
