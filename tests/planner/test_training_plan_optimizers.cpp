// plan_training with each optimizer: persistent bytes count weights, state and accumulators once (in-place updates).
#include <doctest/doctest.h>

#include <string>

#include "analysis/import.hpp"
#include "analysis/ops.hpp"
#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "planner/plan_json.hpp"
#include "planner/training_plan.hpp"
#include "planner/verify.hpp"
#include "tests/analysis/test_training_fixture.hpp"

using namespace memplan;
using namespace memplan::analysis;

namespace {

// w1, w2 [8, 16]: 1 KiB of trainable weights, no constants.
Graph small_model() { return testing::two_weight_model({8, 16}, {8, 16}); }

planner::TrainingPlanResult plan(const Graph& fwd, Optimizer opt, std::int64_t microbatches = 1) {
  TrainingOptions o;
  o.optimizer = opt;
  o.microbatches = microbatches;
  planner::TrainingPlanOptions po;
  po.strategy = "none";
  return planner::plan_training(build_training_graph(fwd, o), po);
}

// The bytes of the weights the optimizer updates (one update op per trained weight).
std::uint64_t trainable_bytes(const planner::TrainingPlanResult& r) {
  std::uint64_t w = 0;
  for (const Op& op : r.graph.ops)
    if (op.phase == Phase::optimizer && op.type != memplan_ops::kAdamStep) w += r.graph.tensors[op.inputs.at(0)].bytes();
  CHECK(w > 0);
  return w;
}

// Per optimizer: state bytes per weight byte, and Adam's f32 step count.
std::uint64_t state_bytes(Optimizer opt, std::uint64_t w) {
  switch (opt) {
    case Optimizer::momentum: return w;
    case Optimizer::adam:
    case Optimizer::adamw: return 2 * w + 4;
    default: return 0;
  }
}

}  // namespace

TEST_CASE("persistent bytes: sgd W, momentum 2W, adam and adamw 3W + step, plus W of gradients when accumulating") {
  const Graph fwd = small_model();
  const std::uint64_t W = 2 * 8 * 16 * 4;
  for (Optimizer opt : {Optimizer::sgd, Optimizer::momentum, Optimizer::adam, Optimizer::adamw}) {
    for (std::int64_t k : {1, 4}) {
      INFO(optimizer_name(opt) << " microbatches " << k);
      const auto r = plan(fwd, opt, k);
      REQUIRE(r.report.valid);
      CHECK(trainable_bytes(r) == W);
      CHECK(r.persistent_bytes == W + state_bytes(opt, W) + (k > 1 ? W : 0));
      CHECK(r.peak_bytes == r.persistent_bytes + r.input_bytes + r.activation_arena_bytes);
    }
  }
}

TEST_CASE("persistent bytes follow the formula on a sample transformer, and its plans verify and round-trip") {
  Graph g = import_model(std::string(MEMPLAN_SOURCE_DIR) + "/samples/transformers/bert_small.train.onnx");
  ShapeOptions so;
  so.dims = {{"batch", 2}, {"seq", 16}};
  const Graph fwd = infer_shapes(g, so);
  const auto sgd = plan(fwd, Optimizer::sgd);
  std::uint64_t weights = 0;  // every weight and constant, each once
  for (TensorId t = 0; t < sgd.graph.tensors.size(); ++t)
    if (sgd.graph.tensors[t].role == TensorRole::weight && rewritten_source(sgd.graph, t) == kNoTensor)
      weights += sgd.graph.tensors[t].bytes();
  CHECK(sgd.persistent_bytes == weights);
  const std::uint64_t W = trainable_bytes(sgd);
  CHECK(W > 1000000);
  for (Optimizer opt : {Optimizer::momentum, Optimizer::adam, Optimizer::adamw}) {
    INFO(optimizer_name(opt));
    const auto r = plan(fwd, opt);
    REQUIRE(r.report.valid);
    CHECK(r.persistent_bytes == sgd.persistent_bytes + state_bytes(opt, W));
    // The plan's JSON read back verifies too: the in-place updates are aliases outside the arena.
    const planner::Plan back = planner::plan_from_json(r.graph, planner::plan_to_json(r.graph, r.plan));
    CHECK(planner::verify_plan(r.graph, back).valid);
    std::size_t updates = 0;
    for (const planner::Alias& a : back.aliases)
      if (a.kind == planner::AliasKind::inplace && back.tensor_offset[a.tensor] == planner::kNotInArena) {
        CHECK(rewritten_source(r.graph, a.tensor) == a.source);
        ++updates;
      }
    std::size_t rewrites = 0;
    for (TensorId t = 0; t < r.graph.tensors.size(); ++t) rewrites += rewritten_source(r.graph, t) != kNoTensor;
    CHECK(updates == rewrites);
    CHECK(rewrites > 0);
  }
  CHECK(plan(fwd, Optimizer::adam, 2).persistent_bytes == sgd.persistent_bytes + state_bytes(Optimizer::adam, W) + W);
}

TEST_CASE("the verifier rejects a plan that leaves an in-place update without its alias") {
  const auto r = plan(small_model(), Optimizer::adam);
  planner::Plan broken = r.plan;
  std::erase_if(broken.aliases, [&](const planner::Alias& a) { return r.graph.ops[a.op].type == memplan_ops::kAdamStep; });
  REQUIRE(broken.aliases.size() + 1 == r.plan.aliases.size());
  const auto report = planner::verify_plan(r.graph, broken);
  CHECK_FALSE(report.valid);
  REQUIRE_FALSE(report.problems.empty());
  CHECK(report.problems[0].find("rewrites 'adam/step' in place") != std::string::npos);
}
