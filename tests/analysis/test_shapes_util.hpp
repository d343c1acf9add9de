// Helpers for the shape-inference tests: build small graphs by hand and read back inferred shapes.
#pragma once

#include <doctest/doctest.h>

#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "analysis/shapes.hpp"

namespace shapes_test {

using namespace memplan;
using namespace memplan::analysis;
using Shape = std::vector<std::int64_t>;

inline ErrorKind kind_of(const std::function<void()>& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (message) *message = e.what();
    return e.kind();
  }
  FAIL("no error was thrown");
  return ErrorKind::runtime;
}

// A graph under construction; tensors are named, ops refer to them by name ("" = omitted).
struct Builder {
  Graph g;
  int next = 0;

  TensorId input(const std::string& name, DType t, std::vector<Dim> dims) {
    Tensor x;
    x.name = name;
    x.dtype = t;
    x.role = TensorRole::input;
    x.rank_known = true;
    x.dims = std::move(dims);
    TensorId id = g.add_tensor(std::move(x));
    g.inputs.push_back(id);
    return id;
  }
  TensorId input(const std::string& name, DType t, const Shape& s) {
    std::vector<Dim> d;
    for (auto v : s) d.push_back(Dim::of(v));
    return input(name, t, d);
  }
  // A weight with dims only (like external data) or with a value.
  TensorId weight(const std::string& name, DType t, const Shape& s) {
    Tensor x;
    x.name = name;
    x.dtype = t;
    x.role = TensorRole::weight;
    x.rank_known = true;
    for (auto v : s) x.dims.push_back(Dim::of(v));
    return g.add_tensor(std::move(x));
  }
  TensorId ints(const std::string& name, const std::vector<std::int64_t>& v, Shape dims = {-1}) {
    if (dims == Shape{-1}) dims = {static_cast<std::int64_t>(v.size())};
    TensorId id = weight(name, DType::i64, dims);
    g.tensors[id].data = std::make_shared<TensorData>(TensorData::from_int64(DType::i64, dims, v));
    return id;
  }
  TensorId floats(const std::string& name, const std::vector<double>& v, Shape dims = {-1}) {
    if (dims == Shape{-1}) dims = {static_cast<std::int64_t>(v.size())};
    TensorId id = weight(name, DType::f32, dims);
    g.tensors[id].data = std::make_shared<TensorData>(TensorData::from_double(DType::f32, dims, v));
    return id;
  }
  // Adds an op; outputs are created as activations when new.
  Op& op(const std::string& type, const std::vector<std::string>& ins, const std::vector<std::string>& outs,
         std::map<std::string, Attribute> attrs = {}) {
    Op o;
    o.type = type;
    o.name = type + "_" + std::to_string(next++);
    for (const auto& n : ins) o.inputs.push_back(n.empty() ? kNoTensor : g.at(n));
    for (const auto& n : outs) {
      if (n.empty()) {
        o.outputs.push_back(kNoTensor);
        continue;
      }
      TensorId t = g.find(n);
      if (t == kNoTensor) {
        Tensor x;
        x.name = n;
        t = g.add_tensor(std::move(x));
      }
      o.outputs.push_back(t);
    }
    o.attrs = std::move(attrs);
    return g.ops[g.add_op(std::move(o))];
  }
  void output(const std::string& name) {
    g.outputs.push_back(g.at(name));
    g.tensors[g.at(name)].is_graph_output = true;
  }
};

inline Attribute ai(std::int64_t v) {
  Attribute a;
  a.kind = Attribute::Kind::i;
  a.i = v;
  return a;
}
inline Attribute ais(std::vector<std::int64_t> v) {
  Attribute a;
  a.kind = Attribute::Kind::ints;
  a.ints = std::move(v);
  return a;
}
inline Attribute as(std::string v) {
  Attribute a;
  a.kind = Attribute::Kind::s;
  a.s = std::move(v);
  return a;
}

inline Shape shape_of(const Graph& g, const std::string& name) { return g.tensors[g.at(name)].shape(); }
inline DType dtype_of(const Graph& g, const std::string& name) { return g.tensors[g.at(name)].dtype; }

}  // namespace shapes_test
