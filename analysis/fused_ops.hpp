// memplan's fused transformer ops: what FusedAttention and RMSNormalization compute, and the geometry every
// stage (shapes, cost, CPU and CUDA kernels) reads from them the same way.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "analysis/graph.hpp"

namespace memplan::analysis {

// memplan::FusedAttention (FlashAttention's contract: no s x s tensor exists outside the kernel)
//   inputs   0 Q, 1 K, 2 V, 3 bias (optional): float32. Q is [B, Hq, Sq, D] in layout "bhsd" or [B, Sq, Hq, D]
//            in layout "bshd" (attrs q_layout, k_layout, v_layout, o_layout; default "bhsd"); K is
//            [B, Hkv, Sk, D], V is [B, Hkv, Sk, Dv] in their layouts; Hq is a multiple of Hkv (grouped-query
//            attention: query head h reads kv head h / (Hq / Hkv)). The bias broadcasts (numpy rules, rank <= 4)
//            to [B, Hq, Sq, Sk]: float is added to the scaled scores, boolean is a mask (true: attend).
//   outputs  0 O [B, Hq, Sq, Dv] in o_layout; 1 LSE (optional) float32 [B, Hq, Sq]: the natural log of the sum of
//            exp(scores) over the row, before dropout (-inf for a row with every key masked; its O is 0).
//            Layout "packed" (Q, K and V together, or none): inputs 0, 1, 2 are one tensor [B, S, 3, H, D] (a fused
//            qkv projection reshaped, as ViT, DeiT and Swin write it) and attrs q_slot, k_slot, v_slot (default 0,
//            1, 2, distinct, below 3) say which index of axis 2 each reads; no copy splits it into heads.
//   attrs    scale (float): scores = scale * Q K^T + bias; causal (int): key j > query i is masked (top-left
//            aligned, as torch's is_causal); dropout_ratio (float, default 0) with seed (int): the probabilities
//            are dropped with dropout_mask.hpp's hash of (seed, index of [b, h, i, j] in [B, Hq, Sq, Sk]) and
//            scaled by 1 / (1 - ratio), replayed in the backward.
//            pytorch_kv_heads, pytorch_mask (int, optional): the kv heads and mask presence of PyTorch eager's own
//            call where the graph's trace differs (read only by the pytorch_peak_bytes prediction).
// memplan::FusedAttentionGrad
//   inputs   0 dO, 1 Q, 2 K, 3 V, 4 O, 5 LSE, 6 bias (optional); attrs as the forward's.
//   outputs  0 dQ, 1 dK, 2 dV (each optional, in its forward operand's shape and layout; dK and dV summed over
//            the query heads sharing a kv head), 3 dBias (optional: dScores summed down to the bias's shape).
//            Packed: output 0 is the gradient of the one [B, S, 3, H, D] input, every slot written; 1 and 2 absent.
// memplan::RMSNormalization
//   inputs   0 X, 1 scale (optional; broadcast over the normalized axes' shape). attrs axis (default -1),
//            epsilon (default 1e-6).
//   outputs  0 Y = X * rstd * scale; 1 InvStdDev (optional) float32: X's shape with the axes >= axis set to 1,
//            rstd = 1 / sqrt(mean(X^2 over those axes) + epsilon).
// memplan::RMSNormGrad
//   inputs   0 dY, 1 X, 2 scale (optional), 3 InvStdDev; attrs axis. outputs 0 dX, 1 dScale (optional).

enum class HeadLayout : std::uint8_t { bhsd, bshd, packed };
HeadLayout head_layout_from_name(std::string_view name);  // ErrorKind::unsupported for another name
const char* head_layout_name(HeadLayout l) noexcept;

// Element strides of one attention operand: element (b, h, s, d) is at offset + b*batch + h*head + s*row + d.
struct HeadStrides {
  std::int64_t batch = 0, head = 0, row = 0;
  std::int64_t offset = 0;  // packed: the slot's first element
};

struct AttentionGeometry {
  std::int64_t batch = 0, q_heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, head_dim = 0, v_head_dim = 0;
  HeadLayout q_layout = HeadLayout::bhsd, k_layout = HeadLayout::bhsd, v_layout = HeadLayout::bhsd,
             o_layout = HeadLayout::bhsd;
  double scale = 1.0;
  bool causal = false;
  double dropout_ratio = 0.0;
  std::uint64_t seed = 0;
  HeadStrides q, k, v, o;
  bool packed = false;  // Q, K, V are slots of one [B, S, 3, H, D] tensor (its gradient is one output)
  std::int64_t group() const noexcept { return kv_heads > 0 ? q_heads / kv_heads : 1; }
};

// The geometry of a FusedAttention or FusedAttentionGrad op from the Q, K, V shapes (rank 4 each, in
// their layouts). ErrorKind::shape naming the op when they disagree (batch, head_dim, Hq % Hkv, K vs V).
AttentionGeometry attention_geometry(const Op& op, const std::vector<std::int64_t>& q, const std::vector<std::int64_t>& k,
                                     const std::vector<std::int64_t>& v);
// The shape of an operand of `layout` for (batch, heads, len, dim) (packed: the whole [B, S, 3, H, D]).
std::vector<std::int64_t> head_shape(HeadLayout layout, std::int64_t batch, std::int64_t heads, std::int64_t len, std::int64_t dim);

}  // namespace memplan::analysis
