// Attention fusion: scaled-dot-product attention subgraphs and ONNX Attention -> memplan FusedAttention.
#include <algorithm>
#include <map>
#include <set>

#include "analysis/autodiff.hpp"
#include "analysis/ops.hpp"
#include "planner/fusion.hpp"
#include "planner/fusion_attention.hpp"
#include "planner/graph_rewrite.hpp"

namespace memplan::planner {

using analysis::Attribute;
using analysis::DType;
using analysis::Graph;
using analysis::HeadLayout;
using analysis::kNoOp;
using analysis::kNoTensor;
using analysis::Op;
using analysis::OpId;
using analysis::Tensor;
using analysis::TensorId;
using analysis::autodiff::attr_f;
using analysis::autodiff::attr_i;
using analysis::autodiff::attr_ints;
using analysis::autodiff::attr_s;

namespace {

TensorId activation(GraphRewrite& rw, const std::string& base, DType dt, const std::vector<std::int64_t>& shape) {
  return new_activation(rw, base, dt, shape);
}

// A new int64 constant (a shape operand).
TensorId shape_constant(GraphRewrite& rw, const std::string& base, const std::vector<std::int64_t>& values) {
  return new_constant(rw, base, analysis::TensorData::from_int64(DType::i64, {static_cast<std::int64_t>(values.size())}, values));
}

std::vector<std::int64_t> broadcast_shape(std::vector<std::int64_t> a, std::vector<std::int64_t> b) {
  if (a.size() < b.size()) std::swap(a, b);
  for (std::size_t i = 0; i < b.size(); ++i) {
    auto& x = a[a.size() - 1 - i];
    x = std::max(x, b[b.size() - 1 - i]);
  }
  return a;
}

Op new_op(std::string name, std::string type, std::vector<TensorId> in, std::vector<TensorId> out) {
  Op o;
  o.name = std::move(name);
  o.type = std::move(type);
  o.inputs = std::move(in);
  o.outputs = std::move(out);
  return o;
}

class Rewriter {
 public:
  explicit Rewriter(const Graph& g) : g_(g), rw_(g) {}

  // Replaces one matched subgraph; returns its group (op id filled in after apply()).
  FusedGroup fuse(const AttentionMatch& m) {
    const Op& sm = g_.ops[m.softmax];
    const std::string name = sm.name + "/attention";
    for (OpId o : m.members) rw_.remove(o);
    Op f =
        new_op(name, std::string(analysis::memplan_ops::kFusedAttention), {m.q.tensor, k_input(m, name), m.v.tensor}, {m.output});
    f.domain = std::string(analysis::kMemplanDomain);
    f.phase = sm.phase;
    if (const TensorId b = bias_input(m, name); b != kNoTensor) f.inputs.push_back(b);
    f.attrs["scale"] = attr_f(m.scale);
    if (m.causal) f.attrs["causal"] = attr_i(1);
    if (m.dropout_ratio > 0.0) {
      f.attrs["dropout_ratio"] = attr_f(m.dropout_ratio);
      f.attrs["seed"] = attr_i(m.seed);
    }
    f.attrs["q_layout"] = attr_s(analysis::head_layout_name(m.q.layout));
    f.attrs["k_layout"] = attr_s(analysis::head_layout_name(m.k.layout));
    f.attrs["v_layout"] = attr_s(analysis::head_layout_name(m.v.layout));
    f.attrs["o_layout"] = attr_s(analysis::head_layout_name(m.o_layout));
    FusedGroup grp;
    grp.kind = "attention";
    const TensorId kept = m.reshaped_bias_add != kNoOp ? g_.ops[m.reshaped_bias_add].output(0) : kNoTensor;
    for (OpId o : m.members) {
      grp.members.push_back(g_.ops[o].name);
      for (TensorId t : g_.ops[o].outputs)
        if (t != kNoTensor && t != m.output && t != kept)
          grp.intermediate_bytes = checked_add(grp.intermediate_bytes, g_.tensors[t].bytes(), "fused intermediates");
    }
    set_fused_ops(f, grp.members);
    rw_.add(std::move(f), m.output_op);
    return grp;
  }

