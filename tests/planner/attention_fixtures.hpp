// Attention test fixtures: a graph builder, and a tiny double-precision interpreter of the ONNX ops attention
// graphs use and of FusedAttention straight from its definition (analysis/fused_ops.hpp), to compare graphs
// before and after fusion.
#pragma once

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "analysis/autodiff.hpp"
#include "analysis/fused_ops.hpp"
#include "analysis/graph.hpp"
#include "analysis/ops.hpp"

namespace attention_fixtures {

using namespace memplan::analysis;
using Shape = std::vector<std::int64_t>;
using Values = std::vector<double>;

// Hand-built graphs with concrete shapes.
struct Builder {
  Graph g;
  Builder() { g.opset = 17; }

  TensorId tensor(const std::string& name, const Shape& shape, DType dt = DType::f32, TensorRole role = TensorRole::activation) {
    Tensor t;
    t.name = name;
    t.dtype = dt;
    t.rank_known = true;
    for (auto d : shape) t.dims.push_back(Dim::of(d));
    t.role = role;
    return g.add_tensor(std::move(t));
  }
  TensorId input(const std::string& name, const Shape& shape) {
    const TensorId t = tensor(name, shape, DType::f32, TensorRole::input);
    g.inputs.push_back(t);
    return t;
  }
  TensorId constant(const std::string& name, const Shape& shape, const std::vector<double>& v, DType dt = DType::f32) {
    const TensorId t = tensor(name, shape, dt, TensorRole::weight);
    g.tensors[t].data = std::make_shared<TensorData>(TensorData::from_double(dt, shape, v));
    return t;
  }
  TensorId op(const std::string& type, std::vector<TensorId> ins, const Shape& out, std::map<std::string, Attribute> attrs = {},
              DType dt = DType::f32) {
    const TensorId o = tensor(type + "_" + std::to_string(g.ops.size()), out, dt);
    Op x;
    x.name = "op" + std::to_string(g.ops.size()) + "_" + type;
    x.type = type;
    x.inputs = std::move(ins);
    x.outputs = {o};
    x.attrs = std::move(attrs);
    g.add_op(std::move(x));
    return o;
  }
  void output(TensorId t) {
    g.outputs.push_back(t);
    g.tensors[t].is_graph_output = true;
  }
};

// Attribute constructors (the training builder's).
inline Attribute ints(Shape v) { return autodiff::attr_ints(std::move(v)); }
inline Attribute integer(std::int64_t v) { return autodiff::attr_i(v); }

inline std::int64_t numel(const Shape& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

// The element of `v` (shape `from`) that broadcasts to flat index `i` of shape `to`.
inline std::int64_t broadcast_index(std::int64_t i, const Shape& from, const Shape& to) {
  std::int64_t src = 0, stride = 1;
  for (std::size_t k = 0; k < to.size(); ++k) {
    const std::size_t a = to.size() - 1 - k;
    const std::int64_t coord = i % to[a];
    i /= to[a];
    if (k < from.size()) {
      const std::int64_t f = from[from.size() - 1 - k];
      src += (f == 1 ? 0 : coord) * stride;
      stride *= f;
    }
  }
  return src;
}

inline Values expand(const Values& v, const Shape& from, const Shape& to) {
  Values out(static_cast<std::size_t>(numel(to)));
  for (std::int64_t i = 0; i < numel(to); ++i) out[i] = v[broadcast_index(i, from, to)];
  return out;
}

inline Values transpose(const Values& v, const Shape& s, const std::vector<std::int64_t>& perm) {
  Shape os;
  for (auto p : perm) os.push_back(s[p]);
  Values out(v.size());
  std::vector<std::int64_t> in_stride(s.size(), 1);
  for (std::size_t k = s.size(); k-- > 1;) in_stride[k - 1] = in_stride[k] * s[k];
  for (std::int64_t i = 0; i < numel(os); ++i) {
    std::int64_t rem = i, src = 0;
    for (std::size_t k = os.size(); k-- > 0;) {
      src += (rem % os[k]) * in_stride[perm[k]];
      rem /= os[k];
    }
    out[i] = v[src];
  }
  return out;
}

// softmax(scale Q K^T + bias) V by the fused op's definition (no dropout).
inline Values fused_attention(const Op& op, const Graph& g, const std::vector<Values>& in) {
  const auto a =
      attention_geometry(op, g.tensors[op.input(0)].shape(), g.tensors[op.input(1)].shape(), g.tensors[op.input(2)].shape());
  const Shape scores{a.batch, a.q_heads, a.q_len, a.kv_len};
  Values bias(static_cast<std::size_t>(numel(scores)), 0.0);
  if (op.input(3) != kNoTensor) {
    const auto& t = g.tensors[op.input(3)];
    bias = expand(in[3], t.shape(), scores);
    if (t.dtype == DType::boolean)
      for (auto& x : bias) x = x != 0.0 ? 0.0 : -std::numeric_limits<double>::infinity();
  }
  Values o(static_cast<std::size_t>(a.batch * a.q_heads * a.q_len * a.v_head_dim), 0.0);
  for (std::int64_t b = 0; b < a.batch; ++b)
    for (std::int64_t h = 0; h < a.q_heads; ++h) {
      const std::int64_t kh = h / a.group();
      for (std::int64_t i = 0; i < a.q_len; ++i) {
        std::vector<double> s(static_cast<std::size_t>(a.kv_len));
        double mx = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j < a.kv_len; ++j) {
          double dot = 0.0;
          for (std::int64_t d = 0; d < a.head_dim; ++d)
            dot += in[0][b * a.q.batch + h * a.q.head + i * a.q.row + d] * in[1][b * a.k.batch + kh * a.k.head + j * a.k.row + d];
          s[j] = a.scale * dot + bias[((b * a.q_heads + h) * a.q_len + i) * a.kv_len + j];
          if (a.causal && j > i) s[j] = -std::numeric_limits<double>::infinity();
          mx = std::max(mx, s[j]);
        }
        double sum = 0.0;
        for (auto& x : s) sum += (x = std::exp(x - mx));
        for (std::int64_t d = 0; d < a.v_head_dim; ++d) {
          double acc = 0.0;
          for (std::int64_t j = 0; j < a.kv_len; ++j) acc += s[j] / sum * in[2][b * a.v.batch + kh * a.v.head + j * a.v.row + d];
          o[b * a.o.batch + h * a.o.head + i * a.o.row + d] = acc;
        }
      }
    }
  return o;
}

// Runs `g` (ops in order) on `inputs` (by tensor name); returns every tensor's values by name.
inline std::map<std::string, Values> run(const Graph& g, const std::map<std::string, Values>& inputs) {
  std::vector<Values> val(g.tensors.size());
  for (TensorId t = 0; t < g.tensors.size(); ++t) {
    if (g.tensors[t].data) val[t] = g.tensors[t].data->as_double();
    if (auto it = inputs.find(g.tensors[t].name); it != inputs.end()) val[t] = it->second;
  }
  for (const Op& op : g.ops) {
    std::vector<Values> in;
    for (TensorId t : op.inputs) in.push_back(t == kNoTensor ? Values{} : val[t]);
    auto sh = [&](std::size_t i) { return g.tensors[op.inputs[i]].shape(); };
    const Shape out = g.tensors[op.output(0)].shape();
    Values& y = val[op.output(0)];
    y.assign(static_cast<std::size_t>(numel(out)), 0.0);
    const std::string& t = op.type;
    if (op.type == memplan_ops::kFusedAttention) {
      y = fused_attention(op, g, in);
    } else if (t == "Add" || t == "Mul" || t == "Div" || t == "Where") {
      for (std::int64_t i = 0; i < numel(out); ++i) {
        const double a = in[0][broadcast_index(i, sh(0), out)], b = in[1][broadcast_index(i, sh(1), out)];
        if (t == "Where")
          y[i] = a != 0.0 ? b : in[2][broadcast_index(i, sh(2), out)];
        else
          y[i] = t == "Add" ? a + b : t == "Mul" ? a * b : a / b;
      }
    } else if (t == "Reshape" || t == "Unsqueeze" || t == "Cast" || t == "Dropout") {
      y = in[0];
    } else if (t == "Expand") {
      y = expand(in[0], sh(0), out);
    } else if (t == "ConstantOfShape") {
      const Attribute* v = op.attr("value");
      y.assign(y.size(), v && v->t ? v->t->as_double().at(0) : 0.0);
    } else if (t == "Trilu") {  // lower triangle, diagonal 0 (upper = 0, no k)
      const std::int64_t r = out[out.size() - 2], c = out.back();
      for (std::int64_t i = 0; i < numel(out); ++i) y[i] = (i % c) <= (i / c) % r ? in[0][i] : 0.0;
    } else if (t == "Transpose") {
      y = transpose(in[0], sh(0), op.attr_ints("perm"));
    } else if (t == "Softmax") {
      const std::int64_t n = out.back();
      for (std::int64_t r = 0; r < numel(out) / n; ++r) {
        double mx = -std::numeric_limits<double>::infinity(), sum = 0.0;
        for (std::int64_t j = 0; j < n; ++j) mx = std::max(mx, in[0][r * n + j]);
        for (std::int64_t j = 0; j < n; ++j) sum += (y[r * n + j] = std::exp(in[0][r * n + j] - mx));
        for (std::int64_t j = 0; j < n; ++j) y[r * n + j] /= sum;
      }
    } else if (t == "MatMul") {
      const Shape a = sh(0), b = sh(1);
      const std::int64_t m = a[a.size() - 2], k = a.back(), n = b.back();
      const Shape batch(out.begin(), out.end() - 2);
      Shape ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
      for (std::int64_t p = 0; p < numel(batch); ++p) {
        const std::int64_t pa = broadcast_index(p, ab, batch), pb = broadcast_index(p, bb, batch);
        for (std::int64_t i = 0; i < m; ++i)
          for (std::int64_t j = 0; j < n; ++j) {
            double acc = 0.0;
            for (std::int64_t q = 0; q < k; ++q) acc += in[0][(pa * m + i) * k + q] * in[1][(pb * k + q) * n + j];
            y[(p * m + i) * n + j] = acc;
          }
      }
    } else {
      throw std::runtime_error("attention_fixtures: no evaluator for " + t);
    }
  }
  std::map<std::string, Values> by_name;
  for (TensorId t = 0; t < g.tensors.size(); ++t) by_name[g.tensors[t].name] = val[t];
  return by_name;
}

}  // namespace attention_fixtures
