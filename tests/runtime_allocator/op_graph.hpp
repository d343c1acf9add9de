// Small hand-built graphs of one or a few ops with their feeds, shared by the
// CPU and GPU kernel tests.
#pragma once

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "analysis/graph.hpp"
#include "analysis/shapes.hpp"

namespace memplan::runtime::testing {

struct OpGraph {
  analysis::Graph g;
  std::vector<analysis::TensorData> feeds;  // one per graph input, in g.inputs order

  analysis::TensorId tensor(const std::string &name, analysis::DType dtype, const std::vector<std::int64_t> &dims,
                            analysis::TensorRole role) {
    analysis::Tensor t;
    t.name = name;
    t.dtype = dtype;
    t.rank_known = true;
    for (auto d : dims) t.dims.push_back(analysis::Dim::of(d));
    t.role = role;
    return g.add_tensor(std::move(t));
  }
  // A graph input fed with `value`.
  analysis::TensorId input(const std::string &name, const analysis::TensorData &value) {
    const auto t = tensor(name, value.dtype, value.dims, analysis::TensorRole::input);
    g.inputs.push_back(t);
    feeds.push_back(value);
    return t;
  }
  // A constant (weight with its value in the graph).
  analysis::TensorId constant(const std::string &name, const analysis::TensorData &value) {
    const auto t = tensor(name, value.dtype, value.dims, analysis::TensorRole::weight);
    g.tensors[t].data = std::make_shared<analysis::TensorData>(value);
    return t;
  }
  // An op result, made a graph output so both executors keep it.
  analysis::TensorId result(const std::string &name, analysis::DType dtype, const std::vector<std::int64_t> &dims) {
    const auto t = tensor(name, dtype, dims, analysis::TensorRole::activation);
    g.outputs.push_back(t);
    g.tensors[t].is_graph_output = true;
    return t;
  }
  void op(const std::string &type, const std::string &domain, std::vector<analysis::TensorId> in,
          std::vector<analysis::TensorId> out, std::map<std::string, analysis::Attribute> attrs = {}) {
    analysis::Op o;
    o.name = type + "_" + std::to_string(g.ops.size());
    o.type = type;
    o.domain = domain;
    o.inputs = std::move(in);
    o.outputs = std::move(out);
    o.attrs = std::move(attrs);
    if (domain == "memplan") o.phase = analysis::Phase::backward;
    g.add_op(std::move(o));
  }
};

// The graph with its shapes inferred (no symbolic dims to bind).
inline OpGraph shaped(OpGraph b) {
  b.g = analysis::infer_shapes(b.g, {});
  return b;
}

inline analysis::Attribute int_attr(std::int64_t v) {
  analysis::Attribute a;
  a.kind = analysis::Attribute::Kind::i;
  a.i = v;
  return a;
}
inline analysis::Attribute float_attr(double v) {
  analysis::Attribute a;
  a.kind = analysis::Attribute::Kind::f;
  a.f = v;
  return a;
}
inline analysis::Attribute ints_attr(std::vector<std::int64_t> v) {
  analysis::Attribute a;
  a.kind = analysis::Attribute::Kind::ints;
  a.ints = std::move(v);
  return a;
}
inline analysis::Attribute string_attr(std::string v) {
  analysis::Attribute a;
  a.kind = analysis::Attribute::Kind::s;
  a.s = std::move(v);
  return a;
}

inline analysis::TensorData random_f32(const std::vector<std::int64_t> &dims, std::mt19937 &rng, double lo = -1.0,
                                       double hi = 1.0) {
  std::size_t n = 1;
  for (auto d : dims) n *= static_cast<std::size_t>(d);
  std::vector<double> v(n);
  std::uniform_real_distribution<double> u(lo, hi);
  for (auto &x : v) x = u(rng);
  return analysis::TensorData::from_double(analysis::DType::f32, dims, v);
}

inline analysis::TensorData ints(analysis::DType dtype, const std::vector<std::int64_t> &dims,
                                 const std::vector<std::int64_t> &v) {
  return analysis::TensorData::from_int64(dtype, dims, v);
}

inline std::vector<float> as_floats(const std::byte *p, std::size_t bytes) {
  std::vector<float> f(bytes / sizeof(float));
  std::memcpy(f.data(), p, f.size() * sizeof(float));
  return f;
}

}  // namespace memplan::runtime::testing
