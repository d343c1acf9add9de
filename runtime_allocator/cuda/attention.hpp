// FlashAttention-2 style CUDA kernels of memplan::FusedAttention and FusedAttentionGrad (float32 arithmetic, no
// tensor cores; operands stored as float32, bf16 or f16):
// their launchers (attention.cu, attention_grad.cu); the operands as the kernels read them are in attention_params.hpp.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "runtime_allocator/cuda/attention_params.hpp"

namespace memplan::runtime::cuda {

// O (and LSE when p.lse is set) from Q, K, V and the bias; max(head_dim, v_head_dim) <= kAttentionMaxHeadDim.
void attention_forward(const AttentionParams& p, cudaStream_t stream);
// dQ, dK, dV and dBias (those not null) from dO, Q, K, V, O, LSE and the bias, deterministic: float32 operands of
// head dims <= 64 in one kernel per key tile that also sums dQ into place, key tiles in order; otherwise dQ per
// query tile and dK, dV per key tile in two kernels. dBias is zeroed, then accumulated with atomic adds.
// `scratch`: device memory of attention_backward_scratch_bytes(p) (the one-kernel path's dQ turn counters, zeroed
// here), null when that is 0.
std::size_t attention_backward_scratch_bytes(const AttentionParams& p);
void attention_backward(const AttentionParams& p, cudaStream_t stream, void* scratch);

}  // namespace memplan::runtime::cuda
