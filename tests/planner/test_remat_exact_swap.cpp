// Tests of exact remat with swap (remat_exact_segments.hpp): the model without swaps is the segment DP's
// (evaluate_segments' peak for every plan), the MILP equals the brute force of the model with and without swaps,
// is never worse than the DP's plan it starts from, and solves a few hundred stages.
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "planner/exact/remat_exact_segments.hpp"
#include "tests/planner/random_stages.hpp"

using namespace memplan;
using namespace memplan::planner;
using memplan::planner::testing::random_stages;

namespace {

// The model of `s` with swaps: random links and backward seconds, so some stages swap and the windows differ.
SwapStageModel with_swaps(const ForwardStages& s, std::mt19937& rng) {
  SwapStageModel m = swap_stage_model(s);
  std::uniform_real_distribution<double> u(0.2, 3.0);
  std::uniform_int_distribution<int> coin(0, 2);
  const std::size_t n = m.size();
  std::vector<double> backward(n);
  for (std::size_t i = 0; i < n; ++i) backward[i] = 2.0 * m.seconds[i] * u(rng);
  std::fill(m.backward_after.begin(), m.backward_after.end(), 0.0);
  for (std::size_t i = n; i-- > 1;) m.backward_after[i - 1] = m.backward_after[i] + backward[i];
  for (std::size_t i = 0; i + 1 < n; ++i) {
    if (s.saved_bytes[i] == 0 || coin(rng) == 0) continue;
    m.moved[i] = s.saved_bytes[i];
    m.in_seconds[i] = static_cast<double>(s.saved_bytes[i]) * 1e3 * u(rng);
    m.out_seconds[i] = m.in_seconds[i] * u(rng);
    m.window[i] = static_cast<std::uint32_t>(1 + coin(rng));
  }
  m.swap_weight = 0.05;
  return m;
}

std::uint64_t keep_all_peak(const SwapStageModel& m) {
  SwapSegmentPlan p;
  p.swapped.assign(m.size(), false);
  for (std::uint32_t i = 0; i < m.size(); ++i) p.segments.push_back({i, i, false, 0});
  return swap_plan_cost(m, p, UINT64_MAX).peak;
}

// The least budget any plan of the model meets (bisection over the brute force).
std::uint64_t least_peak(const SwapStageModel& m) {
  std::uint64_t lo = 0, hi = keep_all_peak(m);  // lo: none meets; hi: one does
  while (hi - lo > 1) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    (brute_force_swap_plan(m, mid).segments.empty() ? lo : hi) = mid;
  }
  return hi;
}

bool close(double a, double b) { return std::abs(a - b) <= 1e-6 * std::max(1.0, std::max(std::abs(a), std::abs(b))); }

}  // namespace

TEST_CASE("swap remat model: without swaps a segment plan's peak and recompute are evaluate_segments'") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> coin(0, 2);
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t m = 1 + static_cast<std::size_t>(trial % 9);
    const ForwardStages s = random_stages(rng, m);
    const SwapStageModel model = swap_stage_model(s);
    // A random segmentation, each segment kept or recomputed.
    SegmentPlan plan;
    for (std::uint32_t i = 0; i < m;) {
      const std::uint32_t e = std::min<std::uint32_t>(static_cast<std::uint32_t>(m) - 1, i + static_cast<std::uint32_t>(coin(rng)));
      plan.push_back({i, e, coin(rng) != 0, 0});
      i = e + 1;
    }
    const SegmentCost dp = evaluate_segments(s, plan);
    const SwapPlanCost c = swap_plan_cost(model, swap_plan_of_segments(model, plan), UINT64_MAX);
    CHECK(c.peak <= dp.peak_bytes);  // a segment holding only its end boundary is kept instead: never more
    bool converted = false;
    for (const Segment& g : plan) {
      std::uint64_t total = 0;
      for (std::uint32_t i = g.first; i <= g.last; ++i) total += model.held[i];
      converted = converted || (g.recompute && total <= model.boundary[g.last]);
    }
    if (!converted) CHECK(c.peak == dp.peak_bytes);
    CHECK(close(c.recompute_seconds, dp.recompute_flops));
  }
}

