// GPU tests of training steps on the CUDA backend against the CPU executor; exit 77 (skipped) without a device.
#include <doctest/doctest.h>

#ifdef MEMPLAN_HAVE_CUDA
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "analysis/import.hpp"
#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "planner/training_plan.hpp"
#include "runtime_allocator/cuda/cuda_executor.hpp"
#include "runtime_allocator/executor.hpp"
#include "runtime_allocator/npy.hpp"
#include "tests/runtime_allocator/training_fixture.hpp"

using namespace memplan;
using namespace memplan::runtime::testing;
using analysis::TensorData;
using analysis::TensorId;
using runtime::cuda::CudaExecutor;
using runtime::cuda::HostValue;

namespace {

std::vector<float> floats(const std::byte* p, std::size_t bytes) {
  std::vector<float> f(bytes / 4);
  std::memcpy(f.data(), p, f.size() * 4);
  return f;
}

// Largest |a-b| / max(1, |b|): absolute near zero, relative for large values.
double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = a.size() == b.size() ? 0.0 : INFINITY;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]) / std::max(1.0, std::fabs(static_cast<double>(b[i])));
    m = std::isnan(d) ? INFINITY : std::max(m, d);
  }
  return m;
}

// Adam's first step from zero moments: w - lr * g / (|g| + eps) up to the bias corrections, i.e. about lr * sign(g)
// for |g| >> eps. So where |g| is near eps (a gradient that is zero in exact arithmetic), a rounding difference of
// 1e-9 in g moves the new weight by up to lr. The updated weight is therefore checked (a) against the CPU executor's
// where |g| >= 1e-6, and (b) everywhere against the CPU formula applied to the GPU's own gradient.
double adam_first_step_diff(const analysis::Op& op, const std::vector<float>& w, const std::vector<float>& g,
                            const std::vector<float>& g_ref, const std::vector<float>& got, const std::vector<float>& want) {
  const float lr = static_cast<float>(op.attr_float("lr", 0.001)), b1 = static_cast<float>(op.attr_float("beta1", 0.9)),
              b2 = static_cast<float>(op.attr_float("beta2", 0.999)), eps = static_cast<float>(op.attr_float("epsilon", 1e-8));
  double m = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float nm = (1.0f - b1) * g[i], nv = (1.0f - b2) * g[i] * g[i];
    const float formula = w[i] - lr * (nm / (1.0f - b1)) / (std::sqrt(nv / (1.0f - b2)) + eps);
    m = std::max(m, static_cast<double>(std::fabs(got[i] - formula)));
    if (std::fabs(g_ref[i]) >= 1e-6f) m = std::max(m, static_cast<double>(std::fabs(got[i] - want[i])));
  }
  return m;
}

struct Reference {
  runtime::HostBackend backend;
  std::unique_ptr<runtime::Executor> ex;
  std::vector<TensorData> outputs;
  std::vector<float> values(const analysis::Graph& g, TensorId t) const { return floats(ex->address(t), g.tensors[t].bytes()); }
};

}  // namespace

TEST_CASE(
    "one training step on the GPU gives the CPU executor's gradients and "
    "updated weights within 1e-4, under every strategy") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  for (const std::string name : {"tiny_mlp", "tiny_cnn", "tiny_gpt"}) {
    for (auto opt : {analysis::Optimizer::sgd, analysis::Optimizer::adam}) {
      const auto tg = training(name, opt);
      const auto in = feeds(name, tg.graph);
      Reference ref;
      ref.ex =
          std::make_unique<runtime::Executor>(tg.graph, planner::Plan{}, ref.backend, runtime::ExecOptions{.unshared = true});
      ref.outputs = ref.ex->run(in);
      std::map<std::string, HostValue> feed;
      for (std::size_t k = 0; k < in.size(); ++k)
        feed[tg.graph.tensors[tg.graph.inputs[k]].name] = HostValue{in[k].dtype, in[k].dims, in[k].bytes};

      planner::TrainingPlanOptions base;
      const auto none = planner::plan_training(tg, base);
      base.strategy = "sqrt";
      const auto sqrt_plan = planner::plan_training(tg, base);
      // A budget between sqrt's peak and no remat's: optimal and swap must trade memory for work.
      const std::uint64_t budget = (none.peak_bytes + std::min(sqrt_plan.peak_bytes, none.peak_bytes)) / 2;
      std::vector<planner::TrainingPlanResult> plans{none, sqrt_plan};
      for (const char* strategy : {"optimal", "swap"}) {
        planner::TrainingPlanOptions po;
        po.strategy = strategy;
        po.budget_bytes = budget;
        try {
          plans.push_back(planner::plan_training(tg, po));
        } catch (const Error& e) {  // a budget this tight may be out of reach for a strategy
          MESSAGE(name << " " << strategy << " at " << budget << " B not planned: " << e.what());
          po.budget_bytes.reset();
          plans.push_back(planner::plan_training(tg, po));
        }
      }
      for (const auto& r : plans) {
        INFO(name << " " << std::string(analysis::optimizer_name(opt)) << " strategy " << r.strategy);
        REQUIRE(r.report.valid);
        CudaExecutor ex(r.graph, r.plan);
        const auto got = ex.run(feed);
        REQUIRE(got.size() == ref.outputs.size());
        const double loss_diff = max_rel_diff(floats(got[0].bytes.data(), got[0].bytes.size()),
                                              floats(ref.outputs[0].bytes.data(), ref.outputs[0].bytes.size()));
        CHECK(loss_diff <= 1e-5);
        double worst_grad = 0.0, worst_weight = 0.0;
        for (std::size_t k = 0; k < tg.param_grads.size(); ++k) {
          const auto [w, gt] = tg.param_grads[k];
          const auto gv = ex.read(gt);
          const double dg = max_rel_diff(floats(gv.bytes.data(), gv.bytes.size()), ref.values(tg.graph, gt));
          INFO("gradient of " << tg.graph.tensors[w].name);
          CHECK(dg <= 1e-4);
          worst_grad = std::max(worst_grad, dg);
          const TensorId u = k < tg.updated_weights.size() ? tg.updated_weights[k] : analysis::kNoTensor;
          if (u == analysis::kNoTensor) continue;
          const auto uv = ex.read(u);
          const auto updated = floats(uv.bytes.data(), uv.bytes.size());
          const auto& update_op = tg.graph.ops[tg.graph.tensors[u].producer];
          const double du = update_op.type == "AdamUpdate"
                                ? adam_first_step_diff(update_op, ref.values(tg.graph, update_op.inputs[0]),
                                                       floats(gv.bytes.data(), gv.bytes.size()), ref.values(tg.graph, gt),
                                                       updated, ref.values(tg.graph, u))
                                : max_rel_diff(updated, ref.values(tg.graph, u));
          CHECK(du <= 1e-4);
          worst_weight = std::max(worst_weight, du);
        }
        CHECK(ex.stats().arena_bytes == r.plan.arena_bytes);
        MESSAGE(name << " " << std::string(analysis::optimizer_name(opt)) << " " << r.strategy << ": arena " << r.plan.arena_bytes
                     << " B, recompute ops " << r.recompute_ops << ", swapped " << r.swapped_tensors << ", loss diff "
                     << loss_diff << ", worst gradient diff " << worst_grad << ", worst updated-weight diff " << worst_weight);
      }
    }
  }
}

#endif  // MEMPLAN_HAVE_CUDA
