// Memory-aware schedules: topological, never above the file order's peak, exact DP equal to brute force.
#include "planner/schedule.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <random>

#include "analysis/import.hpp"
#include "analysis/ops.hpp"
#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "planner/inference.hpp"
#include "planner/training_plan.hpp"
#include "planner_fixtures.hpp"
#include "test_remat_graphs.hpp"

using namespace memplan;
using namespace memplan::planner;
using memplan::planner::testing::GraphBuilder;

namespace {

// A random DAG of elementwise ops (in place where assign allows), views, and ops that make new buffers;
// some outputs are graph outputs, some tensors are never read.
Graph random_dag(std::uint32_t seed, int n) {
  std::mt19937 rng(seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  GraphBuilder b;
  std::vector<TensorId> made{b.input("x", 64 * uni(1, 8))};
  for (int i = 0; i < n; ++i) {
    const TensorId a = made[static_cast<std::size_t>(uni(0, static_cast<int>(made.size()) - 1))];
    const TensorId c = made[static_cast<std::size_t>(uni(0, static_cast<int>(made.size()) - 1))];
    const int kind = uni(0, 3);
    const std::string name = "t" + std::to_string(i);
    const auto elems = static_cast<std::int64_t>(b.g.tensors[a].element_count());
    if (kind == 0) {
      made.push_back(b.act(name, elems));
      b.op("Relu", {a}, {made.back()});
    } else if (kind == 1 && static_cast<std::int64_t>(b.g.tensors[c].element_count()) == elems) {
      made.push_back(b.act(name, elems));
      b.op("Add", {a, c}, {made.back()});
    } else if (kind == 2) {
      made.push_back(b.act(name, elems));
      b.op("Identity", {a}, {made.back()});
    } else {
      made.push_back(b.act(name, 64 * uni(1, 8)));
      b.op("Concat", a == c ? std::vector<TensorId>{a} : std::vector<TensorId>{a, c}, {made.back()});
    }
  }
  b.output(made.back());
  if (n > 3) b.output(made[static_cast<std::size_t>(uni(1, n - 1))]);
  b.g.relink();
  return b.g;
}

// The memory-aware schedule (opt-in: the default keeps the file order).
ScheduleOptions memory_order() {
  ScheduleOptions s;
  s.kind = ScheduleKind::memory;
  return s;
}

AssignOptions small_alignment() {
  AssignOptions o;
  o.alignment = 64;
  return o;
}

// Every topological order of `g`, passed to `visit`.
void each_order(const Graph& g, const std::function<void(const std::vector<OpId>&)>& visit) {
  const std::size_t n = g.ops.size();
  std::vector<std::uint32_t> indeg(n, 0);
  std::vector<std::vector<OpId>> succ(n);
  for (OpId o = 0; o < n; ++o)
    for (TensorId t : g.ops[o].inputs)
      if (const OpId p = g.tensors[t].producer; p != analysis::kNoOp) {
        ++indeg[o];
        succ[p].push_back(o);
      }
  std::vector<OpId> order;
  std::vector<bool> used(n, false);
  std::function<void()> rec = [&] {
    if (order.size() == n) return visit(order);
    for (OpId o = 0; o < n; ++o) {
      if (used[o] || indeg[o] != 0) continue;
      used[o] = true;
      order.push_back(o);
      for (OpId s : succ[o]) --indeg[s];
      rec();
      for (OpId s : succ[o]) ++indeg[s];
      order.pop_back();
      used[o] = false;
    }
  };
  rec();
}

}  // namespace

TEST_CASE("the schedule model's peak is assign's aliased lower bound on every order of random DAGs") {
  const AssignOptions o = small_alignment();
  for (std::uint32_t seed = 1; seed <= 30; ++seed) {
    INFO("seed " << seed);
    const Graph g = random_dag(seed, 7);
    const ScheduleModel m(g, o);
    int orders = 0;
    each_order(g, [&](const std::vector<OpId>& order) {
      if (++orders > 200) return;
      const Plan p = assign(g, analysis::analyze_liveness(g, order, o.alignment), o);
      CHECK(m.peak(order) == p.aliased_lower_bound_bytes);
    });
  }
}

TEST_CASE("the exact DP over frontiers equals brute force over all topological orders") {
  const AssignOptions o = small_alignment();
  for (std::uint32_t seed = 1; seed <= 40; ++seed) {
    INFO("seed " << seed);
    const Graph g = random_dag(seed * 7919u, 8);
    const ScheduleModel m(g, o);
    std::uint64_t best = UINT64_MAX;
    each_order(g, [&](const std::vector<OpId>& order) { best = std::min(best, m.peak(order)); });
    const auto file = analysis::topological_order(g);
    const auto exact = m.exact(file, 1'000'000, 60.0);
    REQUIRE(exact.has_value());
    CHECK(is_topological(g, *exact));
    CHECK(m.peak(*exact) == best);
    const ScheduleResult r = choose_schedule(g, o, memory_order());
    CHECK(r.proven_optimal);
    CHECK(r.peak_bytes == best);
  }
}

TEST_CASE("every heuristic order is topological and the chosen one never peaks above the file order") {
  const AssignOptions o = small_alignment();
  for (std::uint32_t seed = 1; seed <= 20; ++seed) {
    INFO("seed " << seed);
    const Graph g = random_dag(seed, 60);
    const ScheduleModel m(g, o);
    const auto file = analysis::topological_order(g);
    for (const auto& order : {m.least_peak_first(file), m.breadth_first(file), m.depth_first(file), m.local_search(file, 1.0, 200)}) {
      CHECK(is_topological(g, order));
      CHECK(m.respects_dependencies(order));
    }
    ScheduleOptions s = memory_order();
    s.exact_max_ops = 0;  // heuristics alone
    const InferencePlan ip = plan_inference(g, o, s);
    CHECK(ip.report.valid);
    CHECK(ip.schedule.peak_bytes <= ip.schedule.file_peak_bytes);
    CHECK(ip.plan.aliased_lower_bound_bytes == ip.schedule.peak_bytes);
    s.kind = ScheduleKind::file;
    CHECK(plan_inference(g, o, s).plan.schedule == file);
  }
}

TEST_CASE("training schedules keep the forward first, verify, and peak no higher than the file order") {
  for (std::uint32_t seed = 1; seed <= 6; ++seed) {
    INFO("seed " << seed);
    auto rt = memplan::testing::random_training(seed, 30, 0.3, 1 << 12);
    const AssignOptions o = small_alignment();
    const ScheduleModel m(rt.graph, o);
    const ScheduleResult r = choose_schedule(rt.graph, o, memory_order());
    CHECK(m.respects_dependencies(r.order));
    CHECK(r.peak_bytes <= r.file_peak_bytes);
    bool backward_seen = false, forward_after = false;
    for (OpId op : r.order) {
      backward_seen = backward_seen || rt.graph.ops[op].phase != analysis::Phase::forward;
      forward_after = forward_after || (backward_seen && rt.graph.ops[op].phase == analysis::Phase::forward);
    }
    CHECK_FALSE(forward_after);
  }
}

TEST_CASE("an Adam training step in memory order updates each weight after every read of it and verifies") {
  analysis::ShapeOptions so;
  so.dims = {{"batch", 2}};
  analysis::TrainingOptions to;
  to.optimizer = analysis::Optimizer::adam;
  const auto tg = analysis::build_training_graph(
      analysis::infer_shapes(analysis::import_model(std::string(MEMPLAN_SOURCE_DIR) + "/samples/models/resnet18.train.onnx"), so), to);
  TrainingPlanOptions po;
  po.schedule = memory_order();
  const TrainingPlanResult r = plan_training(tg, po);
  CHECK(r.report.valid);
  CHECK(r.schedule.peak_bytes <= r.schedule.file_peak_bytes);
  const Graph& g = tg.graph;
  std::vector<std::uint32_t> step(g.ops.size());
  for (std::uint32_t s = 0; s < r.schedule.order.size(); ++s) step[r.schedule.order[s]] = s;
  std::size_t updates = 0;
  for (OpId u = 0; u < g.ops.size(); ++u)
    for (TensorId t : g.ops[u].outputs) {
      const TensorId src = t == analysis::kNoTensor ? analysis::kNoTensor : analysis::rewritten_source(g, t);
      if (src == analysis::kNoTensor) continue;
      ++updates;
      for (OpId c : g.tensors[src].consumers)
        if (c != u) CHECK(step[c] < step[u]);
    }
  CHECK(updates > 0);
}

TEST_CASE("a graph whose file order starts or interleaves with backward-phase ops plans in a topological order") {
  // Ops built by hand (tests, tools) may put a backward-phase op first: the local search must keep every move
  // inside the order (it once moved an op past the end) and every candidate that breaks the forward-first rule
  // is left out, the file order kept.
  const AssignOptions o = small_alignment();
  for (std::uint32_t seed = 1; seed <= 10; ++seed) {
    INFO("seed " << seed);
    Graph g = random_dag(seed, 40);
    for (std::size_t k = 0; k < g.ops.size(); k += 3) g.ops[k].phase = analysis::Phase::backward;
    const InferencePlan ip = plan_inference(g, o, memory_order());
    CHECK(ip.report.valid);
    CHECK(is_topological(g, ip.plan.schedule));
    CHECK(ip.schedule.peak_bytes <= ip.schedule.file_peak_bytes);
  }
}
