// ONNX Attention (opset 23) as an attention match: its 4-D form is a FusedAttention already.
#include <cmath>

#include "planner/fusion_attention.hpp"

namespace memplan::planner {

using analysis::DType;
using analysis::Graph;
using analysis::HeadLayout;
using analysis::kNoTensor;
using analysis::Op;
using analysis::OpId;
using analysis::TensorId;

AttentionMatchResult match_onnx_attention(const Graph& g, OpId attention) {
  const Op& op = g.ops[attention];
  AttentionMatchResult r;
  auto miss = [&](const std::string& why) {
    r.near_miss = "Attention '" + op.name + "': " + why;
    return r;
  };
  for (std::size_t i = 0; i < 3; ++i)
    if (op.input(i) == kNoTensor || g.tensors[op.input(i)].dims.size() != 4 || g.tensors[op.input(i)].dtype != DType::f32)
      return miss("Q, K and V are not 4-D float32");
  for (std::size_t i = 4; i < op.inputs.size(); ++i)
    if (op.inputs[i] != kNoTensor) return miss("a KV cache or sequence lengths are given");
  for (std::size_t i = 1; i < op.outputs.size(); ++i)
    if (op.outputs[i] != kNoTensor && (g.tensors[op.outputs[i]].is_graph_output || !g.tensors[op.outputs[i]].consumers.empty()))
      return miss("an output besides Y is read");
  if (op.attr_float("softcap", 0.0) != 0.0) return miss("softcap is set");
  AttentionMatch m;
  m.softmax = m.scores = m.output_op = attention;
  m.members = {attention};
  m.sdpa_form = true;
  m.q = {op.input(0), HeadLayout::bhsd};
  m.k = {op.input(1), HeadLayout::bhsd};
  m.v = {op.input(2), HeadLayout::bhsd};
  m.output = op.output(0);
  Op proto;
  proto.name = op.name;
  analysis::AttentionGeometry a;
  try {
    a = attention_geometry(proto, g.tensors[m.q.tensor].shape(), g.tensors[m.k.tensor].shape(), g.tensors[m.v.tensor].shape());
  } catch (const Error& e) {
    return miss(e.what());
  }
  m.scale = op.attr_float("scale", 1.0 / std::sqrt(static_cast<double>(a.head_dim)));
  m.causal = op.attr_int("is_causal", 0) != 0;
  if (const TensorId mask = op.input(3); mask != kNoTensor) {
    const auto& t = g.tensors[mask];
    if (!broadcasts_to(t.shape(), {a.batch, a.q_heads, a.q_len, a.kv_len}) ||
        (t.dtype != DType::f32 && t.dtype != DType::boolean))
      return miss("attn_mask is not a float32 or boolean tensor broadcasting to the scores");
    if (t.dtype == DType::boolean)
      m.bool_mask = mask;
    else
      m.biases = {mask};
  }
  r.match = std::move(m);
  return r;
}

}  // namespace memplan::planner
