// Strategy `exact` beyond 16 stages: on a generated chain of 10 MatMul/Tanh layers (20 forward stages) the MILP's
// own plan (choice_from_exact, each stage rebuilt at most once) and the strategy's plan verify, run bit-equal to the
// unshared keep-all step on the CPU executor, and the strategy's estimated step is never slower than `optimal`'s.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "analysis/cost.hpp"
#include "analysis/liveness.hpp"
#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "planner/exact/remat_exact.hpp"
#include "planner/training_plan.hpp"
#include "runtime_allocator/executor.hpp"
#include "tests/runtime_allocator/op_graph.hpp"

using namespace memplan;
using namespace memplan::planner;
using analysis::TensorData;
using analysis::TensorId;

namespace {

constexpr int kLayers = 10;
constexpr std::int64_t kBatch = 16;

// h_{k+1} = tanh(h_k W_k), widths varying between 8 and 64 so the stages differ in bytes and FLOPs.
analysis::TrainingGraph chain() {
  std::mt19937 rng(24);
  runtime::testing::OpGraph b;
  b.g.opset = 17;
  std::int64_t width = 32;
  TensorId h = b.input("x", runtime::testing::random_f32({kBatch, width}, rng));
  for (int k = 0; k < kLayers; ++k) {
    const std::int64_t next = 8 * (1 + (k * 5 + 3) % 8);
    const std::string p = "layer" + std::to_string(k) + "/";
    const TensorId w = b.constant(p + "w", runtime::testing::random_f32({width, next}, rng, -0.4, 0.4));
    const TensorId mm = b.tensor(p + "mm", analysis::DType::f32, {kBatch, next}, analysis::TensorRole::activation);
    const TensorId out = k + 1 == kLayers ? b.result("y", analysis::DType::f32, {kBatch, next})
                                          : b.tensor(p + "out", analysis::DType::f32, {kBatch, next}, analysis::TensorRole::activation);
    b.op("MatMul", "", {h, w}, {mm});
    b.op("Tanh", "", {mm}, {out});
    h = out;
    width = next;
  }
  analysis::TrainingOptions to;
  to.optimizer = analysis::Optimizer::sgd;
  return analysis::build_training_graph(analysis::infer_shapes(b.g, {}), to);
}

std::vector<float> read(const runtime::Executor& ex, const analysis::Graph& g, TensorId t) {
  std::vector<float> v(g.tensors[t].element_count());
  std::memcpy(v.data(), ex.address(t), v.size() * sizeof(float));
  return v;
}

// The planned step against the unshared keep-all step: outputs, weight gradients and updated weights bit for bit.
void check_bit_equal(const analysis::TrainingGraph& tg, const Graph& planned, const Plan& plan) {
  std::mt19937 rng(5);
  std::vector<TensorData> in;
  for (TensorId t : tg.graph.inputs) in.push_back(runtime::testing::random_f32(tg.graph.tensors[t].shape(), rng));
  runtime::HostBackend ref_backend, backend;
  runtime::Executor ref(tg.graph, Plan{}, ref_backend, {.unshared = true});
  runtime::Executor ex(planned, plan, backend);
  const auto want = ref.run(in);
  const auto got = ex.run(in);
  REQUIRE(got.size() == want.size());
  for (std::size_t k = 0; k < got.size(); ++k) CHECK(got[k].bytes == want[k].bytes);
  for (const auto& [w, gt] : tg.param_grads) CHECK(read(ex, planned, gt) == read(ref, tg.graph, gt));
  for (TensorId u : tg.updated_weights)
    if (u != analysis::kNoTensor) CHECK(read(ex, planned, u) == read(ref, tg.graph, u));
}

TrainingPlanOptions options(const std::string& strategy) {
  TrainingPlanOptions o;
  o.strategy = strategy;
  o.library_bytes = 0;
  o.assign.exact_pack_seconds = 0.0;
  o.schedule.kind = ScheduleKind::file;
  o.exact_nodes = 5;
  o.exact_seconds = 5.0;  // a cap for slow (sanitized) builds
  return o;
}

}  // namespace

