// Test fixtures for the arena planner: hand-built graphs and an all-pairs overlap oracle.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "analysis/graph.hpp"
#include "analysis/liveness.hpp"
#include "planner/assign.hpp"
#include "planner/verify.hpp"

namespace memplan::planner::testing {

using namespace memplan::analysis;

struct GraphBuilder {
  Graph g;

  TensorId act(const std::string& name, std::int64_t elements, DType dt = DType::f32, TensorRole role = TensorRole::activation) {
    Tensor t;
    t.name = name;
    t.dtype = dt;
    t.dims = {Dim::of(elements)};
    t.rank_known = true;
    t.role = role;
    return g.add_tensor(std::move(t));
  }
  TensorId input(const std::string& name, std::int64_t elements) {
    const TensorId t = act(name, elements, DType::f32, TensorRole::input);
    g.inputs.push_back(t);
    return t;
  }
  TensorId weight(const std::string& name, std::int64_t elements) { return act(name, elements, DType::f32, TensorRole::weight); }
  OpId op(const std::string& type, std::vector<TensorId> ins, std::vector<TensorId> outs) {
    Op o;
    o.name = type + "_" + std::to_string(g.ops.size());
    o.type = type;
    o.inputs = std::move(ins);
    o.outputs = std::move(outs);
    return g.add_op(std::move(o));
  }
  void output(TensorId t) {
    g.tensors[t].is_graph_output = true;
    g.outputs.push_back(t);
  }
};

// Plans `g` in file order and checks the verifier accepts the result.
inline Plan plan_checked(const Graph& g, const AssignOptions& o = {}) {
  const Liveness l = analyze_liveness(g, topological_order(g), o.alignment);
  Plan p = assign(g, l, o);
  const VerifyReport r = verify_plan(g, p);
  INFO("first problem: " << (r.problems.empty() ? std::string("none") : r.problems.front()));
  CHECK(r.valid);
  return p;
}

// Assignment without scratch regions: for tests of aliasing and packing alone.
inline AssignOptions without_scratch(AssignOptions o = {}) {
  o.workspace_limit_bytes = 0;
  return o;
}

// Liveness's plain lower bound with each step's scratch added: most bytes live at one step when nothing
// shares, an upper limit for the plan's aliased bound.
inline std::uint64_t plain_bound_with_scratch(const Liveness& l, const Plan& p) {
  std::vector<std::uint64_t> live = l.live_bytes;
  for (const auto& sc : p.scratch) live[l.step_of_op[sc.op]] += sc.bytes;
  std::uint64_t m = 0;
  for (auto b : live) m = std::max(m, b);
  return m;
}

inline bool has_alias(const Plan& p, TensorId tensor, TensorId source, AliasKind kind) {
  for (const auto& a : p.aliases)
    if (a.tensor == tensor && a.source == source && a.kind == kind) return true;
  return false;
}

// All pairs: tensors live at a common step whose bytes overlap must be bound to the same buffer.
// Quadratic on purpose: an oracle for small graphs that shares nothing with the sweep verifier.
inline std::size_t overlapping_pairs_across_buffers(const Graph& g, const Plan& p) {
  const Liveness l = analyze_liveness(g, p.schedule, 1);
  std::size_t bad = 0;
  for (TensorId a = 0; a < g.tensors.size(); ++a)
    for (TensorId b = a + 1; b < g.tensors.size(); ++b) {
      if (p.tensor_offset[a] == kNotInArena || p.tensor_offset[b] == kNotInArena) continue;
      if (!l.interval[a].overlaps(l.interval[b])) continue;
      const bool bytes_meet = p.tensor_offset[a] < p.tensor_offset[b] + l.bytes[b] && p.tensor_offset[b] < p.tensor_offset[a] + l.bytes[a];
      if (bytes_meet && p.tensor_buffer[a] != p.tensor_buffer[b]) ++bad;
    }
  return bad;
}

}  // namespace memplan::planner::testing
