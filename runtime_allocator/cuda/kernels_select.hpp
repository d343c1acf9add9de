// CUDA kernels of ArgMax/ArgMin and TopK (one thread per line along the axis; the CPU kernels' results, ties by the
// lower index), and the ops running them (cuda_select.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace memplan::runtime::cuda {

enum class SelectDType : int { f32, f64, i32, i64 };

// x viewed as [outer, len, inner]; y[outer, inner] the index of the maximum (or minimum), the last one on ties when
// `last`.
void arg_select(SelectDType dt, const void* x, std::int64_t* y, std::int64_t outer, std::int64_t len, std::int64_t inner,
                bool max, bool last, cudaStream_t stream);
// values[outer, k, inner] and indices (either may be null) of the k largest (or smallest) along len, sorted.
void top_k(SelectDType dt, const void* x, void* values, std::int64_t* indices, std::int64_t outer, std::int64_t len,
           std::int64_t inner, std::int64_t k, bool largest, cudaStream_t stream);

#ifndef __CUDACC__  // the executor's side (C++20, analysis/graph.hpp): not seen by nvcc's C++17
}  // namespace memplan::runtime::cuda
#include "analysis/graph.hpp"
namespace memplan::runtime::cuda {
struct ExecState;
void run_arg_max(ExecState& s, const analysis::Op& op);  // ArgMax and ArgMin
void run_top_k(ExecState& s, const analysis::Op& op);
void run_size(ExecState& s, const analysis::Op& op);  // Size
#endif

}  // namespace memplan::runtime::cuda
