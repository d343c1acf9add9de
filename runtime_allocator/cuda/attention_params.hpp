// The operands of the attention kernels as they read them (attention.hpp launches them, attention_tile.cuh holds their
// per-tile device code).
#pragma once

#include <cstdint>

namespace memplan::runtime::cuda {

// How an operand's elements are stored: the kernels widen 16-bit ones to float32 as they load them and round their
// results to nearest even as they store them.
enum AttnStorage : int { kAttnF32 = 0, kAttnBf16 = 1, kAttnF16 = 2 };

// One attention operand: element (b, h, s, d) at element data + b*batch + h*head + s*row + d (analysis::HeadStrides).
struct AttnOperand {
  void* data = nullptr;
  std::int64_t batch = 0, head = 0, row = 0;
  AttnStorage storage = kAttnF32;
};

// The highest head dim (of Q/K and of V) the kernels take.
inline constexpr int kAttentionMaxHeadDim = 128;

struct AttentionParams {
  int batch = 0, q_heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, head_dim = 0, v_head_dim = 0;
  AttnOperand q, k, v, o;  // o: the forward's output, an input of the backward
  float* lse = nullptr;    // [B, Hq, Sq]: written by the forward (may be null there), read by the backward
  // Bias broadcast over [B, Hq, Sq, Sk]: element (b, h, i, j) at bias + dot(bias_strides, (b, h, i, j)).
  const void* bias = nullptr;  // float32 (or bf16/f16 per bias_storage), or one byte per element when bias_is_mask
  bool bias_is_mask = false;    // (nonzero: attend)
  AttnStorage bias_storage = kAttnF32;
  std::int64_t bias_strides[4] = {0, 0, 0, 0};
  float scale = 1.0f;
  bool causal = false;
  bool dropout = false;  // with the dropout_mask.hpp key and threshold, kept elements scaled by dropout_scale
  std::uint64_t dropout_key = 0, dropout_threshold = 0;
  float dropout_scale = 1.0f;
  bool vec4 = false;  // every operand float32 and 16-byte aligned, head dims multiples of 4: float4 loads and stores
  // Backward only: dO (O's strides), and the gradients (each may be null); dbias has the bias's strides.
  AttnOperand d_o, dq, dk, dv;
  float* dbias = nullptr;
  std::int64_t dbias_elements = 0;  // the bias's element count
};

}  // namespace memplan::runtime::cuda