TEST_CASE("exact remat on 20 stages: the MILP's once-plan verifies and runs bit-equal to keep-all") {
  if (!exact_remat_available()) return;
  const analysis::TrainingGraph tg = chain();
  const Graph& g = tg.graph;
  const std::vector<OpId> order = analysis::topological_order(g);
  std::vector<double> flops(g.ops.size());
  for (OpId o = 0; o < g.ops.size(); ++o) flops[o] = analysis::op_cost(g, o).flops;
  const ForwardStages s = find_forward_stages(g, order, flops, 256);
  REQUIRE(s.size() > 16);
  const StageChain c = stage_chain(s);
  const std::uint64_t full = evaluate_segments(s, {{0, static_cast<std::uint32_t>(s.size() - 1), false}}).peak_bytes;
  const std::uint64_t floor = min_segment_peak(s);
  const std::uint64_t budget = floor + (full - floor) / 3;
  const SegmentPlan dp = optimal_segments(s, budget);
  REQUIRE_FALSE(dp.empty());
  const ChainPoint start = chain_point_of_segments(c, dp);
  const double dp_flops = chain_flops(c, start, budget);
  REQUIRE(std::isfinite(dp_flops));
  ExactRematOptions o;
  o.once = true;
  o.max_nodes = 5;
  const ExactRematResult r = exact_remat(c, budget, o, &start);
  REQUIRE((r.status == ExactStatus::optimal || r.status == ExactStatus::feasible));
  CHECK(r.recompute_flops <= dp_flops * (1 + 1e-9));
  CHECK(r.lower_bound <= r.recompute_flops * (1 + 1e-9));
  // Each stage rebuilt at most once.
  for (std::size_t j = 0; j < s.size(); ++j) {
    int times = 0;
    for (std::size_t t = j; t < s.size(); ++t) times += r.rebuild[t][j] ? 1 : 0;
    CHECK(times <= 1);
  }
  const RematTransform tr = apply_remat(g, order, choice_from_exact(g, s, r));
  const analysis::Liveness live = analysis::analyze_liveness(tr.graph, tr.schedule, 256);
  const Plan plan = assign(tr.graph, live);
  const VerifyReport rep = verify_plan(tr.graph, plan);
  INFO("first problem: " << (rep.problems.empty() ? std::string("none") : rep.problems.front()));
  REQUIRE(rep.valid);
  check_bit_equal(tg, tr.graph, plan);
}

TEST_CASE("strategy exact on 20 stages: within the budget, verified, bit-equal, never a slower estimated step than optimal") {
  if (!exact_remat_available()) return;
  const analysis::TrainingGraph tg = chain();
  const TrainingPlanResult none = plan_training(tg, options("none"));
  const TrainingPlanResult least = plan_training(tg, options("optimal"));
  REQUIRE(least.peak_bytes < none.peak_bytes);
  for (int share : {1, 2}) {
    TrainingPlanOptions o = options("optimal");
    o.budget_bytes = least.peak_bytes + (none.peak_bytes - least.peak_bytes) * static_cast<std::uint64_t>(share) / 3;
    INFO("budget " << *o.budget_bytes);
    const TrainingPlanResult opt = plan_training(tg, o);
    o.strategy = "exact";
    const TrainingPlanResult ex = plan_training(tg, o);
    CHECK(ex.report.valid);
    CHECK(ex.total_device_bytes <= *o.budget_bytes);
    CHECK(ex.estimated_step_seconds <= opt.estimated_step_seconds * (1 + 1e-9));
    REQUIRE(ex.exact.ran);
    CHECK(ex.exact.stages > 16);
    CHECK(ex.exact.solves >= 1);
    CHECK((ex.exact.status == "optimal" || ex.exact.status == "feasible"));
    CHECK(ex.exact.milp_cost <= ex.exact.dp_cost * (1 + 1e-9));
    CHECK(ex.exact.lower_bound <= ex.exact.milp_cost * (1 + 1e-9));
    CHECK(ex.exact.gap >= 0.0);
    CHECK(ex.exact.gap <= 1.0);
    check_bit_equal(tg, ex.graph, ex.plan);
    MESSAGE("chain budget " << *o.budget_bytes << ": optimal " << opt.recompute_flops << " FLOPs, exact " << ex.recompute_flops << " (MILP "
                            << ex.exact.status << ", gap " << ex.exact.gap << ", used " << ex.exact.used << ", " << ex.exact.seconds << " s)");
  }
}
