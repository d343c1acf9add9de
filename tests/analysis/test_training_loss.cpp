// The training losses: mse against a float target, ce against int64 labels over the class axis, none.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "analysis/autodiff.hpp"
#include "analysis/ops.hpp"
#include "analysis/training.hpp"
#include "tests/analysis/test_training_fixture.hpp"

using namespace memplan;
using namespace memplan::analysis;
using namespace memplan::analysis::testing;

namespace {

// x [dims] + w (trainable, same shape) -> y: the logits, with a gradient to check.
Graph logits_graph(const std::vector<std::int64_t>& dims) {
  GraphBuilder b;
  const TensorId x = b.input("x", dims);
  const TensorId w = b.weight("w", dims);
  b.output(b.op1("Add", {x, w}, "y", dims));
  b.g.name = "logits";
  return b.g;
}

TrainingGraph train(const Graph& g, Loss loss, std::optional<std::int64_t> axis = std::nullopt) {
  TrainingOptions to;
  to.loss = loss;
  to.class_axis = axis;
  return build_training_graph(g, to);
}

const Tensor* input_named(const Graph& g, const std::string& name) {
  for (TensorId t : g.inputs)
    if (g.tensors[t].name == name) return &g.tensors[t];
  return nullptr;
}

std::size_t count_type(const Graph& g, std::string_view type) {
  std::size_t n = 0;
  for (const Op& op : g.ops) n += op.type == type;
  return n;
}

}  // namespace

TEST_CASE("--loss ce adds an int64 labels input of the output's shape without the class axis and no float target") {
  const TrainingGraph tg = train(logits_graph({4, 10}), Loss::ce);
  const Graph& g = tg.graph;
  const Tensor* labels = input_named(g, "labels");
  REQUIRE(labels != nullptr);
  CHECK(labels->dtype == DType::i64);
  CHECK(labels->shape() == std::vector<std::int64_t>{4});
  CHECK(input_named(g, "target") == nullptr);
  for (TensorId t : g.inputs) CHECK((g.tensors[t].name == "x" || g.tensors[t].dtype == DType::i64));
  CHECK(g.tensors[tg.loss].dtype == DType::f32);
  CHECK(g.tensors[tg.loss].shape().empty());
  CHECK(count_type(g, memplan_ops::kCrossEntropyLoss) == 1);
  CHECK(count_type(g, memplan_ops::kCrossEntropyLossGrad) == 1);
  // What backward keeps of the loss: the logits and one logsumexp per row, never log-probabilities.
  std::vector<std::string> saved;
  for (TensorId t : tg.saved_for_backward) saved.push_back(g.tensors[t].name);
  CHECK(std::find(saved.begin(), saved.end(), std::string("y")) != saved.end());
  for (TensorId t : tg.saved_for_backward)
    if (g.tensors[t].name != "y") CHECK(g.tensors[t].element_count() <= 4);
  REQUIRE(tg.param_grads.size() == 1);
}

TEST_CASE("the class axis: the last axis of a language model's [B, S, V], axis 1 of [N, C, H, W], or --class-axis") {
  const auto labels_of = [](const std::vector<std::int64_t>& dims, std::optional<std::int64_t> axis) {
    const TrainingGraph tg = train(logits_graph(dims), Loss::ce, axis);
    const Tensor* l = input_named(tg.graph, "labels");
    REQUIRE(l != nullptr);
    for (const Op& op : tg.graph.ops)
      if (op.type == memplan_ops::kCrossEntropyLoss) CHECK(op.attr_int("axis", -1) >= 0);
    return l->shape();
  };
  CHECK(labels_of({2, 3, 50}, std::nullopt) == std::vector<std::int64_t>{2, 3});
  CHECK(labels_of({2, 5, 3, 3}, std::nullopt) == std::vector<std::int64_t>{2, 3, 3});
  CHECK(labels_of({2, 3, 50}, 1) == std::vector<std::int64_t>{2, 50});
  CHECK(labels_of({2, 3, 50}, -1) == std::vector<std::int64_t>{2, 3});
  CHECK(labels_of({7}, std::nullopt).empty());
  CHECK_THROWS_WITH_AS(train(logits_graph({2, 3}), Loss::ce, 2), doctest::Contains("--class-axis 2"), Error);
}

TEST_CASE("--loss none: a scalar output is the loss, its gradient seeded with ones, and a larger one is summed") {
  GraphBuilder b;
  const TensorId x = b.input("x", {2, 3});
  const TensorId w = b.weight("w", {2, 3});
  const TensorId y = b.op1("Mul", {x, w}, "y", {2, 3});
  const TensorId loss = b.op1("ReduceMean", {y}, "model_loss", {}, {{"keepdims", ai(0)}});
  b.output(loss);
  const TrainingGraph tg = train(b.g, Loss::none);
  const Graph& g = tg.graph;
  CHECK(g.tensors[tg.loss].name == "model_loss");
  CHECK(g.inputs.size() == 1);  // no target, no labels
  REQUIRE(count_type(g, memplan_ops::kSumLossGrad) == 1);
  for (const Op& op : g.ops)
    if (op.type == memplan_ops::kSumLossGrad) {
      CHECK(op.inputs.empty());
      CHECK(op.phase == Phase::backward);
      REQUIRE(op.outputs.size() == 1);
      CHECK(g.tensors[op.outputs[0]].shape().empty());
      CHECK(g.tensors[op.outputs[0]].consumers.size() == 1);  // ReduceMean's backward reads it
    }
  CHECK(tg.param_grads.size() == 1);

  const TrainingGraph summed = train(logits_graph({2, 3}), Loss::none);
  CHECK(count_type(summed.graph, memplan_ops::kSumLoss) == 1);
  CHECK(count_type(summed.graph, memplan_ops::kSumLossGrad) == 1);
  CHECK(summed.graph.tensors[summed.loss].dtype == DType::f32);
  CHECK(summed.graph.inputs.size() == 1);
}

TEST_CASE("--loss mse (the default) still adds a float target of the output's shape") {
  const TrainingGraph tg = build_training_graph(logits_graph({4, 10}));
  const Tensor* target = input_named(tg.graph, "target");
  REQUIRE(target != nullptr);
  CHECK(target->dtype == DType::f32);
  CHECK(target->shape() == std::vector<std::int64_t>{4, 10});
  CHECK(count_type(tg.graph, memplan_ops::kMSELoss) == 1);
}
