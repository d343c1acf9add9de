// PyTorch's SDPA math backend written out: FusedAttention ops that PyTorch eager runs op by op, as those ops.
#include <algorithm>
#include <cmath>
#include <string>

#include "analysis/autodiff.hpp"
#include "analysis/fused_ops.hpp"
#include "analysis/ops.hpp"
#include "planner/fusion.hpp"
#include "planner/graph_rewrite.hpp"

namespace memplan::planner {

using analysis::Attribute;
using analysis::DType;
using analysis::Graph;
using analysis::HeadLayout;
using analysis::kNoTensor;
using analysis::Op;
using analysis::OpId;
using analysis::TensorData;
using analysis::TensorId;
using analysis::autodiff::attr_f;
using analysis::autodiff::attr_i;
using analysis::autodiff::attr_ints;

namespace {

bool is_fused_attention(const Op& op) {
  return op.domain == analysis::kMemplanDomain && op.type == analysis::memplan_ops::kFusedAttention;
}

analysis::AttentionGeometry geometry_of(const Graph& g, const Op& op) {
  return analysis::attention_geometry(op, g.tensors[op.inputs.at(0)].shape(), g.tensors[op.inputs.at(1)].shape(),
                                      g.tensors[op.inputs.at(2)].shape());
}

bool half_precision(DType dt) { return dt == DType::f16 || dt == DType::bf16; }

// One FusedAttention written as aten's _scaled_dot_product_attention_math (attention.cpp): q * sqrt(scale),
// k and v repeated per query head (repeat_interleave) for grouped-query heads, the scores q k^T with k^T
// scaled by sqrt(scale), the causal mask or the bias applied, softmax, dropout, the product with v.
class MathAttention {
 public:
  MathAttention(const Graph& g, GraphRewrite& rw, OpId o) : g_(g), rw_(rw), o_(o), op_(g.ops[o]), geo_(geometry_of(g, op_)) {
    dt_ = g.tensors[op_.inputs[0]].dtype;
    name_ = op_.name + "/math";
  }

  void write() {
    const auto& a = geo_;
    const TensorId sf = constant("sqrt_scale", TensorData::from_double(dt_, {}, {std::sqrt(a.scale)}));
    const TensorId q = emit("q_scaled", "Mul", {heads_first(op_.inputs[0], a.q_layout, a.q_heads, a.q_len, a.head_dim), sf},
                            {a.batch, a.q_heads, a.q_len, a.head_dim});
    const TensorId k = repeated(heads_first(op_.inputs[1], a.k_layout, a.kv_heads, a.kv_len, a.head_dim), a.head_dim, "k");
    const TensorId v = repeated(heads_first(op_.inputs[2], a.v_layout, a.kv_heads, a.kv_len, a.v_head_dim), a.v_head_dim, "v");
    const TensorId kt = emit("k_transposed", "Transpose", {k}, {a.batch, a.q_heads, a.head_dim, a.kv_len}, {{"perm", attr_ints({0, 1, 3, 2})}});
    const TensorId kts = emit("k_scaled", "Mul", {kt, sf}, {a.batch, a.q_heads, a.head_dim, a.kv_len});
    const std::vector<std::int64_t> scores = {a.batch, a.q_heads, a.q_len, a.kv_len};
    TensorId s = emit("scores", "MatMul", {q, kts}, scores);
    if (a.causal) s = masked(s, causal_mask(), scores, "causal");
    if (const TensorId bias = op_.input(3); bias != kNoTensor)
      s = g_.tensors[bias].dtype == DType::boolean ? masked(s, bias, scores, "masked") : emit("biased", "Add", {s, bias}, scores);
    TensorId p = emit("probs", "Softmax", {s}, scores, {{"axis", attr_i(-1)}});
    if (a.dropout_ratio > 0.0) {
      const TensorId ratio = constant("dropout_ratio", TensorData::from_double(dt_, {}, {a.dropout_ratio}));
      const TensorId training = constant("training", TensorData::from_int64(DType::boolean, {}, {1}));
      p = emit("dropped", "Dropout", {p, ratio, training}, scores, {{"seed", attr_i(static_cast<std::int64_t>(a.seed))}});
    }
    const TensorId out = op_.outputs[0];
    if (a.o_layout == HeadLayout::bhsd) {
      add(new_op("out", "MatMul", {p, v}, out));
      return;
    }
    const TensorId o = emit("out_bhsd", "MatMul", {p, v}, {a.batch, a.q_heads, a.q_len, a.v_head_dim});
    Op t = new_op("out_transpose", "Transpose", {o}, out);
    t.attrs["perm"] = attr_ints({0, 2, 1, 3});
    add(std::move(t));
  }

