// Shared by the fuzz targets: invariants every imported graph must satisfy, and the pipeline after import.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "analysis/graph.hpp"
#include "analysis/liveness.hpp"
#include "analysis/shapes.hpp"

namespace memplan::fuzz {

// A broken invariant is a bug: abort so that libFuzzer records the input.
inline void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
  std::abort();
}

// What an importer promises when it returns: links agree with the ops, names are unique, a topological
// order exists and covers every op, outputs are flagged.
inline void check_imported(const analysis::Graph& g) {
  using namespace analysis;
  require(!g.outputs.empty(), "a returned graph has outputs");
  for (OpId o = 0; o < g.ops.size(); ++o) {
    for (TensorId t : g.ops[o].outputs)
      if (t != kNoTensor) require(t < g.tensors.size() && g.tensors[t].producer == o, "producer links agree with op outputs");
    for (TensorId t : g.ops[o].inputs) require(t == kNoTensor || t < g.tensors.size(), "op inputs are valid ids");
  }
  for (TensorId t = 0; t < g.tensors.size(); ++t) {
    require(g.find(g.tensors[t].name) == t, "the name index finds every tensor");
    for (OpId c : g.tensors[t].consumers) require(c < g.ops.size(), "consumers are valid op ids");
  }
  for (TensorId t : g.outputs) require(t < g.tensors.size() && g.tensors[t].is_graph_output, "outputs are flagged");
  require(is_topological(g, topological_order(g)), "topological_order is a topological order");
}

// Liveness on a shaped graph: every in-arena interval lies in the schedule and starts at its producer.
inline void check_liveness(const analysis::Graph& g, const analysis::Liveness& l) {
  using namespace analysis;
  for (TensorId t = 0; t < g.tensors.size(); ++t) {
    if (!l.in_arena[t]) continue;
    require(l.interval[t].first <= l.interval[t].last && l.interval[t].last < l.schedule.size(), "interval inside the schedule");
    require(l.interval[t].first == l.step_of_op[g.tensors[t].producer], "interval starts at the producer");
    require(l.bytes[t] <= l.lower_bound_bytes, "no tensor is larger than the peak");
  }
}

// After import: bind the usual symbols, infer shapes, analyse liveness (and plan and verify once the
// planner is built in). Errors with a kind are rejections; anything else escapes and is a crash.
inline void run_pipeline(const analysis::Graph& imported) {
  using namespace analysis;
  Graph g;
#if MEMPLAN_FUZZ_HAVE_SHAPES
  try {
    ShapeOptions so;
    so.dims = {{"batch", 2}, {"seq", 8}};
    g = infer_shapes(imported, so);
  } catch (const Error&) {
    return;
  }
  for (const auto& t : g.tensors) require(t.shape_known() && t.dtype != DType::undefined, "infer_shapes leaves every tensor shaped");
#else
  g = imported;
  for (const auto& t : g.tensors)
    if (!t.shape_known() || t.dtype == DType::undefined) return;
#endif
  Liveness l;
  try {
    l = analyze_liveness(g, topological_order(g));
  } catch (const Error&) {
    return;
  }
  check_liveness(g, l);
}

}  // namespace memplan::fuzz
