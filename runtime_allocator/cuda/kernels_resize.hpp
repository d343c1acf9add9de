// CUDA kernels of Resize/Upsample and memplan::ResizeGrad (runtime_allocator/kernels/resize_index.hpp's index map, as the CPU
// kernels compute it), and the ops running them (cuda_resize.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "runtime_allocator/kernels/resize_index.hpp"

namespace memplan::runtime::cuda {

struct ResizeShape {
  int rank = 0;
  int elem_bytes = 4;  // nearest: 1, 2, 4 or 8; linear and cubic: 4 (float32)
  bool f32 = true;     // float32 (linear, cubic, and nearest's extrapolation value); else nearest moves bits
  ResizeMode mode;
  ResizeAxis axes[kResizeMaxRank];
};

// y (contiguous, the axes' out dims) resampled from x.
void resize_forward(const ResizeShape& s, const void* x, void* y, cudaStream_t stream);
// dx (the axes' in dims) = zeros, each dy element added at its taps times their weights (atomic float adds).
void resize_backward(const ResizeShape& s, const float* dy, float* dx, cudaStream_t stream);

#ifndef __CUDACC__  // the executor's side (C++20, analysis/graph.hpp): not seen by nvcc's C++17
}  // namespace memplan::runtime::cuda
#include "analysis/graph.hpp"
namespace memplan::runtime::cuda {
struct ExecState;
void run_resize(ExecState& s, const analysis::Op& op);       // Resize, Upsample
void run_resize_grad(ExecState& s, const analysis::Op& op);  // memplan::ResizeGrad
// Empty unless linear or cubic mode reads a tensor that is not float32.
std::string resize_reason(const analysis::Graph& g, const analysis::Op& op);
#endif

}  // namespace memplan::runtime::cuda
