// The CPU loss kernels: cross-entropy values and gradients against an independent computation in double
// (ignore_index, class axis 1 of [N, C, H, W], a language model's [B, S, V]), planned == unshared, the sum loss.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "analysis/training.hpp"
#include "planner/training_plan.hpp"
#include "runtime_allocator/executor.hpp"
#include "tests/runtime_allocator/op_graph.hpp"

using namespace memplan;
using namespace memplan::runtime;
using analysis::DType;
using analysis::TensorData;
using analysis::TensorId;

namespace {

using Dims = std::vector<std::int64_t>;

// logits y = x + w with w a trainable zero weight: w's gradient is dloss/dlogits.
analysis::TrainingGraph ce_step(const Dims& dims, std::optional<std::int64_t> axis, analysis::Loss loss = analysis::Loss::ce) {
  testing::OpGraph b;
  b.g.name = "logits";
  const TensorId x = b.tensor("x", DType::f32, dims, analysis::TensorRole::input);
  b.g.inputs.push_back(x);
  const TensorId w = b.tensor("w", DType::f32, dims, analysis::TensorRole::weight);  // no value in the graph: trains
  b.op("Add", "", {x, w}, {b.result("y", DType::f32, dims)});
  analysis::TrainingOptions to;
  to.optimizer = analysis::Optimizer::none;
  to.loss = loss;
  to.class_axis = axis;
  analysis::TrainingGraph tg = analysis::build_training_graph(b.g, to);
  std::int64_t n = 1;
  for (auto d : dims) n *= d;
  tg.graph.tensors[w].data =
      std::make_shared<TensorData>(TensorData::from_double(DType::f32, dims, std::vector<double>(static_cast<std::size_t>(n), 0.0)));
  return tg;
}

std::vector<float> read(const Executor& ex, const analysis::Graph& g, TensorId t) {
  std::vector<float> v(g.tensors[t].element_count());
  std::memcpy(v.data(), ex.address(t), v.size() * sizeof(float));
  return v;
}

struct Case {
  Dims dims;
  std::int64_t axis;          // the class axis the loss uses
  std::vector<double> labels;  // -100: ignored
  bool by_default = true;      // axis is the default one (else passed as --class-axis)
};

// The independent reference: loss = mean over labelled rows of log(sum exp) - y[label]; dlogits.
void reference(const Case& c, const std::vector<float>& x, double& loss, std::vector<double>& grad) {
  std::int64_t outer = 1, classes = c.dims[static_cast<std::size_t>(c.axis)], inner = 1;
  for (std::size_t k = 0; k < c.dims.size(); ++k) {
    if (static_cast<std::int64_t>(k) < c.axis) outer *= c.dims[k];
    if (static_cast<std::int64_t>(k) > c.axis) inner *= c.dims[k];
  }
  grad.assign(x.size(), 0.0);
  double total = 0;
  int valid = 0;
  for (double l : c.labels) valid += l >= 0;
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      const auto label = static_cast<std::int64_t>(c.labels[static_cast<std::size_t>(o * inner + i)]);
      if (label < 0) continue;
      const auto at = [&](std::int64_t k) { return static_cast<std::size_t>((o * classes + k) * inner + i); };
      double s = 0;
      for (std::int64_t k = 0; k < classes; ++k) s += std::exp(static_cast<double>(x[at(k)]));
      total += std::log(s) - x[at(label)];
      for (std::int64_t k = 0; k < classes; ++k) grad[at(k)] = (std::exp(x[at(k)]) / s - (k == label)) / valid;
    }
  loss = total / valid;
}

void check_case(const Case& c) {
  const auto tg = ce_step(c.dims, c.by_default ? std::nullopt : std::optional<std::int64_t>(c.axis));
  const auto& g = tg.graph;
  std::int64_t n = 1;
  for (auto d : c.dims) n *= d;
  std::mt19937 rng(42);
  std::vector<float> x(static_cast<std::size_t>(n));
  for (auto& v : x) v = std::uniform_real_distribution<float>(-4.0f, 4.0f)(rng);
  Dims label_dims = c.dims;
  label_dims.erase(label_dims.begin() + c.axis);
  REQUIRE(g.inputs.size() == 2);
  REQUIRE(g.tensors[g.inputs[1]].shape() == label_dims);
  const std::vector<TensorData> feeds = {TensorData::from_double(DType::f32, c.dims, std::vector<double>(x.begin(), x.end())),
                                         TensorData::from_double(DType::i64, label_dims, c.labels)};
  double want = 0;
  std::vector<double> want_grad;
  reference(c, x, want, want_grad);
  HostBackend unshared_backend;
  Executor unshared(g, planner::Plan{}, unshared_backend, {.unshared = true});
  unshared.run(feeds);
  const float loss = read(unshared, g, tg.loss)[0];
  CHECK(loss == doctest::Approx(want).epsilon(1e-5));
  REQUIRE(tg.param_grads.size() == 1);
  const auto grad = read(unshared, g, tg.param_grads[0].second);
  for (std::size_t i = 0; i < grad.size(); ++i) {
    INFO("dlogits[" << i << "]");
    CHECK(std::fabs(grad[i] - want_grad[i]) <= 1e-6 + 1e-5 * std::fabs(want_grad[i]));
  }
  // The planned step (dlogits may take the logits' bytes) gives the same bits.
  const planner::TrainingPlanResult r = planner::plan_training(tg, {});
  REQUIRE(r.report.valid);
  HostBackend backend;
  Executor planned(r.graph, r.plan, backend);
  planned.run(feeds);
  CHECK(read(planned, r.graph, tg.loss) == read(unshared, g, tg.loss));
  CHECK(read(planned, r.graph, tg.param_grads[0].second) == grad);
}

}  // namespace

