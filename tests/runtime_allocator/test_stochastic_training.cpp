// Training steps of a stochastic-depth model (timm's DropPath as exported: RandomUniformLike + Add/Floor/Div/Mul,
// and a Bernoulli mask) and of an RMSNorm decoder block (Pow/ReduceMean/Add/Sqrt/Reciprocal, fused or not): every
// strategy's plan verifies and its step on the CPU gives the gradients of the keep-all step bit for bit, remat on a
// memory order included.
#include <doctest/doctest.h>

#include <cstring>
#include <random>

#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "planner/fusion.hpp"
#include "planner/training_plan.hpp"
#include "runtime_allocator/kernels/dropout_mask.hpp"
#include "runtime_allocator/executor.hpp"
#include "tests/runtime_allocator/op_graph.hpp"
#include "tests/runtime_allocator/training_fixture.hpp"
#include "tests/runtime_allocator/stochastic_models.hpp"

using namespace memplan;
using namespace memplan::runtime;
using namespace memplan::runtime::testing;
using analysis::DType;
using analysis::TensorData;
using analysis::TensorId;

namespace {

std::vector<float> read(const Executor& ex, const analysis::Graph& g, TensorId t) {
  std::vector<float> v(g.tensors[t].element_count());
  std::memcpy(v.data(), ex.address(t), v.size() * sizeof(float));
  return v;
}

std::vector<TensorData> step_feeds(const analysis::Graph& g, const TensorData& x, std::mt19937& rng) {
  std::vector<TensorData> v{x};
  for (std::size_t k = 1; k < g.inputs.size(); ++k) v.push_back(random_f32(g.tensors[g.inputs[k]].shape(), rng));
  return v;
}

struct Checked {
  std::size_t random_recomputed = 0;  // random ops recomputed over all plans
  std::size_t memory_order_remat = 0;  // plans that recompute on a memory order (not the file order)
};

// Every strategy's plan (the default memory schedule) verifies and its step gives the unshared keep-all step's
// gradients and updated weights bit for bit; at least one strategy recomputes.
Checked check_strategies(const analysis::TrainingGraph& tg, const std::vector<TensorData>& in) {
  HostBackend ref_backend;
  Executor ref(tg.graph, planner::Plan{}, ref_backend, {.unshared = true});
  const auto want = ref.run(in);
  std::size_t recomputing_plans = 0;
  Checked out;
  for (const auto& strategy : planner::training_strategies()) {
    INFO("strategy " << strategy);
    const auto planned = plan_strategy(tg, strategy);
    if (!planned) continue;
    const planner::TrainingPlanResult& r = *planned;
    recomputing_plans += r.recompute_ops > 0 ? 1 : 0;
    out.memory_order_remat += r.recompute_ops > 0 && r.schedule.method != "file" ? 1 : 0;
    for (const auto& t : r.recomputed)
      if (t.op_type == "RandomUniformLike" || t.op_type == "Bernoulli" || t.op_type == "Floor") ++out.random_recomputed;
    HostBackend backend;
    Executor ex(r.graph, r.plan, backend);
    const auto got = ex.run(in);
    REQUIRE(got.size() == want.size());
    for (std::size_t k = 0; k < got.size(); ++k) CHECK(got[k].bytes == want[k].bytes);
    for (const auto& [w, gt] : tg.param_grads) CHECK(read(ex, r.graph, gt) == read(ref, tg.graph, gt));
  }
  CHECK(recomputing_plans > 0);
  return out;
}

analysis::TrainingGraph train(const analysis::Graph& forward) {
  analysis::TrainingOptions to;
  to.optimizer = analysis::Optimizer::sgd;
  return analysis::build_training_graph(forward, to);
}

}  // namespace

TEST_CASE("stochastic depth: recomputed DropPath masks replay the forward's, so every plan's gradients equal keep-all's") {
  std::mt19937 rng(16);
  const OpGraph b = stochastic_depth_model(rng);
  const auto tg = train(analysis::infer_shapes(b.g, {}));
  const auto in = step_feeds(tg.graph, b.feeds[0], rng);
  CHECK(check_strategies(tg, in).random_recomputed > 0);  // some plan rebuilds the masks in backward: they must equal the forward's
}

TEST_CASE("stochastic depth: each step draws new masks, the same step replays them") {
  std::mt19937 rng(17);
  const OpGraph b = stochastic_depth_model(rng);
  const auto tg = train(analysis::infer_shapes(b.g, {}));
  const auto in = step_feeds(tg.graph, b.feeds[0], rng);
  // The executor's run count is the step: a second run of one executor draws new masks, a fresh executor's first
  // run replays the first.
  HostBackend backend;
  Executor ex(tg.graph, planner::Plan{}, backend, {.unshared = true});
  auto grads = [&](Executor& e) {
    e.run(in);
    std::vector<float> all;
    for (const auto& pg : tg.param_grads) {
      const auto v = read(e, tg.graph, pg.second);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  const auto step0 = grads(ex), step1 = grads(ex);
  HostBackend other_backend;
  Executor again(tg.graph, planner::Plan{}, other_backend, {.unshared = true});
  CHECK(grads(again) == step0);
  CHECK(step0 != step1);
}

TEST_CASE("RMSNorm decoder: Reciprocal/Sqrt/Pow forms train unfused and fused, every plan equal to keep-all") {
  std::mt19937 rng(18);
  const OpGraph b = rms_norm_decoder(rng);
  const analysis::Graph shaped = analysis::infer_shapes(b.g, {});
  SUBCASE("unfused (--no-fuse)") {
    const auto tg = train(shaped);
    bool reciprocal = false;
    for (const auto& op : tg.graph.ops) reciprocal = reciprocal || op.type == "Reciprocal";
    CHECK(reciprocal);
    // Recompute clones of Mul(xn, norm.weight) on a memory order that updates norm.weight early: the update waits for
    // them (order_reads_before_overwrites), or the clones would read the updated weight.
    CHECK(check_strategies(tg, step_feeds(tg.graph, b.feeds[0], rng)).memory_order_remat > 0);
  }
  SUBCASE("fused") {
    planner::FuseOptions fo;
    fo.training = true;
    const auto fused = planner::fuse_graph(shaped, fo);
    const auto tg = train(fused.graph);
    check_strategies(tg, step_feeds(tg.graph, b.feeds[0], rng));
  }
}