 private:
  Op new_op(const std::string& what, const char* type, std::vector<TensorId> inputs, TensorId output) const {
    Op op;
    op.name = name_ + "/" + what;
    op.type = type;
    op.phase = op_.phase;
    op.inputs = std::move(inputs);
    op.outputs = {output};
    return op;
  }
  void add(Op op) { rw_.add(std::move(op), o_); }
  TensorId constant(const std::string& what, TensorData value) { return new_constant(rw_, name_ + "/" + what, std::move(value)); }
  TensorId emit(const std::string& what, const char* type, std::vector<TensorId> inputs, const std::vector<std::int64_t>& shape,
                std::initializer_list<std::pair<const char*, Attribute>> attrs = {}, DType dt = DType::undefined) {
    const TensorId y = new_activation(rw_, name_ + "/" + what, dt == DType::undefined ? dt_ : dt, shape);
    Op op = new_op(what, type, std::move(inputs), y);
    for (const auto& [k, v] : attrs) op.attrs[k] = v;
    add(std::move(op));
    return y;
  }
  // x as [B, H, S, D] (a bshd operand transposed; the view PyTorch reads is a copy here).
  TensorId heads_first(TensorId x, HeadLayout layout, std::int64_t heads, std::int64_t len, std::int64_t dim) {
    if (layout == HeadLayout::bhsd) return x;
    return emit(g_.tensors[x].name + "_bhsd", "Transpose", {x}, {geo_.batch, heads, len, dim}, {{"perm", attr_ints({0, 2, 1, 3})}});
  }
  // k or v with each kv head repeated for its group of query heads: [B, Hkv, S, D] -> [B, Hq, S, D].
  TensorId repeated(TensorId x, std::int64_t dim, const char* which) {
    const auto& a = geo_;
    if (a.group() == 1) return x;
    const std::string w = which;
    const TensorId axes = constant(w + "_axes", TensorData::from_int64(DType::i64, {1}, {2}));
    const TensorId u = emit(w + "_unsqueezed", "Unsqueeze", {x, axes}, {a.batch, a.kv_heads, 1, a.kv_len, dim});
    const std::vector<std::int64_t> wide = {a.batch, a.kv_heads, a.group(), a.kv_len, dim};
    const TensorId e = emit(w + "_expanded", "Expand", {u, constant(w + "_expand_shape", TensorData::from_int64(DType::i64, {5}, wide))}, wide);
    const std::vector<std::int64_t> heads = {a.batch, a.q_heads, a.kv_len, dim};
    return emit(w + "_repeated", "Reshape", {e, constant(w + "_shape", TensorData::from_int64(DType::i64, {4}, heads))}, heads);
  }
  // torch's is_causal mask: ones(Sq, Sk, bool).tril() (top-left aligned).
  TensorId causal_mask() {
    const auto& a = geo_;
    const TensorId shape = constant("causal_shape", TensorData::from_int64(DType::i64, {2}, {a.q_len, a.kv_len}));
    Attribute one;
    one.kind = Attribute::Kind::tensor;
    one.t = std::make_shared<TensorData>(TensorData::from_int64(DType::boolean, {1}, {1}));
    const TensorId ones = emit("causal_ones", "ConstantOfShape", {shape}, {a.q_len, a.kv_len}, {{"value", one}}, DType::boolean);
    return emit("causal_mask", "Trilu", {ones}, {a.q_len, a.kv_len}, {{"upper", attr_i(0)}}, DType::boolean);
  }
  TensorId masked(TensorId s, TensorId keep, const std::vector<std::int64_t>& shape, const std::string& what) {
    const TensorId neg = constant(what + "_fill", TensorData::from_double(dt_, {}, {-INFINITY}));
    return emit(what, "Where", {keep, s, neg}, shape);
  }

  const Graph& g_;
  GraphRewrite& rw_;
  OpId o_;
  const Op& op_;
  analysis::AttentionGeometry geo_;
  DType dt_ = DType::f32;
  std::string name_;
};

}  // namespace

SdpaBackend pytorch_sdpa_backend(const Graph& g, const Op& op) {
  const auto a = geometry_of(g, op);
  const DType dt = g.tensors[op.inputs[0]].dtype;
  // How PyTorch eager calls it where the graph's trace differs (memplan_torch.export_graph writes these: under
  // torch.export transformers repeats the kv heads and builds a mask, eager passes enable_gqa and no mask).
  const std::int64_t kv_heads = op.attr_int("pytorch_kv_heads", a.kv_heads);
  const bool half = half_precision(dt), bias = op.attr_int("pytorch_mask", op.input(3) != kNoTensor ? 1 : 0) != 0;
  // flash: 16-bit, no mask, head dim <= 256 (the same for v), grouped-query heads allowed
  if (half && !bias && a.head_dim == a.v_head_dim && a.head_dim <= 256) return SdpaBackend::flash;
  // efficient: fp32 or 16-bit, masks allowed, no grouped-query heads, head dims aligned to 16 bytes
  const std::int64_t align = half ? 8 : 4;
  if ((half || dt == DType::f32) && a.q_heads == kv_heads && a.head_dim % align == 0 && a.v_head_dim % align == 0)
    return SdpaBackend::efficient;
  return SdpaBackend::math;
}

namespace {

// Every FusedAttention `pick` chooses written out as the math backend's ops, except one whose LSE is read or
// whose operands are packed.
template <class Pick>
FusionResult decompose_attention(const Graph& g, Pick pick) {
  GraphRewrite rw(g);
  bool any = false;
  for (OpId o = 0; o < g.ops.size(); ++o) {
    const Op& op = g.ops[o];
    if (!is_fused_attention(op) || op.inputs.size() < 3) continue;
    if (op.outputs.size() > 1 && op.outputs[1] != kNoTensor) continue;  // its LSE is read: it stays one kernel
    const auto a = geometry_of(g, op);
    if (a.packed || !pick(op, a)) continue;
    rw.remove(o);
    MathAttention(g, rw, o).write();
    any = true;
  }
  FusionResult r;
  r.graph = any ? rw.apply() : g;
  return r;
}

}  // namespace

FusionResult decompose_math_attention(const Graph& g, bool every) {
  return decompose_attention(g, [&](const Op& op, const analysis::AttentionGeometry&) {
    return every || pytorch_sdpa_backend(g, op) == SdpaBackend::math;
  });
}

FusionResult decompose_attention_above(const Graph& g, std::int64_t max_head_dim) {
  return decompose_attention(g, [&](const Op&, const analysis::AttentionGeometry& a) {
    return std::max(a.head_dim, a.v_head_dim) > max_head_dim;
  });
}

}  // namespace memplan::planner