TEST_CASE("cross-entropy over [N, C] with an ignored row matches an independent computation") {
  check_case({{4, 7}, 1, {3, -100, 0, 6}});
}

TEST_CASE("cross-entropy over axis 1 of [N, C, H, W] (strided rows) matches an independent computation") {
  check_case({{2, 5, 3, 2}, 1, {0, 4, 1, 2, 3, -100, 4, 4, 0, 1, 2, 3}});
}

TEST_CASE("cross-entropy over a language model's [B, S, V] logits (the last axis) matches an independent computation") {
  std::vector<double> labels;
  for (int k = 0; k < 2 * 6; ++k) labels.push_back(k == 5 ? -100 : (k * 37) % 301);
  check_case({{2, 6, 301}, 2, labels});
}

TEST_CASE("cross-entropy with --class-axis 1 on a rank-3 output") {
  check_case({{2, 4, 3}, 1, {0, 1, 3, 2, 2, -100}, false});
}

TEST_CASE("cross-entropy with every row ignored is NaN, as PyTorch's mean over no element, and its gradient zero") {
  const auto tg = ce_step({2, 3}, std::nullopt);
  HostBackend backend;
  Executor ex(tg.graph, planner::Plan{}, backend, {.unshared = true});
  ex.run(std::vector<TensorData>{TensorData::from_double(DType::f32, {2, 3}, {1, 2, 3, 4, 5, 6}),
                                 TensorData::from_double(DType::i64, {2}, {-100, -100})});
  CHECK(std::isnan(read(ex, tg.graph, tg.loss)[0]));
  for (float v : read(ex, tg.graph, tg.param_grads[0].second)) CHECK(v == 0.0f);
}

TEST_CASE("a label outside the classes is an error naming the op") {
  const auto tg = ce_step({2, 3}, std::nullopt);
  HostBackend backend;
  Executor ex(tg.graph, planner::Plan{}, backend, {.unshared = true});
  CHECK_THROWS_WITH_AS(ex.run(std::vector<TensorData>{TensorData::from_double(DType::f32, {2, 3}, {1, 2, 3, 4, 5, 6}),
                               TensorData::from_double(DType::i64, {2}, {0, 3})}),
                       doctest::Contains("label 3 is outside the 3 classes"), Error);
}

TEST_CASE("--loss none sums a non-scalar output and seeds its gradient with ones") {
  const auto tg = ce_step({2, 3}, std::nullopt, analysis::Loss::none);
  HostBackend backend;
  Executor ex(tg.graph, planner::Plan{}, backend, {.unshared = true});
  ex.run(std::vector<TensorData>{TensorData::from_double(DType::f32, {2, 3}, {1, 2, 3, 4, 5, -6})});
  CHECK(read(ex, tg.graph, tg.loss)[0] == doctest::Approx(9.0));
  for (float v : read(ex, tg.graph, tg.param_grads[0].second)) CHECK(v == 1.0f);
}

TEST_CASE("--loss none on a model whose output is its scalar loss: the output is the loss, its gradient seeded with ones") {
  testing::OpGraph b;
  const TensorId x = b.tensor("x", DType::f32, {2, 3}, analysis::TensorRole::input);
  b.g.inputs.push_back(x);
  const TensorId w = b.tensor("w", DType::f32, {2, 3}, analysis::TensorRole::weight);
  const TensorId y = b.tensor("y", DType::f32, {2, 3}, analysis::TensorRole::activation);
  b.op("Mul", "", {x, w}, {y});
  b.op("ReduceMean", "", {y}, {b.result("model_loss", DType::f32, {})}, {{"keepdims", testing::int_attr(0)}});
  analysis::TrainingOptions to;
  to.optimizer = analysis::Optimizer::none;
  to.loss = analysis::Loss::none;
  analysis::TrainingGraph tg = analysis::build_training_graph(b.g, to);
  tg.graph.tensors[w].data = std::make_shared<TensorData>(TensorData::from_double(DType::f32, {2, 3}, {1, 1, 2, 2, 3, 3}));
  HostBackend backend;
  Executor ex(tg.graph, planner::Plan{}, backend, {.unshared = true});
  const std::vector<double> xs{1, 2, 3, 4, 5, 6};
  ex.run(std::vector<TensorData>{TensorData::from_double(DType::f32, {2, 3}, xs)});
  CHECK(tg.graph.tensors[tg.loss].name == "model_loss");
  CHECK(read(ex, tg.graph, tg.loss)[0] == doctest::Approx((1 + 2 + 6 + 8 + 15 + 18) / 6.0));
  REQUIRE(tg.param_grads.size() == 1);
  const auto grad = read(ex, tg.graph, tg.param_grads[0].second);
  for (std::size_t i = 0; i < grad.size(); ++i) CHECK(grad[i] == doctest::Approx(xs[i] / 6.0));
}
