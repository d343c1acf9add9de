// CUDA kernels of RandomNormal(Like), RandomUniform and Bernoulli (runtime_allocator/kernels/random_normal.hpp's draws,
// bit-identical to the CPU kernels), and the ops running them (cuda_random.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace memplan::runtime::cuda {

// n draws of mean + scale * N(0, 1) under `key`, float32 (`f64` false) or float64.
void random_normal(void* y, bool f64, std::int64_t n, std::uint64_t key, double mean, double scale, cudaStream_t stream);
// n Bernoulli draws: y[i] = (uniform_f64(key, i) < p[i]) as the output type. `p_f64`: p is float64 (else float32);
// `y_code`: 0 float32, 1 float64, 2 int32, 3 int64, 4 one byte (bool, uint8).
void bernoulli(const void* p, bool p_f64, void* y, int y_code, std::int64_t n, std::uint64_t key, cudaStream_t stream);

}  // namespace memplan::runtime::cuda

#ifndef __CUDACC__  // the executor's side (C++20, analysis/graph.hpp): not seen by nvcc's C++17
#include "analysis/graph.hpp"
namespace memplan::runtime::cuda {
struct ExecState;
void run_random_normal(ExecState& s, const analysis::Op& op);  // RandomNormal and RandomNormalLike
void run_random_uniform(ExecState& s, const analysis::Op& op);
void run_bernoulli(ExecState& s, const analysis::Op& op);
}  // namespace memplan::runtime::cuda
#endif
