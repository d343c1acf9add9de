// Hand-built shaped graphs for the training-graph tests.
#pragma once

#include <string>
#include <vector>

#include "analysis/graph.hpp"

namespace memplan::analysis::testing {

// Adds tensors with concrete shapes and ops in order; outputs are created with the given shapes.
struct GraphBuilder {
  Graph g;
  TensorId tensor(const std::string& name, std::vector<std::int64_t> dims, TensorRole role, DType dt = DType::f32) {
    Tensor t;
    t.name = name;
    t.dtype = dt;
    for (auto d : dims) t.dims.push_back(Dim::of(d));
    t.rank_known = true;
    t.role = role;
    TensorId id = g.add_tensor(std::move(t));
    if (role == TensorRole::input) g.inputs.push_back(id);
    return id;
  }
  TensorId input(const std::string& n, std::vector<std::int64_t> d, DType dt = DType::f32) { return tensor(n, d, TensorRole::input, dt); }
  TensorId weight(const std::string& n, std::vector<std::int64_t> d, DType dt = DType::f32) { return tensor(n, d, TensorRole::weight, dt); }
  // A constant with its value in the graph (never trainable unless in a parameter slot).
  TensorId constant(const std::string& n, std::vector<std::int64_t> d, const std::vector<double>& v, DType dt = DType::f32) {
    TensorId id = tensor(n, d, TensorRole::weight, dt);
    g.tensors[id].data = std::make_shared<TensorData>(TensorData::from_double(dt, d, v));
    return id;
  }
  std::vector<TensorId> op(const std::string& type, std::vector<TensorId> ins,
                           std::vector<std::pair<std::string, std::vector<std::int64_t>>> outs,
                           std::map<std::string, Attribute> attrs = {}, DType out_dtype = DType::f32) {
    Op o;
    o.name = type + std::to_string(g.ops.size());
    o.type = type;
    o.inputs = std::move(ins);
    std::vector<TensorId> ids;
    for (auto& [n, d] : outs) {
      ids.push_back(n.empty() ? kNoTensor : tensor(n, d, TensorRole::activation, out_dtype));
    }
    o.outputs = ids;
    o.attrs = std::move(attrs);
    g.add_op(std::move(o));
    return ids;
  }
  TensorId op1(const std::string& type, std::vector<TensorId> ins, const std::string& out, std::vector<std::int64_t> d,
               std::map<std::string, Attribute> attrs = {}, DType out_dtype = DType::f32) {
    return op(type, std::move(ins), {{out, d}}, std::move(attrs), out_dtype)[0];
  }
  void output(TensorId t) {
    g.outputs.push_back(t);
    g.tensors[t].is_graph_output = true;
  }
};

// relu(x * w1) * w2 with x and w1 of shape `x`, w2 of shape `w2` (broadcast): two trained weights, no constants.
inline Graph two_weight_model(const std::vector<std::int64_t>& x, const std::vector<std::int64_t>& w2) {
  GraphBuilder b;
  auto in = b.input("x", x);
  auto a = b.op1("Mul", {in, b.weight("w1", x)}, "a", x);
  auto w = b.weight("w2", w2);
  b.output(b.op1("Mul", {b.op1("Relu", {a}, "r", x), w}, "y", x));
  return b.g;
}

inline Attribute ai(std::int64_t v) {
  Attribute a;
  a.kind = Attribute::Kind::i;
  a.i = v;
  return a;
}
inline Attribute aints(std::vector<std::int64_t> v) {
  Attribute a;
  a.kind = Attribute::Kind::ints;
  a.ints = std::move(v);
  return a;
}
inline Attribute af(double v) {
  Attribute a;
  a.kind = Attribute::Kind::f;
  a.f = v;
  return a;
}

}  // namespace memplan::analysis::testing
