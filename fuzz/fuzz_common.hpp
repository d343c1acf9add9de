// Shared by the fuzz targets: invariants every imported graph must satisfy, and the pipeline after import.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "analysis/graph.hpp"
#include "analysis/liveness.hpp"
#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "planner/inference.hpp"
#include "planner/plan_json.hpp"
#include "planner/training_plan.hpp"
#include "planner/verify.hpp"

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

// A verification failure is memplan's bug whatever the input; every other kind is a documented rejection.
inline void rejected(const Error& e) {
  if (e.kind() == ErrorKind::verification) std::fprintf(stderr, "verification failed: %s\n", e.what());
  require(e.kind() != ErrorKind::verification, "a plan memplan made passes its own verifier");
}

// A plan written to JSON and read back is the same plan, and it still verifies.
inline void check_plan_round_trip(const analysis::Graph& g, const planner::Plan& p) {
  require(planner::verify_plan(g, p).valid, "a returned plan verifies");
  const nlohmann::json doc = planner::plan_to_json(g, p, false);
  const planner::Plan back = planner::plan_from_json(g, doc);
  require(planner::plan_to_json(g, back, false) == doc, "plan JSON round-trips to the same document");
  require(planner::verify_plan(g, back).valid, "a plan read back verifies");
}

// After import: bind the usual symbols, infer shapes, check liveness, plan inference (and, for small
// graphs, a training step) and verify every plan independently.
inline void run_pipeline(const analysis::Graph& imported, std::size_t seed) {
  using namespace analysis;
  Graph g;
  try {
    ShapeOptions so;
    so.dims = {{"batch", 2}, {"seq", 8}};
    g = infer_shapes(imported, so);
  } catch (const Error& e) {
    return rejected(e);
  }
  for (const auto& t : g.tensors) require(t.shape_known() && t.dtype != DType::undefined, "infer_shapes leaves every tensor shaped");
  try {
    check_liveness(g, analyze_liveness(g, topological_order(g)));
    const planner::InferencePlan ip = planner::plan_inference(g);
    require(ip.report.valid, "plan_inference reports a valid plan");
    check_plan_round_trip(g, ip.plan);
  } catch (const Error& e) {
    return rejected(e);
  }
  if (g.ops.size() > 64) return;  // training is planned for small graphs only: keeps executions fast
  try {
    const TrainingGraph tg = build_training_graph(g);
    planner::TrainingPlanOptions o;
    const auto& strategies = planner::training_strategies();
    o.strategy = strategies[seed % strategies.size()];
    const planner::TrainingPlanResult r = planner::plan_training(tg, o);
    require(r.report.valid, "plan_training reports a valid plan");
    check_plan_round_trip(r.graph, r.plan);
  } catch (const Error& e) {
    return rejected(e);
  }
}

}  // namespace memplan::fuzz
