// Random synthetic DAGs for planner tests and benchmarks: views, in-place candidates, fan-out, skips.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "analysis/graph.hpp"

namespace memplan::synthetic {

using analysis::DType;
using analysis::Graph;
using analysis::TensorId;
using analysis::TensorRole;

struct GraphOptions {
  std::size_t ops = 100;
  std::uint32_t seed = 1;
  std::uint32_t window = 6;          // most reads come from the last `window` activations
  std::uint32_t max_skip = 48;       // a long skip reads up to this far back
  double skip_rate = 0.08;
  double view_rate = 0.15;           // Reshape / Identity / Flatten / Squeeze
  double unary_rate = 0.25;          // Relu, Sigmoid, Tanh, Cast, Dropout, BatchNormalization
  double binary_rate = 0.2;          // Add, Mul, Sub (either input may be the one overwritten)
  double output_rate = 0.01;         // extra graph outputs
  std::int64_t max_elements = 4096;  // per tensor, drawn log-uniformly
};

class GraphMaker {
 public:
  explicit GraphMaker(const GraphOptions& o) : o_(o), rng_(o.seed) {
    g_.name = "synthetic_" + std::to_string(o.ops) + "_" + std::to_string(o.seed);
    for (int i = 0; i < 2; ++i) {
      inputs_.push_back(tensor("input" + std::to_string(i), DType::f32, elements(), TensorRole::input));
      g_.inputs.push_back(inputs_.back());
    }
  }

  Graph make() {
    for (std::size_t i = 0; i < o_.ops; ++i) step(i);
    if (!acts_.empty() && !g_.tensors[acts_.back()].is_graph_output) {
      g_.tensors[acts_.back()].is_graph_output = true;
      g_.outputs.push_back(acts_.back());
    }
    return std::move(g_);
  }

 private:
  double uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }
  std::uint32_t below(std::uint32_t n) { return n == 0 ? 0 : static_cast<std::uint32_t>(rng_() % n); }
  std::int64_t elements() {
    const double e = std::exp(uniform() * std::log(static_cast<double>(o_.max_elements)));
    return std::max<std::int64_t>(1, static_cast<std::int64_t>(e));
  }
  std::int64_t count(TensorId t) const { return g_.tensors[t].dims.empty() ? 1 : g_.tensors[t].dims[0].value; }

  TensorId tensor(const std::string& name, DType dt, std::int64_t n, TensorRole role = TensorRole::activation) {
    analysis::Tensor t;
    t.name = name;
    t.dtype = dt;
    t.dims = {analysis::Dim::of(n)};
    t.rank_known = true;
    t.role = role;
    return g_.add_tensor(t);
  }

  // An earlier activation: usually a recent one, sometimes a long skip, rarely a graph input.
  TensorId pick() {
    if (acts_.empty() || uniform() < 0.02) return inputs_[below(static_cast<std::uint32_t>(inputs_.size()))];
    const auto n = static_cast<std::uint32_t>(acts_.size());
    const std::uint32_t reach = uniform() < o_.skip_rate ? o_.max_skip : o_.window;
    return acts_[n - 1 - below(std::min(n, reach))];
  }

  TensorId out(std::size_t i, std::size_t k, DType dt, std::int64_t n) {
    const TensorId t = tensor("t" + std::to_string(i) + "_" + std::to_string(k), dt, n);
    acts_.push_back(t);
    if (uniform() < o_.output_rate) {
      g_.tensors[t].is_graph_output = true;
      g_.outputs.push_back(t);
    }
    return t;
  }

  TensorId weight(std::size_t i, std::int64_t n) { return tensor("w" + std::to_string(i), DType::f32, n, TensorRole::weight); }

  void step(std::size_t i) {
    analysis::Op op;
    op.name = "op" + std::to_string(i);
    const TensorId a = pick();
    const DType dt = g_.tensors[a].dtype;
    const double r = uniform();
    double edge = o_.view_rate;
    if (r < edge) {
      static const char* kViews[] = {"Reshape", "Identity", "Flatten", "Squeeze"};
      op.type = kViews[below(4)];
      op.inputs = {a};
      op.outputs = {out(i, 0, dt, count(a))};
    } else if (r < (edge += o_.unary_rate)) {
      static const char* kUnary[] = {"Relu", "Sigmoid", "Tanh", "Cast", "Dropout", "BatchNormalization"};
      op.type = kUnary[below(6)];
      op.inputs = {a};
      DType odt = dt;
      if (op.type == "Cast") odt = uniform() < 0.5 ? DType::f16 : (dt == DType::f32 ? DType::i32 : DType::f32);
      if (op.type == "BatchNormalization")
        for (int k = 0; k < 4; ++k) op.inputs.push_back(weight(i * 8 + static_cast<std::size_t>(k), 16));
      op.outputs = {out(i, 0, odt, count(a))};
      if (op.type == "Dropout" && uniform() < 0.5) op.outputs.push_back(out(i, 1, DType::boolean, count(a)));
    } else if (r < (edge += o_.binary_rate)) {
      static const char* kBinary[] = {"Add", "Mul", "Sub"};
      op.type = kBinary[below(3)];
      const TensorId b = uniform() < 0.2 ? weight(i * 8, count(a)) : pick();
      op.inputs = {a, b};
      const TensorId sized = uniform() < 0.7 ? a : b;  // the output takes one input's size
      op.outputs = {out(i, 0, g_.tensors[sized].dtype, count(sized))};
    } else {
      static const char* kOther[] = {"Conv", "MatMul", "Concat", "Split"};
      op.type = kOther[below(4)];
      op.inputs = {a};
      if (op.type != "Split" && uniform() < 0.5) op.inputs.push_back(pick());
      if (op.type == "Conv") op.inputs.push_back(weight(i * 8, 64));
      op.outputs = {out(i, 0, DType::f32, elements())};
      if (op.type == "Split") op.outputs.push_back(out(i, 1, DType::f32, elements()));
    }
    g_.add_op(std::move(op));
  }

  GraphOptions o_;
  std::mt19937 rng_;
  Graph g_;
  std::vector<TensorId> inputs_, acts_;
};

inline Graph random_graph(const GraphOptions& o) { return GraphMaker(o).make(); }

}  // namespace memplan::synthetic
