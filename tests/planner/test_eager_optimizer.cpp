// eager_peak and torch.optim's step(): in-place state counted once, the temporaries of each implementation.
#include <doctest/doctest.h>

#include "analysis/training.hpp"
#include "planner/pytorch/eager_model.hpp"
#include "planner/training_plan.hpp"
#include "tests/analysis/test_training_fixture.hpp"

using namespace memplan;
using namespace memplan::analysis;

namespace {

// w1 [8, 16] is 512 bytes, w2 [16] 64 bytes (256 aligned), in that parameter order.
Graph model() { return testing::two_weight_model({8, 16}, {16}); }

struct Step {
  TrainingGraph tg;
  planner::TrainingPlanResult r;
};

Step step(Optimizer opt, double wd = 0.0, std::int64_t microbatches = 1) {
  TrainingOptions o;
  o.optimizer = opt;
  o.weight_decay = wd;
  o.microbatches = microbatches;
  Step s;
  s.tg = build_training_graph(model(), o);
  planner::TrainingPlanOptions po;
  po.strategy = "none";
  s.r = planner::plan_training(s.tg, po);
  return s;
}

std::uint64_t temporaries(Optimizer opt, double wd, OptimizerImpl impl) {
  const Step s = step(opt, wd);
  std::vector<OpId> order;
  for (OpId o = 0; o < s.tg.graph.ops.size(); ++o)
    if (s.tg.graph.ops[o].phase == Phase::optimizer) order.push_back(o);
  return planner::optimizer_step_temporaries(s.tg.graph, order, impl, 256);
}

}  // namespace

TEST_CASE("torch.optim foreach temporaries: Adam's sqrt of every exp_avg_sq, SGD's only with weight decay") {
  constexpr auto foreach = OptimizerImpl::foreach;
  CHECK(temporaries(Optimizer::adam, 0.0, foreach) == 512 + 256);
  CHECK(temporaries(Optimizer::adam, 0.01, foreach) == 512 + 256);  // the L2 intermediate is deleted before the sqrt
  CHECK(temporaries(Optimizer::adamw, 0.01, foreach) == 512 + 256);
  CHECK(temporaries(Optimizer::sgd, 0.0, foreach) == 0);
  CHECK(temporaries(Optimizer::sgd, 0.01, foreach) == 512 + 256);
  CHECK(temporaries(Optimizer::momentum, 0.0, foreach) == 0);
  CHECK(temporaries(Optimizer::momentum, 0.01, foreach) == 512 + 256);
}

TEST_CASE("torch.optim for-loop temporaries are one parameter's at a time, fused makes none") {
  constexpr auto loop = OptimizerImpl::for_loop;
  // Adam: sqrt and its quotient of the largest parameter (2 x 512), then 2 x 256 beside w1's denom (512).
  CHECK(temporaries(Optimizer::adam, 0.0, loop) == 1024);
  CHECK(temporaries(Optimizer::adam, 0.01, loop) == 3 * 512);  // grad.add(param) too
  CHECK(temporaries(Optimizer::adamw, 0.01, loop) == 1024);     // decoupled decay is in place
  CHECK(temporaries(Optimizer::sgd, 0.01, loop) == 512);
  CHECK(temporaries(Optimizer::momentum, 0.0, loop) == 0);
  for (Optimizer opt : {Optimizer::sgd, Optimizer::momentum, Optimizer::adam, Optimizer::adamw})
    CHECK(temporaries(opt, 0.01, OptimizerImpl::fused) == 0);
}

TEST_CASE("eager_peak counts weights and optimizer state once and adds step()'s temporaries while gradients live") {
  const Step sgd = step(Optimizer::sgd), adam = step(Optimizer::adam);
  const std::uint64_t W = 512 + 64;
  const auto e_sgd = planner::eager_peak(sgd.r.graph, sgd.r.plan);
  planner::EagerOptions fused;
  fused.optimizer_impl = OptimizerImpl::fused;
  const auto e_adam_fused = planner::eager_peak(adam.r.graph, adam.r.plan, fused);
  const auto e_adam = planner::eager_peak(adam.r.graph, adam.r.plan);
  CHECK(e_adam.resident_bytes == e_sgd.resident_bytes + 2 * W + 4);  // m, v and the step: no updated copies
  CHECK(e_adam_fused.resident_bytes == e_adam.resident_bytes);
  CHECK(e_adam.peak_bytes >= e_adam_fused.peak_bytes);
  CHECK(e_adam.peak_bytes <= e_adam_fused.peak_bytes + 768);
  // foreach's sqrt list comes on top of every gradient at the optimizer step: where it raises the peak, the
  // peak is there.
  const bool at_step = adam.r.graph.ops[adam.r.plan.schedule[e_adam.peak_step]].phase == Phase::optimizer;
  CHECK((e_adam.peak_bytes == e_adam_fused.peak_bytes || at_step));
  // Gradient accumulation: the accumulators are resident for the whole step.
  const Step acc = step(Optimizer::adam, 0.0, 4);
  CHECK(planner::eager_peak(acc.r.graph, acc.r.plan).resident_bytes == e_adam.resident_bytes + W);
}
