// Test fixtures for viz: synthetic graphs with chosen tensor lifetimes, and simple valid plans for them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "analysis/graph.hpp"
#include "analysis/liveness.hpp"
#include "planner/plan.hpp"

namespace memplan::viz::testing {

using namespace memplan::analysis;

inline TensorId add_f32(Graph& g, const std::string& name, std::int64_t elements, TensorRole role = TensorRole::activation) {
  Tensor t;
  t.name = name;
  t.dtype = DType::f32;
  t.dims = {Dim::of(elements)};
  t.rank_known = true;
  t.role = role;
  return g.add_tensor(t);
}

// n ops in a chain; op i reads t(i-1) and t(i-1-skip) for a skip drawn in [0, max_reach), so tensor
// lifetimes vary from 1 to max_reach+1 steps. Sizes are drawn from [1, max_elems] floats. Seeded.
inline Graph random_chain(std::size_t n, std::uint32_t max_reach, std::int64_t max_elems, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Graph g;
  g.name = "chain" + std::to_string(seed);
  const TensorId x = add_f32(g, "x", 16, TensorRole::input);
  g.inputs.push_back(x);
  std::vector<TensorId> out;
  for (std::size_t i = 0; i < n; ++i) {
    Op op;
    op.name = "op" + std::to_string(i);
    op.type = i % 3 == 0 ? "Conv" : (i % 3 == 1 ? "Relu" : "Add");
    op.inputs.push_back(i == 0 ? x : out[i - 1]);
    if (i >= 2 && max_reach > 1) {
      const std::size_t skip = 1 + rng() % (max_reach - 1);
      if (skip < i) op.inputs.push_back(out[i - 1 - skip]);
    }
    const TensorId t = add_f32(g, "t" + std::to_string(i), 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint32_t>(max_elems)));
    op.outputs.push_back(t);
    out.push_back(t);
    g.add_op(op);
  }
  g.outputs.push_back(out.back());
  g.tensors[out.back()].is_graph_output = true;
  return g;
}

// One buffer per arena tensor, at slot (tensor index modulo `slots`) * largest size: valid whenever no
// tensor outlives `slots` - 1 later ones (true for random_chain with slots > max_reach + 1).
inline planner::Plan slot_plan(const Graph& g, std::uint32_t slots) {
  const auto l = analyze_liveness(g, topological_order(g), 256);
  planner::Plan p;
  p.model_name = g.name;
  p.schedule = l.schedule;
  p.alignment = 256;
  p.packer = "slots";
  std::uint64_t largest = 0;
  for (auto b : l.bytes) largest = std::max(largest, b);
  std::uint32_t k = 0;
  p.tensor_offset.assign(g.tensors.size(), planner::kNotInArena);
  p.tensor_buffer.assign(g.tensors.size(), UINT32_MAX);
  for (TensorId t = 0; t < g.tensors.size(); ++t) {
    if (!l.in_arena[t]) continue;
    planner::Buffer b;
    b.offset = static_cast<std::uint64_t>(k++ % slots) * largest;
    b.size = l.bytes[t];
    b.interval = l.interval[t];
    b.tensors = {t};
    p.tensor_offset[t] = b.offset;
    p.tensor_buffer[t] = static_cast<std::uint32_t>(p.buffers.size());
    p.arena_bytes = std::max(p.arena_bytes, b.offset + b.size);
    p.buffers.push_back(b);
  }
  return p;
}

inline std::size_t count_of(const std::string& s, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = s.find(needle); at != std::string::npos; at = s.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace memplan::viz::testing
