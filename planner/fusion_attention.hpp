// Attention matching (internal to the planner): what one scaled-dot-product attention subgraph reads and replaces.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analysis/fused_ops.hpp"
#include "analysis/graph.hpp"

namespace memplan::planner {

// Q, K or V as the fused op reads it: a tensor of the source graph in its head layout.
struct AttentionOperand {
  analysis::TensorId tensor = analysis::kNoTensor;
  analysis::HeadLayout layout = analysis::HeadLayout::bhsd;
};

// One matched softmax(scale Q K^T + bias) V, ready to become a memplan FusedAttention (docs/fusion.md).
struct AttentionMatch {
  analysis::OpId softmax = analysis::kNoOp;
  analysis::OpId scores = analysis::kNoOp;     // MatMul(Q, K^T)
  analysis::OpId output_op = analysis::kNoOp;  // the last op replaced: MatMul(P, V) or the Transpose of O
  std::vector<analysis::OpId> members;         // source ops replaced, ascending
  AttentionOperand q, k, v;
  // K^T came in as a tensor with no transposing op to look through: a Transpose(0,1,3,2) of it gives K.
  analysis::TensorId k_transposed = analysis::kNoTensor;
  analysis::TensorId output = analysis::kNoTensor;  // O, a source tensor (kept, now written by the fused op)
  analysis::HeadLayout o_layout = analysis::HeadLayout::bhsd;
  // Additive float biases in the order the graph adds them (the rewrite sums them into one input), or
  // one boolean mask (true: attend) from Where(mask, scores, -inf); never both.
  std::vector<analysis::TensorId> biases;
  analysis::TensorId bool_mask = analysis::kNoTensor;
  // Reshapes between the scores and the softmax: the first bias Add (`reshaped_bias_add`) is replaced by an
  // Expand of its bias to the scores' shape; the ops after it stay and compute the whole bias, which is
  // then the softmax's input tensor (`biases` holds just that tensor).
  analysis::OpId reshaped_bias_add = analysis::kNoOp;
  analysis::TensorId reshaped_bias_source = analysis::kNoTensor;
  double scale = 1.0;
  // Q and K^T are each scaled by a constant and the scores are not: the form scaled_dot_product_attention takes
  // when exported (the TorchScript and dynamo exporters write aten's math backend, q * sqrt(scale) and
  // k^T * sqrt(scale)); attention a model writes in Python scales the scores or Q alone (or nothing), and PyTorch
  // eager runs it op by op. An ONNX Attention op is SDPA.
  bool sdpa_form = false;
  bool causal = false;
  double dropout_ratio = 0.0;
  std::int64_t seed = 0;
};

struct AttentionMatchResult {
  std::optional<AttentionMatch> match;
  std::string near_miss;  // why the softmax was left as it is (empty when matched)
};

// Matches the attention around `softmax` (an op of `g`, which has concrete shapes).
AttentionMatchResult match_attention(const analysis::Graph& g, analysis::OpId softmax);

// An ONNX Attention op (opset 23) with 4-D float32 operands, no KV cache, no softcap and only its output Y
// read, as a match of itself (its attn_mask the bias); 3-D operands stay unfused.
AttentionMatchResult match_onnx_attention(const analysis::Graph& g, analysis::OpId attention);

// `from` broadcasts (numpy rules) to `to` without growing it.
bool broadcasts_to(const std::vector<std::int64_t>& from, const std::vector<std::int64_t>& to);

// The seed of a training Dropout absorbed into FusedAttention: its `seed` attribute, else the 64-bit FNV-1a
// hash of its name, top bit cleared (deterministic, and stable when ops around it are added or removed).
std::int64_t attention_dropout_seed(const analysis::Op& dropout);

}  // namespace memplan::planner
