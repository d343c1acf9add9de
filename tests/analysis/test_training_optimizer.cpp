// The optimizer step of a training graph: in-place updates declared by the registry, attributes, accumulation.
#include <doctest/doctest.h>

#include "analysis/liveness.hpp"
#include "analysis/ops.hpp"
#include "analysis/training.hpp"
#include "tests/analysis/test_training_fixture.hpp"

using namespace memplan;
using namespace memplan::analysis;

namespace {

Graph two_weights() { return testing::two_weight_model({4, 3}, {3}); }

const Op& update_of(const TrainingGraph& tg, TensorId w) {
  const Op* found = nullptr;
  for (const Op& op : tg.graph.ops)
    if (op.phase == Phase::optimizer && !op.inputs.empty() && op.inputs[0] == w) found = &op;
  REQUIRE(found != nullptr);
  return *found;
}

}  // namespace

TEST_CASE("every optimizer output rewrites its weight or state in place and takes no arena bytes") {
  for (Optimizer opt : {Optimizer::sgd, Optimizer::momentum, Optimizer::adam, Optimizer::adamw}) {
    INFO(optimizer_name(opt));
    TrainingOptions o;
    o.optimizer = opt;
    const TrainingGraph tg = build_training_graph(two_weights(), o);
    const Graph& g = tg.graph;
    REQUIRE(tg.updated_weights.size() == tg.param_grads.size());
    for (std::size_t k = 0; k < tg.param_grads.size(); ++k) {
      const TensorId w = tg.param_grads[k].first, nw = tg.updated_weights[k];
      CHECK(rewritten_source(g, nw) == w);
      CHECK(storage_owner(g, nw) == w);
      CHECK_FALSE(occupies_arena(g, nw));
    }
    for (const Op& op : g.ops) {
      if (op.phase != Phase::optimizer) continue;
      for (TensorId t : op.outputs) {
        const TensorId src = rewritten_source(g, t);
        REQUIRE(src != kNoTensor);
        CHECK(g.tensors[src].producer == kNoOp);  // persistent storage: a weight or the optimizer's state
        CHECK(g.tensors[src].bytes() == g.tensors[t].bytes());
        CHECK_FALSE(occupies_arena(g, t));
      }
    }
    const std::size_t per_weight = opt == Optimizer::sgd ? 0 : opt == Optimizer::momentum ? 1 : 2;
    const std::size_t step = opt == Optimizer::adam || opt == Optimizer::adamw ? 1 : 0;
    CHECK(tg.optimizer_state.size() == per_weight * tg.param_grads.size() + step);
    CHECK(rewritten_source(g, tg.param_grads[0].second) == kNoTensor);  // one step's gradient: in the arena
    CHECK(occupies_arena(g, tg.param_grads[0].second));
  }
}

TEST_CASE("optimizer hyperparameters and weight decay are attributes of the updates") {
  TrainingOptions o;
  o.learning_rate = 0.5;
  o.weight_decay = 0.01;
  o.momentum = 0.8;
  o.optimizer = Optimizer::momentum;
  TrainingGraph tg = build_training_graph(two_weights(), o);
  const Op& m = update_of(tg, tg.param_grads[0].first);
  CHECK(m.type == memplan_ops::kMomentumUpdate);
  CHECK(m.attr_float("lr", 0) == doctest::Approx(0.5));
  CHECK(m.attr_float("momentum", 0) == doctest::Approx(0.8));
  CHECK(m.attr_float("weight_decay", 0) == doctest::Approx(0.01));
  for (Optimizer opt : {Optimizer::adam, Optimizer::adamw}) {
    o.optimizer = opt;
    tg = build_training_graph(two_weights(), o);
    const Op& a = update_of(tg, tg.param_grads[0].first);
    CHECK(a.type == memplan_ops::kAdamUpdate);
    CHECK(a.attr_int("decoupled", -1) == (opt == Optimizer::adamw ? 1 : 0));
    CHECK(a.attr_float("weight_decay", 0) == doctest::Approx(0.01));
    CHECK(tg.graph.ops[tg.graph.tensors[a.inputs.at(4)].producer].type == memplan_ops::kAdamStep);
  }
}

TEST_CASE("gradient accumulation adds each micro-step's gradient into a persistent accumulator the optimizer reads") {
  TrainingOptions o;
  o.optimizer = Optimizer::adam;
  o.microbatches = 4;
  const TrainingGraph tg = build_training_graph(two_weights(), o);
  const Graph& g = tg.graph;
  REQUIRE(tg.grad_accumulators.size() == tg.param_grads.size());
  for (std::size_t k = 0; k < tg.param_grads.size(); ++k) {
    const TensorId w = tg.param_grads[k].first, acc = tg.param_grads[k].second;  // no bindings in CHECK (clang)
    const Tensor& store = g.tensors[tg.grad_accumulators[k]];
    CHECK(store.role == TensorRole::gradient);
    CHECK(store.producer == kNoOp);
    CHECK(store.shape() == g.tensors[w].shape());
    const Op& add = g.ops[g.tensors[acc].producer];
    CHECK(add.type == memplan_ops::kGradAccumulate);
    CHECK(add.phase == Phase::backward);
    CHECK(add.inputs[0] == tg.grad_accumulators[k]);
    CHECK(rewritten_source(g, acc) == tg.grad_accumulators[k]);
    CHECK_FALSE(occupies_arena(g, acc));
    // This micro-step's gradient is an arena activation that dies at the accumulation, right after it is made.
    const TensorId dw = add.inputs[1];
    CHECK(g.tensors[dw].role == TensorRole::activation);
    CHECK(occupies_arena(g, dw));
    CHECK(g.tensors[dw].consumers.size() == 1);
    CHECK(g.tensors[dw].consumers[0] == g.tensors[acc].producer);
    CHECK(update_of(tg, w).inputs[1] == acc);
  }
  o.microbatches = 1;
  CHECK(build_training_graph(two_weights(), o).grad_accumulators.empty());
  o.microbatches = 0;
  CHECK_THROWS_AS(build_training_graph(two_weights(), o), Error);
}
