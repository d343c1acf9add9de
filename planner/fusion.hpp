// Elementwise fusion: chains and trees of elementwise ops become one memplan::FusedElementwise op.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/fused_expr.hpp"
#include "analysis/graph.hpp"
#include "analysis/ops.hpp"

namespace memplan::planner {

// The fused-expression IR lives in analysis/fused_expr.hpp.
using analysis::elem_op_arity;
using analysis::elem_op_name;
using analysis::elementwise_expr;
using analysis::ElemOp;
using analysis::ExprNode;
using analysis::FusedExpr;
using analysis::kFusedOpType;
using analysis::kMemplanDomain;

// The attribute a fused op carries: the names of the ops it replaced (strings, in their original order).
inline constexpr const char* kFusedOpsAttr = "fused_ops";
void set_fused_ops(analysis::Op& op, std::vector<std::string> members);
// The op of `g` whose fused_ops are exactly `members`; kNoOp when there is none.
analysis::OpId find_fused_op(const analysis::Graph& g, const std::vector<std::string>& members);

struct FusedGroup {
  analysis::OpId op = analysis::kNoOp;  // the fused op in the new graph
  std::string kind;                     // "elementwise" | "attention" | "layer_norm" | "rms_norm" | "gelu" | "layout" | "roll"
  std::vector<std::string> members;     // names of the ops it replaces, in their original order
  std::uint64_t intermediate_bytes = 0; // bytes of the tensors that no longer exist
};

struct FusionResult {
  analysis::Graph graph;  // shapes kept; the intermediates of each group removed
  std::vector<FusedGroup> groups;
  std::uint64_t intermediate_bytes_removed = 0;
};

// The most ops one elementwise group takes (docs/errors.md, "Limits of size"): a longer chain is cut into
// groups of at most this many, each one fused op, so a fused expression, its gradient and the recursion that
// builds it stay bounded whatever the chain's length (the cut costs one tensor per 256 ops).
inline constexpr std::size_t kMaxElementwiseGroupOps = 256;

struct FusionOptions {
  std::size_t min_group_ops = 2;  // a lone elementwise op is left as it is
  std::size_t max_group_ops = kMaxElementwiseGroupOps;
  // The graph will be trained: a group is fused only when its backward (which reads the group's external
  // inputs, fused_expr_grad) saves no more activation bytes than its ops' own backward rules would
  // (e.g. a residual Add + Relu stays apart: fused it would save both Add inputs instead of one output).
  bool training = false;
};

// Which pattern passes fuse_graph runs (docs/fusion.md). Each pass keeps the graph's meaning: a near miss
// (softmax over another axis, a mask after the softmax) is left as it is.
struct FuseOptions {
  bool attention = true;    // scaled-dot-product attention subgraphs and ONNX Attention -> memplan FusedAttention
  bool norms = true;        // decomposed LayerNorm -> LayerNormalization; RMSNorm forms -> memplan RMSNormalization
  bool gelu = true;         // decomposed GELU (erf and tanh forms) -> ONNX Gelu
  bool elementwise = true;  // remaining elementwise chains -> memplan FusedElementwise
  bool layouts = true;      // Transpose into a consumer that reads strides (MatMul operands) -> no copy
  bool training = false;    // the graph will be trained (FusionOptions::training)
  // GELU and RMSNorm written out as arithmetic in the model's Python (Hugging Face's NewGELUActivation, T5's and
  // Llama's RMSNorm) fuse too. Off: only what PyTorch runs as one library kernel: GELU in the association the
  // exporters give F.gelu (fusion_gelu.cpp), a decomposed LayerNorm only in a graph below opset 17 (from 17 the
  // exporters write F.layer_norm as LayerNormalization), no decomposed RMSNorm (F.rms_norm has no decomposition in
  // the TorchScript exporter: a decomposed RMSNorm is Python arithmetic, run op by op).
  bool composite = true;
  // torch.roll as exported (two Slices and a Concat per axis) -> memplan Roll: one library kernel in PyTorch too.
  bool rolls = true;
  // FusedAttention ops that PyTorch eager runs op by op are written out as SDPA's math backend's ops
  // (decompose_math_attention): with `attention`, those PyTorch's SDPA dispatch sends to its math backend; without
  // it (eager attention), every one (a graph written with FusedAttention: memplan_torch.export_graph).
  bool math_attention = false;
  // x * Sigmoid(x), x * HardSigmoid(x), x * Tanh(Softplus(x)) -> Swish, HardSwish, Mish: PyTorch's F.silu,
  // F.hardswish and F.mish as exported (fusion_activations.cpp); memplan's own plans fuse them as elementwise chains.
  bool activations = false;
  // With `layouts` and `attention`: a FusedAttention reads Q, K and V packed in the one tensor a Linear made
  // (fusion_packed_qkv.cpp).
  bool packed_attention = true;
  // With `attention`: only those in the form an exported scaled_dot_product_attention takes
  // (AttentionMatch::sdpa_form); attention the model writes in Python keeps its ops, as PyTorch eager runs them.
  bool sdpa_form_only = false;
  // With `attention`: a FusedAttention whose head dim (of Q/K or of V) is above this is written out as the math
  // backend's ops (decompose_attention_above) for a runtime whose attention kernels stop there (the CUDA ones:
  // runtime::cuda::attention_max_head_dim()); matmuls and a softmax take any. 0: no limit.
  std::int64_t attention_max_head_dim = 0;
  // Nothing fused (`--no-fuse`).
  static FuseOptions none() {
    FuseOptions o{false, false, false, false, false};
    o.rolls = false;
    return o;
  }
  // What PyTorch eager runs as single kernels: its library ops (LayerNorm, F.gelu, SDPA when `sdpa`: with
  // `sdpa_form_only` only attention in SDPA's exported form), no
  // general elementwise fusion (used to predict PyTorch's peak). A Transpose swapping a matmul operand's last two
  // axes is a view there (W.t() in F.linear, k.transpose(-2, -1)): layouts on; packed attention off (PyTorch's
  // unbind is a view but its backward stacks the three gradients into a new tensor).
  static FuseOptions pytorch_eager(bool sdpa, bool sdpa_form_only = true) {
    FuseOptions o{sdpa, true, true, false, true};
    o.sdpa_form_only = sdpa_form_only;
    o.packed_attention = false;
    o.composite = false;
    o.math_attention = true;
    o.activations = true;
    return o;
  }
};

// Runs the enabled passes in the order attention, norms, gelu, rolls, layouts, elementwise on a graph with
// concrete shapes; group op ids refer to the returned graph.
FusionResult fuse_graph(const analysis::Graph& g, const FuseOptions& opts = {});

// The passes (each one a whole rewrite; fuse_graph chains them).
// fusion_attention.cpp; `sdpa_form_only`: FuseOptions::sdpa_form_only
FusionResult fuse_attention(const analysis::Graph& g, bool sdpa_form_only = false);
FusionResult fuse_gated_activations(const analysis::Graph& g);  // fusion_activations.cpp
// fusion_norms.cpp: LayerNorm and (with `rms`) RMSNorm
FusionResult fuse_norms(const analysis::Graph& g, bool rms = true);
// fusion_gelu.cpp: erf and tanh forms; without `composite` only F.gelu's exported association
FusionResult fuse_gelu(const analysis::Graph& g, bool composite = true);
FusionResult fuse_layouts(const analysis::Graph& g);    // fusion_layouts.cpp
// fusion_packed_qkv.cpp: a FusedAttention reading the three slots of a [B, S, 3, H, D] -> [3, B, H, S, D] Transpose
// (a fused qkv projection, unbound) reads the packed tensor itself: the Transpose and the slicing go.
FusionResult fuse_packed_attention(const analysis::Graph& g);
// fusion_roll.cpp: Concat(Slice(x, k..n), Slice(x, 0..k)) along one axis (torch.roll as exported) -> memplan Roll.
FusionResult fuse_rolls(const analysis::Graph& g);

// The kernel PyTorch's scaled_dot_product_attention runs for a FusedAttention on CUDA (sm80 and later;
// select_sdp_backend in aten/src/ATen/native/transformers/cuda/sdp_utils.cpp, torch 2.11): flash for 16-bit
// inputs without a mask (grouped-query heads allowed); the memory-efficient kernel for fp32 or 16-bit inputs with
// as many key/value heads as query heads (its dense constraints reject grouped-query heads) and head dims that
// are multiples of 16 bytes; else the math backend, op by op: for fp32 grouped-query attention (Llama, Mistral,
// Qwen2 under transformers' sdpa with enable_gqa) it keeps [B, Hq, Sq, Sk] probabilities, dropout output and mask
// for the backward.
enum class SdpaBackend : std::uint8_t { flash, efficient, math };
SdpaBackend pytorch_sdpa_backend(const analysis::Graph& g, const analysis::Op& fused_attention);
// fusion_math_attention.cpp: each FusedAttention that PyTorch runs in its math backend (every one with `every`)
// written as that backend's ops (aten _scaled_dot_product_attention_math): q * sqrt(scale); k and v repeated
// per query head (Unsqueeze, Expand, Reshape) for grouped-query heads; MatMul with Transpose(k) * sqrt(scale);
// the causal mask (ConstantOfShape, Trilu) or a boolean mask through Where, a float bias through Add; Softmax;
// Dropout; MatMul with v (bshd operands transposed). A FusedAttention whose LSE output is read, or with packed
// operands, stays. No groups are reported.
FusionResult decompose_math_attention(const analysis::Graph& g, bool every);
// Each FusedAttention of head dim (Q/K or V) above max_head_dim written out the same way (one whose LSE is read,
// or with packed operands, stays).
FusionResult decompose_attention_above(const analysis::Graph& g, std::int64_t max_head_dim);

// Groups maximal sets of fusible ops whose internal tensors are read only inside the group and are not
// graph outputs; each group has one result. The graph must have concrete shapes (after infer_shapes).
// Contracting such a group keeps the graph acyclic: every path out of it leaves through its result.
FusionResult fuse_elementwise(const analysis::Graph& g, const FusionOptions& opts = {});

}  // namespace memplan::planner
