// Internal state shared by the CUDA executor and its op implementations (not installed).
#pragma once

#include <cstdint>
#include <vector>

#include "analysis/graph.hpp"
#include "runtime_allocator/cuda/cuda_context.hpp"
#include "runtime_allocator/cuda/fused_kernel.hpp"

namespace memplan::runtime::cuda {

struct ExecState {
  const analysis::Graph& g;
  Context& ctx;
  FusedKernelCache& fused;
  std::vector<std::byte*> ptr;  // per tensor: device (or pinned host) address
  std::byte* workspace = nullptr;
  std::uint64_t workspace_bytes = 0;

  const analysis::Tensor& tensor(analysis::TensorId t) const { return g.tensors[t]; }
  std::vector<std::int64_t> dims(analysis::TensorId t) const { return g.tensors[t].shape(); }
  float* f32(analysis::TensorId t) const { return reinterpret_cast<float*>(ptr[t]); }
};

// Runs one compute op (not SwapOut/SwapIn) on ctx.stream().
void run_op(ExecState& s, analysis::OpId op);
// Device workspace bytes that op needs (cuDNN convolution), 0 for the others.
std::uint64_t op_workspace_bytes(ExecState& s, analysis::OpId op);

// The ops implemented with cuBLAS and cuDNN (cuda_dnn.cpp); false when `op` is none of them.
bool run_dnn_op(ExecState& s, const analysis::Op& op);

}  // namespace memplan::runtime::cuda
