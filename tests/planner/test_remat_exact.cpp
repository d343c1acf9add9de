// Tests of exact remat: the MILP equals the brute force of its model on small chains, and is never worse than the
// segment DP, whose plans are points of the model at no higher cost.
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "analysis/import.hpp"
#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "planner/exact/remat_exact.hpp"
#include "planner/training_plan.hpp"
#include "tests/planner/random_stages.hpp"

using namespace memplan;
using namespace memplan::planner;
using memplan::planner::testing::random_stages;

namespace {

std::uint64_t keep_all_peak(const ForwardStages& s) { return evaluate_segments(s, {Segment{0, static_cast<std::uint32_t>(s.size() - 1), false}}).peak_bytes; }

bool close(double a, double b) { return std::abs(a - b) <= 1e-6 * std::max(1.0, std::max(std::abs(a), std::abs(b))); }

}  // namespace

TEST_CASE("exact remat equals the brute force of its model on small chains") {
  std::mt19937 rng(18);
  int compared = 0, infeasible = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const std::size_t m = 1 + static_cast<std::size_t>(trial % 4);
    const StageChain c = stage_chain(random_stages(rng, m));
    std::uint64_t lo = 0, hi = 0;
    for (std::size_t i = 0; i < m; ++i) lo = std::max(lo, c.inner[i] + c.boundary[i] + c.extra[i]), hi += c.inner[i] + c.boundary[i] + c.extra[i];
    const std::uint64_t budget = lo / 2 + (hi - lo / 2) * static_cast<std::uint64_t>(trial % 5) / 4;
    const double brute = brute_force_remat(c, budget);
    const ExactRematResult e = exact_remat(c, budget);
    if (!exact_remat_available()) {
      CHECK(e.status == ExactStatus::not_built);
      continue;
    }
    INFO("trial " << trial << ", stages " << m << ", budget " << budget);
    if (std::isinf(brute)) {
      CHECK(e.status == ExactStatus::infeasible);
      ++infeasible;
      continue;
    }
    REQUIRE(e.status == ExactStatus::optimal);
    CHECK(close(e.recompute_flops, brute));
    CHECK(close(e.lower_bound, brute));
    ++compared;
  }
  if (exact_remat_available()) {
    CHECK(compared >= 15);
    CHECK(infeasible >= 1);
  }
}

TEST_CASE("the segment DP's plans are points of the exact model, and exact remat is never worse than the DP") {
  std::mt19937 rng(7);
  int strictly_better = 0;
  for (int trial = 0; trial < 30; ++trial) {
    const std::size_t m = 2 + static_cast<std::size_t>(trial % 7);
    const ForwardStages s = random_stages(rng, m);
    const StageChain c = stage_chain(s);
    const std::uint64_t full = keep_all_peak(s), floor = min_segment_peak(s);
    const std::uint64_t budget = floor + (full - std::min(full, floor)) * static_cast<std::uint64_t>(trial % 4) / 4;
    const SegmentPlan dp = optimal_segments(s, budget);
    REQUIRE_FALSE(dp.empty());
    const double dp_flops = evaluate_segments(s, dp).recompute_flops;
    INFO("trial " << trial << ", stages " << m << ", budget " << budget << ", DP FLOPs " << dp_flops);
    const double as_chain = chain_flops_of_segments(c, dp, budget);
    CHECK(std::isfinite(as_chain));
    CHECK(as_chain <= dp_flops * (1 + 1e-9));
    if (m <= 4) CHECK(brute_force_remat(c, budget) <= as_chain * (1 + 1e-9));
    if (!exact_remat_available()) continue;
    const RematGap g = remat_gap(s, budget);
    REQUIRE(g.exact.status == ExactStatus::optimal);
    CHECK(g.exact.recompute_flops <= as_chain * (1 + 1e-9) + 1e-3);
    CHECK(g.gap >= 0.0);
    CHECK(g.gap <= 1.0);
    strictly_better += g.exact.recompute_flops < dp_flops * (1 - 1e-9);
  }
  MESSAGE("exact remat recomputes less than the segment DP on " << strictly_better << " of 30 random chains");
}

TEST_CASE("exact remat: nothing to recompute with room for everything, and too many stages is reported, not solved") {
  std::mt19937 rng(3);
  const ForwardStages s = random_stages(rng, 5);
  const StageChain c = stage_chain(s);
  const ExactRematResult roomy = exact_remat(c, keep_all_peak(s) * 2);
  ExactRematOptions tight;
  tight.max_stages = 4;
  const ExactRematResult big = exact_remat(c, keep_all_peak(s), tight);
  if (!exact_remat_available()) {
    CHECK(roomy.status == ExactStatus::not_built);
    return;
  }
  CHECK(roomy.status == ExactStatus::optimal);
  CHECK(roomy.recompute_flops == doctest::Approx(0.0));
  CHECK(big.status == ExactStatus::too_large);
  CHECK(std::string(exact_status_name(big.status)) == "too_large");
}

TEST_CASE("strategy exact plans a training step under a budget, verified, with what it recomputes listed") {
  if (!exact_remat_available()) return;
  analysis::ShapeOptions so;
  so.dims = {{"batch", 1}};
  const auto tg = analysis::build_training_graph(
      analysis::infer_shapes(analysis::import_model(std::string(MEMPLAN_SOURCE_DIR) + "/samples/models/resnet18.train.onnx"), so), {});
  TrainingPlanOptions o;
  o.assign.exact_pack_seconds = 0.0;
  o.library_bytes = 0;
  // At batch 1 keep-all in the memory order already holds little more than the weight gradients: nothing is left to
  // recompute there. The file order leaves room.
  o.schedule.kind = ScheduleKind::file;
  o.strategy = "none";
  const TrainingPlanResult none = plan_training(tg, o);
  o.strategy = "optimal";
  const TrainingPlanResult least = plan_training(tg, o);
  REQUIRE(least.peak_bytes < none.peak_bytes);
  o.budget_bytes = least.peak_bytes + (none.peak_bytes - least.peak_bytes) / 2;
  o.strategy = "exact";
  o.exact_nodes = 5;      // 24 stages: a few nodes keep the test fast
  o.exact_seconds = 5.0;  // a cap for slow (sanitized) builds
  const TrainingPlanResult ex = plan_training(tg, o);
  CHECK(ex.report.valid);
  CHECK(ex.strategy == "exact");
  CHECK(ex.total_device_bytes <= *o.budget_bytes);
  CHECK(ex.recomputed_tensors > 0);
  MESSAGE("resnet18 b1 at " << *o.budget_bytes << " B: exact recomputes " << ex.recompute_flops / 1e9 << " GFLOP (plan " << ex.plan_seconds << " s)");
}
