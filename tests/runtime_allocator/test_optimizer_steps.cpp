// Optimizer kernels on the CPU executor: three steps of torch.optim's update in closed form, run in place.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <memory>

#include "analysis/training.hpp"
#include "planner/training_plan.hpp"
#include "runtime_allocator/executor.hpp"
#include "tests/analysis/test_training_fixture.hpp"
#include "tests/runtime_allocator/training_fixture.hpp"

using namespace memplan;
using namespace memplan::analysis;
using memplan::analysis::testing::GraphBuilder;

namespace {

constexpr int kN = 6;
const double kX[kN] = {0.5, -1.0, 2.0, 0.25, -0.75, 1.5};
const double kT[kN] = {1.0, 0.5, -1.0, 0.0, 2.0, -0.5};
const double kW0[kN] = {0.3, -0.2, 0.1, 0.8, -0.6, 0.05};

// y = x * w against a target: loss = mean((x w - t)^2), so dL/dw_i = 2 (x_i w_i - t_i) x_i / n in closed form.
Graph model() {
  GraphBuilder b;
  auto x = b.input("x", {kN});
  auto w = b.weight("w", {kN});
  b.g.tensors[w].data = std::make_shared<TensorData>(TensorData::from_double(DType::f32, {kN}, {kW0, kW0 + kN}));
  b.output(b.op1("Mul", {x, w}, "y", {kN}));
  return b.g;
}

// torch.optim's single-tensor updates in double precision (sgd.py, adam.py, adamw.py).
struct TorchOptim {
  TrainingOptions o;
  double w[kN], buf[kN] = {}, m[kN] = {}, v[kN] = {};
  int step = 0;
  explicit TorchOptim(const TrainingOptions& opts) : o(opts) { std::memcpy(w, kW0, sizeof w); }
  void run() {
    ++step;
    for (int i = 0; i < kN; ++i) {
      double g = 2.0 * (kX[i] * w[i] - kT[i]) * kX[i] / kN;
      const bool adamw = o.optimizer == Optimizer::adamw;
      if (adamw) w[i] *= 1.0 - o.learning_rate * o.weight_decay;
      else g += o.weight_decay * w[i];
      if (o.optimizer == Optimizer::sgd) {
        w[i] -= o.learning_rate * g;
      } else if (o.optimizer == Optimizer::momentum) {
        buf[i] = step == 1 ? g : o.momentum * buf[i] + g;
        w[i] -= o.learning_rate * buf[i];
      } else {
        m[i] += (1.0 - o.adam_beta1) * (g - m[i]);
        v[i] = o.adam_beta2 * v[i] + (1.0 - o.adam_beta2) * g * g;
        const double denom = std::sqrt(v[i]) / std::sqrt(1.0 - std::pow(o.adam_beta2, step)) + o.adam_epsilon;
        w[i] -= o.learning_rate / (1.0 - std::pow(o.adam_beta1, step)) * m[i] / denom;
      }
    }
  }
};

TrainingOptions options(Optimizer opt, double lr, double wd = 0.0, std::int64_t microbatches = 1) {
  TrainingOptions o;
  o.optimizer = opt;
  o.learning_rate = lr;
  o.weight_decay = wd;
  o.microbatches = microbatches;
  return o;
}

// The model's training step with `o`, planned (strategy none), verified, and on the CPU executor.
struct Planned : runtime::testing::PlannedStep {
  explicit Planned(const TrainingOptions& o) : PlannedStep(build_training_graph(model(), o)) {}
};

std::vector<float> values(const runtime::Executor& ex, TensorId t) {
  std::vector<float> f(kN);
  std::memcpy(f.data(), ex.address(t), sizeof(float) * kN);
  return f;
}

std::vector<TensorData> feeds() {
  return {TensorData::from_double(DType::f32, {kN}, {kX, kX + kN}), TensorData::from_double(DType::f32, {kN}, {kT, kT + kN})};
}

}  // namespace

TEST_CASE("three planned steps of sgd, momentum, adam and adamw with weight decay follow torch.optim, in place") {
  for (Optimizer opt : {Optimizer::sgd, Optimizer::momentum, Optimizer::adam, Optimizer::adamw}) {
    for (double wd : {0.0, 0.1}) {
      INFO(optimizer_name(opt) << " weight_decay " << wd);
      const TrainingOptions o = options(opt, opt == Optimizer::adam || opt == Optimizer::adamw ? 0.05 : 0.2, wd);
      Planned p(o);
      const TrainingGraph& tg = p.tg;
      runtime::Executor& ex = *p.ex;
      const TensorId w = tg.param_grads.at(0).first, updated = tg.updated_weights.at(0);
      std::byte* const at = ex.address(w);
      CHECK(ex.address(updated) == at);  // the update is the weight's own storage
      TorchOptim want(o);
      std::vector<float> before = values(ex, w);
      for (int s = 1; s <= 3; ++s) {
        CAPTURE(s);
        ex.run(feeds());
        want.run();
        const std::vector<float> got = values(ex, w);
        CHECK(ex.address(w) == at);
        CHECK(got != before);  // it trains: the next step starts from these weights
        for (int i = 0; i < kN; ++i) CHECK(got[static_cast<std::size_t>(i)] == doctest::Approx(want.w[i]).epsilon(2e-5));
        before = got;
      }
      CHECK(ex.stats().staged_ops == 0);
      CHECK(ex.stats().inplace_ops >= 1);
    }
  }
}

TEST_CASE("the unshared reference executor also updates weights in place, so both train the same") {
  const TrainingOptions o = options(Optimizer::adamw, 0.05, 0.1);
  const TrainingGraph tg = build_training_graph(model(), o);
  runtime::HostBackend backend;
  runtime::Executor ex(tg.graph, planner::Plan{}, backend, {.unshared = true});
  TorchOptim want(o);
  for (int s = 0; s < 3; ++s) {
    ex.run(feeds());
    want.run();
  }
  const auto got = values(ex, tg.updated_weights.at(0));
  for (int i = 0; i < kN; ++i) CHECK(got[static_cast<std::size_t>(i)] == doctest::Approx(want.w[i]).epsilon(2e-5));
}

TEST_CASE("a micro-step adds its gradient into the accumulator, and the optimizer steps on the sum") {
  const TrainingOptions o = options(Optimizer::sgd, 0.2, 0.0, 2);
  Planned p(o);
  const TrainingGraph& tg = p.tg;
  runtime::Executor& ex = *p.ex;
  const TensorId acc = tg.grad_accumulators.at(0), w = tg.param_grads.at(0).first;
  CHECK(ex.address(tg.param_grads[0].second) == ex.address(acc));
  for (float a : values(ex, acc)) CHECK(a == 0.0f);  // PyTorch's .grad before the first micro-step
  ex.run(feeds());
  TorchOptim want(o);
  want.run();  // from zero: the accumulated gradient is this micro-step's
  const auto g1 = values(ex, acc);
  for (int i = 0; i < kN; ++i) {
    CHECK(g1[static_cast<std::size_t>(i)] == doctest::Approx(2.0 * (kX[i] * kW0[i] - kT[i]) * kX[i] / kN).epsilon(1e-5));
    CHECK(values(ex, w)[static_cast<std::size_t>(i)] == doctest::Approx(want.w[i]).epsilon(2e-5));
  }
}
