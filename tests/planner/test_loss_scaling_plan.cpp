// Plans of fp16 dynamic loss scaling (GradScaler): the ops it adds, persistent bytes grown by its three scalars only,
// and verified plans with each gradient unscaled in place (in the arena, or over its accumulator outside it).
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "analysis/ops.hpp"
#include "analysis/training.hpp"
#include "planner/training_plan.hpp"
#include "tests/analysis/test_training_fixture.hpp"

using namespace memplan;
using namespace memplan::analysis;

namespace {

TrainingOptions options(Optimizer opt, std::int64_t microbatches, bool scaling, Loss loss = Loss::mse) {
  TrainingOptions o;
  o.optimizer = opt;
  o.microbatches = microbatches;
  o.precision = Precision::fp16;
  o.loss_scaling = scaling;
  o.loss = loss;
  return o;
}

planner::TrainingPlanResult plan(const TrainingGraph& tg) {
  planner::TrainingPlanOptions po;
  po.strategy = "none";
  return planner::plan_training(tg, po);
}

std::size_t count(const Graph& g, std::string_view type) {
  std::size_t n = 0;
  for (const Op& op : g.ops) n += op.type == type;
  return n;
}

bool reads(const Op& op, TensorId t) { return std::find(op.inputs.begin(), op.inputs.end(), t) != op.inputs.end(); }

}  // namespace

TEST_CASE("fp16 loss scaling: one unscale per gradient before the updates, each update reads found_inf, one scale update") {
  const Graph fwd = testing::two_weight_model({8, 16}, {8, 16});
  for (Optimizer opt : {Optimizer::sgd, Optimizer::momentum, Optimizer::adam}) {
    CAPTURE(std::string(optimizer_name(opt)));
    const TrainingGraph tg = build_training_graph(fwd, options(opt, 1, true));
    const Graph& g = tg.graph;
    REQUIRE(tg.param_grads.size() == 2);
    CHECK(count(g, memplan_ops::kAmpUnscale) == 2);
    CHECK(count(g, memplan_ops::kAmpUpdateScale) == 1);
    REQUIRE(tg.loss_scale != kNoTensor);
    CHECK(g.tensors[tg.loss_scale].dtype == DType::f32);
    CHECK(g.tensors[tg.loss_scale].data->as_double() == std::vector<double>{65536.0});
    CHECK(g.tensors[tg.growth_tracker].dtype == DType::i32);
    for (TensorId t : {tg.loss_scale, tg.growth_tracker, tg.found_inf}) {
      CHECK(g.tensors[t].role == TensorRole::optimizer_state);
      CHECK(std::find(tg.optimizer_state.begin(), tg.optimizer_state.end(), t) != tg.optimizer_state.end());
    }
    bool seeded = false, unscaled = false, updated = false;
    for (const Op& op : g.ops) {
      if (op.type == "MSELossGrad") seeded = op.inputs.back() == tg.loss_scale;  // dloss: the scale
      if (op.type == memplan_ops::kAmpUnscale) {
        CHECK_FALSE(updated);  // every unscale before every update
        CHECK(storage_owner(g, op.outputs.at(1)) == tg.found_inf);
        unscaled = true;
      }
      const bool update = op.phase == Phase::optimizer && op.type != memplan_ops::kAmpUnscale && op.type != memplan_ops::kAmpUpdateScale;
      if (update) {
        updated = true;
        CHECK(storage_owner(g, op.inputs.back()) == tg.found_inf);  // the step's final found_inf
        CHECK(g.tensors[op.inputs.back()].producer != kNoOp);
      }
      if (op.type == memplan_ops::kAmpUpdateScale) CHECK(reads(op, tg.loss_scale));
    }
    CHECK(seeded);
    CHECK(unscaled);
    CHECK(updated);
    for (const auto& wg : tg.param_grads) {
      const TensorId grad = wg.second;
      CHECK(g.ops[g.tensors[grad].producer].type == memplan_ops::kAmpUnscale);  // the optimizer reads unscaled gradients
      CHECK(g.tensors[grad].role == TensorRole::gradient);
    }
  }
}

TEST_CASE("fp16 loss scaling: persistent bytes grow by the scale, growth tracker and found_inf only, and plans verify") {
  const Graph fwd = testing::two_weight_model({8, 16}, {8, 16});
  for (Optimizer opt : {Optimizer::sgd, Optimizer::momentum, Optimizer::adam}) {
    for (std::int64_t k : {1, 4}) {
      CAPTURE(std::string(optimizer_name(opt)));
      CAPTURE(k);
      const auto plain = plan(build_training_graph(fwd, options(opt, k, false)));
      const auto scaled = plan(build_training_graph(fwd, options(opt, k, true)));
      REQUIRE(plain.report.valid);
      REQUIRE(scaled.report.valid);
      CHECK(scaled.persistent_bytes == plain.persistent_bytes + 12);
      CHECK(scaled.optimizer_state_bytes == plain.optimizer_state_bytes + 12);
      CHECK(scaled.activation_arena_bytes == plain.activation_arena_bytes);  // unscaled in place: no second gradient
    }
  }
}

TEST_CASE("fp16 loss scaling seeds a model's own scalar loss with the scale, and needs fp16") {
  testing::GraphBuilder b;
  const auto x = b.input("x", {4});
  const auto w = b.weight("w", {4});
  const auto y = b.op1("Mul", {x, w}, "y", {4});
  b.output(b.op1("ReduceSum", {y}, "loss", {1}));  // keepdims: one element
  const TrainingGraph tg = build_training_graph(b.g, options(Optimizer::sgd, 1, true, Loss::none));
  bool seeded = false;
  for (const Op& op : tg.graph.ops) seeded = seeded || (op.type == memplan_ops::kSumLossGrad && reads(op, tg.loss_scale));
  CHECK(seeded);
  TrainingOptions bf16 = options(Optimizer::sgd, 1, true);
  bf16.precision = Precision::bf16;
  CHECK_THROWS_WITH_AS(build_training_graph(b.g, bf16), doctest::Contains("fp16"), Error);
}
