// Generated GPT-style transformers (pre-norm blocks, separate Q/K/V, GELU MLP, optional dropout) with concrete shapes.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "analysis/autodiff.hpp"
#include "analysis/graph.hpp"

namespace memplan::testing {

using analysis::DType;
using analysis::Graph;
using analysis::TensorId;
using analysis::TensorRole;

struct TransformerConfig {
  std::int64_t batch = 2, seq = 16, hidden = 64, heads = 4, layers = 2, ffn = 4;
  DType dtype = DType::f32;
  bool dropout = false;  // attention-probability, attention-output and MLP-output dropout (Megatron's layer)
};

// Megatron-LM's layer: LayerNorm, QKV, softmax(QK^T / sqrt(d)), dropout, PV, out proj, dropout, residual,
// LayerNorm, h -> ffn h, GELU, ffn h -> h, dropout, residual. Weight names "layers.I.*", op names "layers.I/*".
class TransformerMaker {
 public:
  explicit TransformerMaker(const TransformerConfig& c) : c_(c) { g_.name = "gen_transformer"; }

  Graph make() {
    const std::int64_t B = c_.batch, S = c_.seq, h = c_.hidden;
    TensorId x = tensor("x", {B, S, h}, TensorRole::input);
    g_.inputs.push_back(x);
    for (std::int64_t i = 0; i < c_.layers; ++i) x = layer(x, "layers." + std::to_string(i));
    g_.outputs.push_back(x);
    g_.tensors[x].is_graph_output = true;
    return std::move(g_);
  }

