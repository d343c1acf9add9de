// fp16 dynamic loss scaling (GradScaler) on the executors: a step whose fp16 gradients overflow is skipped and halves
// the scale; a clean step updates as without scaling; the scale grows after growth_interval clean steps; and the CUDA
// backend runs the same steps as the CPU executor (that case exits with 77, skipped, without a CUDA device).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "analysis/training.hpp"
#include "planner/training_plan.hpp"
#include "runtime_allocator/executor.hpp"
#include "tests/analysis/test_training_fixture.hpp"
#include "tests/runtime_allocator/training_fixture.hpp"
#ifdef MEMPLAN_HAVE_CUDA
#include "runtime_allocator/cuda/cuda_backend.hpp"
#endif

using namespace memplan;
using namespace memplan::analysis;
using memplan::analysis::testing::GraphBuilder;

namespace {

// y = x @ W, x [4, 8], W [8, 4] with values in the graph (an initializer as exporters write it): under fp16 autocast
// the product, its gradient and W's gradient before its Cast back are fp16.
Graph model() {
  GraphBuilder b;
  const auto x = b.input("x", {4, 8});
  const auto w = b.weight("W", {8, 4});
  std::vector<double> v(32);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.05 * static_cast<double>(static_cast<int>(i % 7) - 3);
  b.g.tensors[w].data = std::make_shared<TensorData>(TensorData::from_double(DType::f32, {8, 4}, v));
  b.g.tensors[w].external_data = true;
  b.output(b.op1("MatMul", {x, w}, "y", {4, 4}));
  return b.g;
}

// x in [-0.5, 0.5], so |y| <= 0.6; the MSE target is `target` everywhere. With the scale 65536, dY = 2 (y - t) / 16 *
// 65536: for t = 0.1 at most 5734 and dW at most 11468 (clean); for t = 1e4 beyond fp16's 65504 (inf).
std::vector<TensorData> feeds(double target) {
  std::vector<double> x(32);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.5 * std::sin(static_cast<double>(i));
  return {TensorData::from_double(DType::f32, {4, 8}, x), TensorData::from_double(DType::f32, {4, 4}, std::vector<double>(16, target))};
}

TrainingGraph training(Optimizer opt, bool scaling, std::int64_t growth_interval = 2000) {
  TrainingOptions o;
  o.precision = Precision::fp16;
  o.loss_scaling = scaling;
  o.optimizer = opt;
  o.learning_rate = 0.1;
  TrainingGraph tg = build_training_graph(model(), o);
  for (Op& op : tg.graph.ops)
    if (op.type == memplan_ops::kAmpUpdateScale) op.attrs["growth_interval"].i = growth_interval;
  return tg;
}

template <class T>
T scalar(const runtime::Executor& ex, TensorId t) {
  T v{};
  std::memcpy(&v, ex.address(t), sizeof v);
  return v;
}

std::vector<float> floats(const runtime::Executor& ex, TensorId t, std::size_t n) {
  std::vector<float> f(n);
  std::memcpy(f.data(), ex.address(t), n * sizeof(float));
  return f;
}

// The training step planned (strategy none, verified) on the CPU executor.
struct Planned : runtime::testing::PlannedStep {
  using PlannedStep::PlannedStep;
  TensorId weight() const { return tg.param_grads.at(0).first; }
};

}  // namespace

TEST_CASE("loss scaling: a step whose fp16 gradients overflow is skipped and halves the scale, twice") {
  for (Optimizer opt : {Optimizer::sgd, Optimizer::momentum, Optimizer::adam}) {
    CAPTURE(std::string(optimizer_name(opt)));
    Planned p(training(opt, true));
    runtime::Executor& ex = *p.ex;
    const std::vector<float> w0 = floats(ex, p.weight(), 32);
    CHECK(scalar<float>(ex, p.tg.loss_scale) == 65536.0f);
    for (float want_scale : {32768.0f, 16384.0f}) {
      ex.run(feeds(1e4));
      CHECK(scalar<float>(ex, p.tg.found_inf) == 1.0f);
      CHECK(scalar<float>(ex, p.tg.loss_scale) == want_scale);
      CHECK(scalar<std::int32_t>(ex, p.tg.growth_tracker) == 0);
      CHECK(floats(ex, p.weight(), 32) == w0);  // the update was skipped
      for (TensorId s : p.tg.optimizer_state)
        if (s != p.tg.loss_scale && s != p.tg.found_inf && s != p.tg.growth_tracker)
          for (float v : floats(ex, s, p.r.graph.tensors[s].element_count())) CHECK(v == 0.0f);  // no moment, no step count
    }
  }
}