  FusionResult finish(std::vector<FusedGroup> groups) {
    FusionResult r;
    r.graph = rw_.apply();
    for (std::size_t i = 0; i < groups.size(); ++i) {
      groups[i].op = find_fused_op(r.graph, groups[i].members);
      r.intermediate_bytes_removed =
          checked_add(r.intermediate_bytes_removed, groups[i].intermediate_bytes, "fused intermediates");
    }
    r.groups = std::move(groups);
    return r;
  }

 private:
  // K in its layout; a K^T with no transposing op to look through is transposed back by a new op.
  TensorId k_input(const AttentionMatch& m, const std::string& name) {
    if (m.k_transposed == kNoTensor) return m.k.tensor;
    auto s = g_.tensors[m.k_transposed].shape();
    std::swap(s[2], s[3]);
    const TensorId k = activation(rw_, name + "/K", DType::f32, s);
    Op t = new_op(name + "/k_transpose", "Transpose", {m.k_transposed}, {k});
    t.attrs["perm"] = attr_ints({0, 1, 3, 2});
    rw_.add(std::move(t), m.scores);
    return k;
  }

  // The one bias input: a mask, a bias, or the sum of several (one Add per distinct list, shared by the
  // layers that add the same tensors, as T5's position bias plus padding mask).
  TensorId bias_input(const AttentionMatch& m, const std::string& name) {
    if (m.bool_mask != kNoTensor) return m.bool_mask;
    if (m.reshaped_bias_add != kNoOp) {
      const Op& add = g_.ops[m.reshaped_bias_add];
      const TensorId out = add.output(0);
      const TensorId shape = shape_constant(rw_, name + "/bias_shape", g_.tensors[out].shape());
      rw_.add(new_op(name + "/bias_expand", "Expand", {m.reshaped_bias_source, shape}, {out}), m.reshaped_bias_add);
    }
    if (m.biases.size() <= 1) return m.biases.empty() ? kNoTensor : m.biases[0];
    if (auto it = sums_.find(m.biases); it != sums_.end()) return it->second;
    TensorId acc = m.biases[0];
    for (std::size_t i = 1; i < m.biases.size(); ++i) {
      const auto s = broadcast_shape(rw_.tensor(acc).shape(), g_.tensors[m.biases[i]].shape());
      const TensorId sum = activation(rw_, name + "/bias", DType::f32, s);
      rw_.add(new_op(name + "/bias_add" + (i > 1 ? std::to_string(i) : ""), "Add", {acc, m.biases[i]}, {sum}), m.scores);
      acc = sum;
    }
    sums_.emplace(m.biases, acc);
    return acc;
  }

  const Graph& g_;
  GraphRewrite rw_;
  std::map<std::vector<TensorId>, TensorId> sums_;
};

}  // namespace

FusionResult fuse_attention(const Graph& g, bool sdpa_form_only) {
  Rewriter rw(g);
  std::vector<FusedGroup> groups;
  std::set<OpId> claimed;
  for (OpId o = 0; o < g.ops.size(); ++o) {
    const Op& op = g.ops[o];
    if (!op.domain.empty() || (op.type != "Softmax" && op.type != "Attention")) continue;
    auto r = op.type == "Softmax" ? match_attention(g, o) : match_onnx_attention(g, o);
    if (!r.match || (sdpa_form_only && !r.match->sdpa_form)) continue;
    const auto& m = *r.match;
    if (std::any_of(m.members.begin(), m.members.end(), [&](OpId x) { return claimed.count(x) > 0; })) continue;
    claimed.insert(m.members.begin(), m.members.end());
    groups.push_back(rw.fuse(m));
  }
  return rw.finish(std::move(groups));
}

}  // namespace memplan::planner
