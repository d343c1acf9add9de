// Random hand-built training graphs for the remat tests: a forward DAG with skips, its backward mirror.
#pragma once

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "analysis/graph.hpp"

namespace memplan::testing {

using namespace memplan::analysis;

struct RandomTraining {
  Graph graph;
  std::vector<OpId> schedule;
  std::vector<double> flops;  // per op
};

inline TensorId add_f32(Graph& g, const std::string& name, std::int64_t elems, TensorRole role) {
  Tensor t;
  t.name = name;
  t.dtype = DType::f32;
  t.dims = {Dim::of(elems)};
  t.rank_known = true;
  t.role = role;
  return g.add_tensor(std::move(t));
}

inline OpId add_node(Graph& g, const std::string& name, std::vector<TensorId> in, std::vector<TensorId> out, Phase ph) {
  Op op;
  op.name = name;
  op.type = "Einsum";  // an op the cost model knows (one FLOP per element) that never runs in place
  op.inputs = std::move(in);
  op.outputs = std::move(out);
  op.phase = ph;
  return g.add_op(std::move(op));
}

// `n` forward ops; op i reads h[i-1], sometimes a skip h[j], and a weight. Its backward op reads the
// output gradient and either its inputs or its output (as ReLU does), and makes the input gradients
// (summed by Add ops where two meet) and the weight gradient. The schedule is forward, then backward.
inline RandomTraining random_training(std::uint32_t seed, int n, double skip_p = 0.25, std::int64_t unit = 256) {
  std::mt19937 rng(seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  RandomTraining r;
  Graph& g = r.graph;
  std::vector<TensorId> h{add_f32(g, "x", unit * uni(1, 8), TensorRole::input)};
  g.inputs.push_back(h[0]);
  std::vector<std::vector<TensorId>> fwd_in;
  std::vector<bool> saves_output;
  for (int i = 1; i <= n; ++i) {
    std::vector<TensorId> in{h.back()};
    if (i > 2 && std::bernoulli_distribution(skip_p)(rng)) in.push_back(h[static_cast<std::size_t>(uni(0, i - 2))]);
    in.push_back(add_f32(g, "w" + std::to_string(i), 64, TensorRole::weight));
    h.push_back(add_f32(g, "h" + std::to_string(i), unit * uni(1, 8), TensorRole::activation));
    add_node(g, "f" + std::to_string(i), in, {h.back()}, Phase::forward);
    fwd_in.push_back(in);
    saves_output.push_back(std::bernoulli_distribution(0.3)(rng));
  }
  TensorId target = add_f32(g, "target", unit, TensorRole::input);
  g.inputs.push_back(target);
  TensorId loss = add_f32(g, "loss", 1, TensorRole::activation);
  add_node(g, "loss_op", {h.back(), target}, {loss}, Phase::forward);
  g.outputs.push_back(loss);
  std::vector<TensorId> grad(h.size(), kNoTensor);
  grad[h.size() - 1] = add_f32(g, "dh" + std::to_string(n), g.tensors[h.back()].element_count(), TensorRole::activation);
  add_node(g, "loss_grad", {loss, h.back(), target}, {grad[h.size() - 1]}, Phase::backward);
  int adds = 0;
  auto accumulate = [&](std::size_t k, TensorId partial) {
    if (grad[k] == kNoTensor) {
      grad[k] = partial;
      return;
    }
    TensorId sum = add_f32(g, "dsum" + std::to_string(adds), g.tensors[h[k]].element_count(), TensorRole::activation);
    add_node(g, "add" + std::to_string(adds++), {grad[k], partial}, {sum}, Phase::backward);
    grad[k] = sum;
  };
  for (int i = n; i >= 1; --i) {
    const auto& in = fwd_in[static_cast<std::size_t>(i - 1)];
    std::vector<TensorId> reads{grad[static_cast<std::size_t>(i)]};
    if (saves_output[static_cast<std::size_t>(i - 1)]) reads.push_back(h[static_cast<std::size_t>(i)]);
    else reads.insert(reads.end(), in.begin(), in.end() - 1);
    reads.push_back(in.back());
    std::vector<TensorId> outs;
    std::vector<std::size_t> which;
    for (std::size_t k = 0; k + 1 < in.size(); ++k) {
      const auto idx = static_cast<std::size_t>(std::find(h.begin(), h.end(), in[k]) - h.begin());
      if (idx == 0) continue;  // no gradient for the graph input
      outs.push_back(add_f32(g, "d" + std::to_string(i) + "_" + std::to_string(k), g.tensors[in[k]].element_count(),
                             TensorRole::activation));
      which.push_back(idx);
    }
    outs.push_back(add_f32(g, "dw" + std::to_string(i), 64, TensorRole::gradient));
    add_node(g, "b" + std::to_string(i), reads, outs, Phase::backward);
    for (std::size_t k = 0; k < which.size(); ++k) accumulate(which[k], outs[k]);
  }
  g.relink();
  for (OpId o = 0; o < g.ops.size(); ++o) r.schedule.push_back(o);  // built in execution order
  r.flops.resize(g.ops.size());
  for (OpId o = 0; o < g.ops.size(); ++o) r.flops[o] = 1000.0 * uni(1, 20);
  return r;
}

}  // namespace memplan::testing