TEST_CASE("swap remat MILP equals the brute force of its model, with and without swaps") {
  if (!exact_remat_available()) return;
  std::mt19937 rng(31);
  int compared = 0, swapping = 0, infeasible = 0, only_swaps = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const std::size_t m = 2 + static_cast<std::size_t>(trial % 7);
    const ForwardStages s = random_stages(rng, m);
    const SwapStageModel model = trial % 3 == 0 ? swap_stage_model(s) : with_swaps(s, rng);
    const std::uint64_t full = keep_all_peak(model);
    const std::uint64_t budget = full / 2 + (full - full / 2) * static_cast<std::uint64_t>(trial % 5) / 5;
    const SwapSegmentPlan brute = brute_force_swap_plan(model, budget);
    const SwapExactResult r = exact_swap_remat(model, budget);
    INFO("trial " << trial << ", " << m << " stages, budget " << budget);
    if (brute.segments.empty()) {
      CHECK(r.status == ExactStatus::infeasible);
      ++infeasible;
      continue;
    }
    REQUIRE(r.status == ExactStatus::optimal);
    const double want = swap_plan_cost(model, brute, budget).cost;
    const SwapPlanCost got = swap_plan_cost(model, r.plan, budget);
    CHECK(close(got.cost, r.cost));
    CHECK(close(r.cost, want));
    CHECK(r.lower_bound <= r.cost * (1 + 1e-9));
    CHECK(got.peak <= budget);
    swapping += got.swaps > 0 ? 1 : 0;
    ++compared;
    // Where swaps reach a budget no keep / recompute plan meets (rare: a swap's copy back adds its bytes to the rows
    // above it), the MILP finds that plan.
    SwapStageModel plain = model;
    std::fill(plain.moved.begin(), plain.moved.end(), 0);
    if (const std::uint64_t least = least_peak(model); least < least_peak(plain)) {
      const SwapExactResult low = exact_swap_remat(model, least);
      REQUIRE(low.status == ExactStatus::optimal);
      CHECK(close(low.cost, swap_plan_cost(model, brute_force_swap_plan(model, least), least).cost));
      CHECK(swap_plan_cost(model, low.plan, least).swaps > 0);
      ++only_swaps;
    }
  }
  MESSAGE(compared << " compared (" << swapping << " optimal plans swap, " << only_swaps << " under budgets only swaps meet), " << infeasible
                   << " infeasible");
  CHECK(compared >= 30);
  CHECK(swapping >= 5);
}

TEST_CASE("swap remat MILP: never worse than the DP's plan it starts from") {
  if (!exact_remat_available()) return;
  std::mt19937 rng(5);
  int better = 0;
  for (int trial = 0; trial < 20; ++trial) {
    const ForwardStages s = random_stages(rng, 24);
    const SwapStageModel plain = swap_stage_model(s), model = with_swaps(s, rng);
    const std::uint64_t full = keep_all_peak(plain), floor = min_segment_peak(s);
    const std::uint64_t budget = floor + (full - floor) * static_cast<std::uint64_t>(1 + trial % 3) / 4;
    const SegmentPlan dp = optimal_segments(s, budget);
    REQUIRE_FALSE(dp.empty());
    const SwapSegmentPlan start = swap_plan_of_segments(model, dp);
    const double dp_cost = swap_plan_cost(model, start, budget).cost;
    REQUIRE(std::isfinite(dp_cost));
    ExactRematOptions o;
    o.max_nodes = 200;
    const SwapExactResult r = exact_swap_remat(model, budget, o, &start);
    REQUIRE((r.status == ExactStatus::optimal || r.status == ExactStatus::feasible));
    CHECK(r.cost <= dp_cost * (1 + 1e-9));
    CHECK(close(swap_plan_cost(model, r.plan, budget).cost, r.cost));
    CHECK(r.lower_bound <= r.cost * (1 + 1e-9));
    // Without swaps the model is the DP's, which is exact over it: the MILP's optimum is the DP's recompute.
    const SwapExactResult p = exact_swap_remat(plain, budget, o, &start);
    if (p.status == ExactStatus::optimal) CHECK(close(p.cost, swap_plan_cost(plain, start, budget).cost));
    better += r.cost < dp_cost * (1 - 1e-6) ? 1 : 0;
  }
  MESSAGE(better << " of 20 cheaper than the DP's plan with swaps");
  CHECK(better >= 5);
}

TEST_CASE("swap remat MILP on 200 stages: a proven or bounded plan never worse than the DP's") {
  if (!exact_remat_available()) return;
  std::mt19937 rng(300);
  const ForwardStages s = random_stages(rng, 200);
  const SwapStageModel model = with_swaps(s, rng);
  const std::uint64_t full = keep_all_peak(swap_stage_model(s)), floor = min_segment_peak(s);
  const std::uint64_t budget = floor + (full - floor) / 3;
  const SegmentPlan dp = optimal_segments(s, budget);
  REQUIRE_FALSE(dp.empty());
  const SwapSegmentPlan start = swap_plan_of_segments(model, dp);
  const double dp_cost = swap_plan_cost(model, start, budget).cost;
  ExactRematOptions o;
  o.max_nodes = 50;
  o.seconds = 60.0;  // a cap for sanitized builds
  const SwapExactResult r = exact_swap_remat(model, budget, o, &start);
  REQUIRE((r.status == ExactStatus::optimal || r.status == ExactStatus::feasible));
  CHECK(r.cost <= dp_cost * (1 + 1e-9));
  CHECK(r.lower_bound <= r.cost * (1 + 1e-9));
  CHECK(swap_plan_cost(model, r.plan, budget).peak <= budget);
  MESSAGE("200 stages: " << r.variables << " columns, " << r.constraints << " rows, " << std::string(exact_status_name(r.status)) << " in "
                         << r.seconds << " s (" << r.nodes << " nodes), cost " << r.cost << " vs DP " << dp_cost << ", bound "
                         << r.lower_bound);
}