 private:
  TensorId tensor(const std::string& name, std::vector<std::int64_t> dims, TensorRole role, DType dt = DType::undefined) {
    analysis::Tensor t;
    t.name = name;
    t.dtype = dt == DType::undefined ? c_.dtype : dt;
    for (auto d : dims) t.dims.push_back(analysis::Dim::of(d));
    t.rank_known = true;
    t.role = role;
    return g_.add_tensor(std::move(t));
  }
  TensorId constant(const std::string& name, std::vector<std::int64_t> dims, const std::vector<double>& v, DType dt) {
    const TensorId t = tensor(name, dims, TensorRole::weight, dt);
    if (dt == DType::i64) {
      std::vector<std::int64_t> iv(v.begin(), v.end());
      g_.tensors[t].data = std::make_shared<analysis::TensorData>(analysis::TensorData::from_int64(dt, dims, iv));
    } else {
      g_.tensors[t].data = std::make_shared<analysis::TensorData>(analysis::TensorData::from_double(dt, dims, v));
    }
    return t;
  }
  std::vector<TensorId> op(const std::string& name, const std::string& type, std::vector<TensorId> in,
                           std::vector<std::pair<std::vector<std::int64_t>, DType>> outs, std::map<std::string, analysis::Attribute> attrs = {}) {
    analysis::Op o;
    o.name = name;
    o.type = type;
    o.inputs = std::move(in);
    for (std::size_t k = 0; k < outs.size(); ++k)
      o.outputs.push_back(tensor(name + ":" + std::to_string(k), outs[k].first, TensorRole::activation, outs[k].second));
    o.attrs = std::move(attrs);
    auto ids = o.outputs;
    g_.add_op(std::move(o));
    return ids;
  }
  TensorId op1(const std::string& name, const std::string& type, std::vector<TensorId> in, std::vector<std::int64_t> dims,
               std::map<std::string, analysis::Attribute> attrs = {}) {
    return op(name, type, std::move(in), {{std::move(dims), c_.dtype}}, std::move(attrs))[0];
  }
  TensorId linear(const std::string& p, TensorId x, std::int64_t in, std::int64_t out) {
    const auto& d = g_.tensors[x].dims;
    std::vector<std::int64_t> od{d[0].value, d[1].value, out};
    const TensorId w = tensor(p + ".weight", {in, out}, TensorRole::weight);
    const TensorId b = tensor(p + ".bias", {out}, TensorRole::weight);
    const TensorId y = op1(p + "/MatMul", "MatMul", {x, w}, od);
    return op1(p + "/Add", "Add", {y, b}, od);
  }
  TensorId norm(const std::string& p, TensorId x) {
    const std::int64_t h = c_.hidden;
    return op1(p + "/LayerNorm", "LayerNormalization", {x, tensor(p + ".weight", {h}, TensorRole::weight), tensor(p + ".bias", {h}, TensorRole::weight)},
               {c_.batch, c_.seq, h}, {{"axis", analysis::autodiff::attr_i(-1)}, {"epsilon", analysis::autodiff::attr_f(1e-5)}});
  }
  TensorId dropout(const std::string& p, TensorId x) {
    if (!c_.dropout) return x;
    std::vector<std::int64_t> dims;
    for (const auto& d : g_.tensors[x].dims) dims.push_back(d.value);
    const TensorId ratio = constant(p + ".ratio", {}, {0.1}, DType::f32);
    const TensorId mode = constant(p + ".training_mode", {}, {1.0}, DType::boolean);
    return op(p + "/Dropout", "Dropout", {x, ratio, mode}, {{dims, c_.dtype}, {dims, DType::boolean}})[0];
  }
  TensorId heads(const std::string& p, TensorId x, std::vector<std::int64_t> perm) {
    const std::int64_t B = c_.batch, S = c_.seq, a = c_.heads, d = c_.hidden / c_.heads;
    const TensorId shape = constant(p + ".shape", {4}, {double(B), double(S), double(a), double(d)}, DType::i64);
    const TensorId r = op1(p + "/Reshape", "Reshape", {x, shape}, {B, S, a, d});
    std::vector<std::int64_t> in{B, S, a, d}, out;
    for (auto k : perm) out.push_back(in[static_cast<std::size_t>(k)]);
    return op1(p + "/Transpose", "Transpose", {r}, out, {{"perm", analysis::autodiff::attr_ints(perm)}});
  }
  TensorId layer(TensorId x, const std::string& p) {
    const std::int64_t B = c_.batch, S = c_.seq, h = c_.hidden, a = c_.heads, d = h / a;
    const TensorId ln1 = norm(p + ".ln_1", x);
    const TensorId q = heads(p + "/q", linear(p + ".attn.q", ln1, h, h), {0, 2, 1, 3});
    const TensorId k = heads(p + "/k", linear(p + ".attn.k", ln1, h, h), {0, 2, 3, 1});
    const TensorId v = heads(p + "/v", linear(p + ".attn.v", ln1, h, h), {0, 2, 1, 3});
    const TensorId scores = op1(p + "/attn/QK", "MatMul", {q, k}, {B, a, S, S});
    const TensorId scale = constant(p + ".attn.scale", {}, {1.0 / std::sqrt(double(d))}, c_.dtype);
    const TensorId scaled = op1(p + "/attn/Scale", "Mul", {scores, scale}, {B, a, S, S});
    const TensorId probs = dropout(p + "/attn/probs", op1(p + "/attn/Softmax", "Softmax", {scaled}, {B, a, S, S}, {{"axis", analysis::autodiff::attr_i(-1)}}));
    const TensorId ctx = op1(p + "/attn/PV", "MatMul", {probs, v}, {B, a, S, d});
    const TensorId ctx_t = op1(p + "/attn/ctx/Transpose", "Transpose", {ctx}, {B, S, a, d}, {{"perm", analysis::autodiff::attr_ints({0, 2, 1, 3})}});
    const TensorId shape = constant(p + ".ctx.shape", {3}, {double(B), double(S), double(h)}, DType::i64);
    const TensorId ctx_r = op1(p + "/attn/ctx/Reshape", "Reshape", {ctx_t, shape}, {B, S, h});
    const TensorId attn = dropout(p + "/attn/out", linear(p + ".attn.o", ctx_r, h, h));
    const TensorId x2 = op1(p + "/residual1", "Add", {x, attn}, {B, S, h});
    const TensorId ln2 = norm(p + ".ln_2", x2);
    const TensorId up = linear(p + ".mlp.up", ln2, h, c_.ffn * h);
    const TensorId act = op1(p + "/mlp/Gelu", "Gelu", {up}, {B, S, c_.ffn * h});
    const TensorId down = dropout(p + "/mlp/out", linear(p + ".mlp.down", act, c_.ffn * h, h));
    return op1(p + "/residual2", "Add", {x2, down}, {B, S, h});
  }

  TransformerConfig c_;
  Graph g_;
};

inline Graph make_transformer(const TransformerConfig& c) { return TransformerMaker(c).make(); }

}  // namespace memplan::testing