TEST_CASE("loss scaling: a clean step updates as without scaling, within fp16 tolerance, and counts toward growth") {
  for (Optimizer opt : {Optimizer::sgd, Optimizer::momentum, Optimizer::adam}) {
    CAPTURE(std::string(optimizer_name(opt)));
    Planned scaled(training(opt, true, 2)), plain(training(opt, false));
    scaled.ex->run(feeds(0.1));
    plain.ex->run(feeds(0.1));
    CHECK(scalar<float>(*scaled.ex, scaled.tg.found_inf) == 0.0f);
    CHECK(scalar<float>(*scaled.ex, scaled.tg.loss_scale) == 65536.0f);
    CHECK(scalar<std::int32_t>(*scaled.ex, scaled.tg.growth_tracker) == 1);
    const auto got = floats(*scaled.ex, scaled.weight(), 32), want = floats(*plain.ex, plain.weight(), 32);
    const auto w0 = model().tensors[1].data->as_double();
    double moved = 0.0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      CHECK(got[i] == doctest::Approx(want[i]).epsilon(2e-3).scale(0.01));
      moved = std::max(moved, std::fabs(static_cast<double>(got[i]) - w0[i]));
    }
    CHECK(moved > 1e-3);  // it trained
    // A second clean step reaches growth_interval (2 here): the scale doubles and the tracker restarts.
    scaled.ex->run(feeds(0.1));
    CHECK(scalar<float>(*scaled.ex, scaled.tg.loss_scale) == 131072.0f);
    CHECK(scalar<std::int32_t>(*scaled.ex, scaled.tg.growth_tracker) == 0);
  }
}

TEST_CASE("loss scaling: the unscaled gradient is the scaled one's buffer, unscaled in place (GradScaler's unscale_)") {
  Planned p(training(Optimizer::sgd, true));
  const Graph& g = p.r.graph;
  std::size_t unscales = 0;
  for (const Op& op : g.ops) {
    if (op.type != memplan_ops::kAmpUnscale) continue;
    ++unscales;
    CHECK(p.ex->address(op.outputs.at(0)) == p.ex->address(op.inputs.at(0)));
    CHECK(p.ex->address(op.outputs.at(1)) == p.ex->address(p.tg.found_inf));
  }
  CHECK(unscales == p.tg.param_grads.size());
  CHECK(p.ex->address(p.tg.param_grads.at(0).second) != nullptr);
}

#ifdef MEMPLAN_HAVE_CUDA
TEST_CASE("loss scaling on the GPU: overflowing and clean fp16 steps match the CPU executor") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  for (double target : {1e4, 0.1}) {
    CAPTURE(target);
    Planned cpu(training(Optimizer::momentum, true));
    const auto& r = cpu.r;
    runtime::cuda::CudaBackend backend;
    runtime::Executor gpu(r.graph, r.plan, backend);
    std::map<std::string, TensorData> by_name;
    const auto f = feeds(target);
    for (std::size_t k = 0; k < f.size(); ++k) by_name[r.graph.tensors[r.graph.inputs[k]].name] = f[k];
    for (int step = 0; step < 2; ++step) {
      cpu.ex->run(f);
      gpu.run(by_name);
    }
    for (TensorId t : {cpu.tg.loss_scale, cpu.tg.found_inf}) CHECK(gpu.read(t).as_double() == cpu.ex->read(t).as_double());
    CHECK(gpu.read(cpu.tg.growth_tracker).as_double() == cpu.ex->read(cpu.tg.growth_tracker).as_double());
    const auto got = gpu.read(cpu.weight()).as_double(), want = cpu.ex->read(cpu.weight()).as_double();
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-3).scale(0.01));
  }
}
#endif
