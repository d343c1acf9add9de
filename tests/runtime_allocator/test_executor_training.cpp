// Tests of training steps on the CPU executor: gradients against finite differences, plans bit-equal to unshared.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "analysis/import.hpp"
#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "planner/training_plan.hpp"
#include "runtime_allocator/executor.hpp"
#include "runtime_allocator/npy.hpp"
#include "tests/runtime_allocator/training_fixture.hpp"

using namespace memplan;
using namespace memplan::runtime;
using namespace memplan::runtime::testing;
using analysis::TensorData;
using analysis::TensorId;

namespace {

// Values of tensor t after a run (host backend: addresses are host memory).
std::vector<float> read(const Executor& ex, const analysis::Graph& g, TensorId t) {
  std::vector<float> v(g.tensors[t].element_count());
  std::memcpy(v.data(), ex.address(t), v.size() * sizeof(float));
  return v;
}

float loss_with(const analysis::TrainingGraph& tg, const planner::Plan& p, const std::vector<TensorData>& in, TensorId w,
                std::size_t i, float delta) {
  analysis::Graph g = tg.graph;
  auto data = std::make_shared<TensorData>(*g.tensors[w].data);
  float v;
  std::memcpy(&v, data->bytes.data() + i * 4, 4);
  v += delta;
  std::memcpy(data->bytes.data() + i * 4, &v, 4);
  g.tensors[w].data = data;
  HostBackend backend;
  Executor ex(g, p, backend, {.unshared = true});
  ex.run(in);
  return read(ex, g, tg.loss)[0];
}
}  // namespace

TEST_CASE("training steps: weight gradients agree with central finite differences") {
  for (const std::string name : {"tiny_mlp", "tiny_cnn", "tiny_gpt"}) {
    INFO("model " << name);
    const auto tg = training(name);
    const auto in = feeds(name, tg.graph);
    planner::Plan none;  // unshared: the graph's own order
    HostBackend backend;
    Executor ex(tg.graph, none, backend, {.unshared = true});
    ex.run(in);
    std::size_t checked = 0;
    for (std::size_t k = 0; k < tg.param_grads.size(); k += std::max<std::size_t>(1, tg.param_grads.size() / 4)) {
      const TensorId w = tg.param_grads[k].first, gt = tg.param_grads[k].second;  // INFO captures w: no binding (clang 14)
      const auto grad = read(ex, tg.graph, gt);
      const std::size_t i = grad.size() / 2;
      const float eps = 1e-2f;
      const float fd = (loss_with(tg, none, in, w, i, eps) - loss_with(tg, none, in, w, i, -eps)) / (2 * eps);
      INFO("weight " << tg.graph.tensors[w].name << "[" << i << "]: gradient " << grad[i] << ", finite difference " << fd);
      CHECK(std::fabs(fd - grad[i]) <= 0.05f * std::max(std::fabs(fd), std::fabs(grad[i])) + 2e-4f);
      ++checked;
    }
    CHECK(checked >= 2);
  }
}

TEST_CASE("training plans of every strategy give bit-identical losses, gradients and updated weights") {
  for (const std::string name : {"tiny_mlp", "tiny_cnn", "tiny_gpt"}) {
    for (auto opt : {analysis::Optimizer::sgd, analysis::Optimizer::adam}) {
      const auto tg = training(name, opt);
      const auto in = feeds(name, tg.graph);
      HostBackend ref_backend;
      Executor ref(tg.graph, planner::Plan{}, ref_backend, {.unshared = true});
      const auto want = ref.run(in);
      for (const auto& strategy : planner::training_strategies()) {
        INFO(name << " " << std::string(analysis::optimizer_name(opt)) << " strategy " << strategy);
        const auto planned = plan_strategy(tg, strategy);
        if (!planned) continue;
        const planner::TrainingPlanResult& r = *planned;
        HostBackend backend;
        Executor ex(r.graph, r.plan, backend);
        const auto got = ex.run(in);
        REQUIRE(got.size() == want.size());
        for (std::size_t k = 0; k < got.size(); ++k) CHECK(got[k].bytes == want[k].bytes);
        for (const auto& [w, gt] : tg.param_grads) CHECK(read(ex, r.graph, gt) == read(ref, tg.graph, gt));
        for (TensorId u : tg.updated_weights)
          if (u != analysis::kNoTensor) CHECK(read(ex, r.graph, u) == read(ref, tg.graph, u));
        CHECK(ex.stats().touched_bytes <= r.plan.arena_bytes);
        CHECK(ex.stats().touched_bytes + r.plan.alignment > r.plan.arena_bytes);  // the whole planned peak is used
        MESSAGE(name << " " << std::string(analysis::optimizer_name(opt)) << " " << strategy << ": arena " << r.plan.arena_bytes
                     << " B, recompute ops " << r.recompute_ops << ", swapped " << r.swapped_tensors << ", in-place "
                     << ex.stats().inplace_ops << ", staged " << ex.stats().staged_ops);
      }
    }
  }
}
