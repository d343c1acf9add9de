// Tests of the remat transforms and checkpoint segment selection on random hand-built training graphs.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>

#include "analysis/liveness.hpp"
#include "planner/remat_segments.hpp"
#include "planner/swap.hpp"
#include "tests/planner/test_remat_graphs.hpp"

using namespace memplan;
using namespace memplan::planner;
using memplan::testing::random_training;

namespace {

std::uint32_t last_forward_step(const analysis::Graph& g, const analysis::Liveness& l, TensorId t) {
  std::uint32_t s = l.step_of_op[g.tensors[t].producer];
  for (auto c : g.tensors[t].consumers)
    if (g.ops[c].phase == analysis::Phase::forward) s = std::max(s, l.step_of_op[c]);
  return s;
}

std::uint64_t real_peak(const analysis::Graph& g, const std::vector<OpId>& sched, const RematChoice& c) {
  auto tr = apply_remat(g, sched, c);
  return analysis::analyze_liveness(tr.graph, tr.schedule, 1).lower_bound_bytes;
}

}  // namespace

TEST_CASE("keeping every saved tensor changes nothing") {
  for (std::uint32_t seed = 1; seed <= 10; ++seed) {
    auto r = random_training(seed, 12);
    auto tr = apply_remat(r.graph, r.schedule, RematChoice::keep_all(r.graph));
    CHECK(tr.graph.ops.size() == r.graph.ops.size());
    CHECK(tr.recompute_ops == 0);
    CHECK(analysis::analyze_liveness(tr.graph, tr.schedule, 1).lower_bound_bytes ==
          analysis::analyze_liveness(r.graph, r.schedule, 1).lower_bound_bytes);
  }
}

TEST_CASE("recomputed tensors die at their last forward use and backward readers read clones") {
  for (std::uint32_t seed = 1; seed <= 30; ++seed) {
    CAPTURE(seed);
    auto r = random_training(seed, 15);
    std::mt19937 rng(seed);
    RematChoice c = RematChoice::keep_all(r.graph);
    for (TensorId t : find_saved_for_backward(r.graph))
      if (rng() % 2) {
        c.action[t] = RematAction::recompute;
        c.group[t] = static_cast<std::uint32_t>(rng() % 3);
      }
    auto tr = apply_remat(r.graph, r.schedule, c);
    tr.graph.validate();
    REQUIRE(analysis::is_topological(tr.graph, tr.schedule));
    auto l = analysis::analyze_liveness(tr.graph, tr.schedule, 1);
    for (TensorId t : find_saved_for_backward(r.graph)) {
      if (c.action[t] != RematAction::recompute) continue;
      CHECK(l.interval[t].last == last_forward_step(tr.graph, l, t));
      for (auto reader : tr.graph.tensors[t].consumers)
        CHECK(tr.graph.ops[reader].phase != analysis::Phase::backward);
    }
    for (OpId o = 0; o < tr.graph.ops.size(); ++o)
      if (tr.graph.ops[o].phase == analysis::Phase::recompute) CHECK(tr.graph.ops[tr.origin[o]].phase == analysis::Phase::forward);
  }
}

namespace {

// At `steps` + 1 budgets from the least model peak up to keeping everything: the DP plans exactly when brute
// force does, within the budget and with brute force's recompute FLOPs. Returns the DP's plans.
std::vector<SegmentPlan> dp_against_brute_force(const ForwardStages& st, int steps) {
  std::vector<SegmentPlan> plans;
  const std::uint64_t none = evaluate_segments(st, {{0, static_cast<std::uint32_t>(st.size() - 1), false}}).peak_bytes;
  const std::uint64_t lo = min_segment_peak(st);
  for (int k = 0; k <= steps; ++k) {
    const std::uint64_t budget = lo + (none - lo) * static_cast<std::uint64_t>(k) / static_cast<std::uint64_t>(steps);
    auto dp = optimal_segments(st, budget);
    auto bf = brute_force_segments(st, budget);
    REQUIRE(dp.empty() == bf.empty());
    if (dp.empty()) continue;
    auto cd = evaluate_segments(st, dp), cb = evaluate_segments(st, bf);
    CHECK(cd.peak_bytes <= budget);
    CHECK(cd.recompute_flops == doctest::Approx(cb.recompute_flops));
    plans.push_back(std::move(dp));
  }
  return plans;
}

}  // namespace

TEST_CASE("the segment DP finds the brute-force optimum on random graphs of up to 20 ops, with and without cheap costs") {
  int compared = 0;
  for (std::uint32_t seed = 1; seed <= 60; ++seed) {
    CAPTURE(seed);
    auto r = random_training(seed, 6 + static_cast<int>(seed % 13));  // up to 18 forward ops + loss
    auto plain = find_forward_stages(r.graph, r.schedule, r.flops, 1);
    if (plain.size() > 12) continue;
    // Odd seeds: with cheap recomputation costs in kept stages (the DP and brute force share the model).
    const auto st = seed % 2 ? with_cheap_costs(r.graph, r.schedule, plain, r.flops, 1) : plain;
    compared += static_cast<int>(dp_against_brute_force(st, 4).size());
  }
  CHECK(compared > 100);
}

namespace {

// Plans brute force enumerates: per segmentation, the product of each segment's modes.
double brute_force_plans(const ForwardStages& s) {
  std::vector<double> count(s.size() + 1, 0.0);
  count[0] = 1.0;
  for (std::size_t e = 1; e <= s.size(); ++e)
    for (std::size_t b = 0; b < e; ++b)
      count[e] += count[b] * (2.0 + (b + 1 == e ? static_cast<double>(s.partial[b].size()) : 0.0));
  return count[s.size()];
}

}  // namespace

TEST_CASE("merging loose stages keeps every byte and FLOP and leaves no loose boundary inside") {
  int merged = 0;
  for (std::uint32_t seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    auto r = random_training(seed, 6 + static_cast<int>(seed % 11), 0.45);
    const auto s = find_forward_stages(r.graph, r.schedule, r.flops, 1);
    const auto m = merge_loose_stages(s);
    std::uint64_t bytes_s = 0, bytes_m = 0;
    double flops_s = 0.0, flops_m = 0.0;
    for (std::size_t i = 0; i < s.size(); ++i) {
      bytes_s += s.saved_bytes[i] + s.boundary_bytes[i] - (i + 1 < s.size() ? s.loose(i) : 0);
      flops_s += s.flops[i];
    }
    for (std::size_t i = 0; i < m.size(); ++i) {
      bytes_m += m.saved_bytes[i] + m.boundary_bytes[i] - (i + 1 < m.size() ? m.loose(i) : 0);
      flops_m += m.flops[i];
      if (i + 1 < m.size()) CHECK(m.loose(i) == 0);
    }
    CHECK(bytes_m == bytes_s);
    CHECK(flops_m == doctest::Approx(flops_s));
    merged += m.size() < s.size();
  }
  CHECK(merged > 0);
}

TEST_CASE("with partial options in single-stage segments the DP still finds the brute-force optimum") {
  int compared = 0, partial_used = 0;
  for (std::uint32_t seed = 1; seed <= 80; ++seed) {
    CAPTURE(seed);
    // Skips make stages of several ops, which is where partial options exist.
    auto r = random_training(seed, 6 + static_cast<int>(seed % 11), 0.45);
    // Seeds 3 mod 4: on stages merged across loose boundaries, cheap tensors live in a kept stage's backward.
    const bool merge = seed % 4 == 3;
    auto stages = find_forward_stages(r.graph, r.schedule, r.flops, 1);
    if (merge) stages = merge_loose_stages(stages);
    auto plain = with_partial_options(r.graph, stages, r.flops, 1);
    if (plain.size() > 12 || brute_force_plans(plain) > 2e5) continue;
    auto st = seed % 2 ? with_cheap_costs(r.graph, r.schedule, plain, r.flops, 1) : plain;
    st.cheap_live_in_backward = merge;
    for (const SegmentPlan& dp : dp_against_brute_force(st, 5)) {
      ++compared;
      partial_used += std::any_of(dp.begin(), dp.end(), [](const Segment& g) { return g.option > 0; });
    }
  }
  CHECK(compared > 100);
  CHECK(partial_used > 10);
}

TEST_CASE("sqrt segments reach clearly less memory than keeping everything on a long chain") {
  auto r = random_training(7, 64, 0.0);
  auto st = find_forward_stages(r.graph, r.schedule, r.flops, 1);
  CHECK(st.size() >= 60);
  const std::uint64_t none = real_peak(r.graph, r.schedule, RematChoice::keep_all(r.graph));
  const std::uint64_t sq = real_peak(r.graph, r.schedule, choice_from_segments(r.graph, st, sqrt_segments(st)));
  CHECK(sq * 3 < none);
}

TEST_CASE("greedy segments under a smaller threshold never need more model memory than one segment") {
  auto r = random_training(11, 40, 0.1);
  auto st = find_forward_stages(r.graph, r.schedule, r.flops, 1);
  const auto all = evaluate_segments(st, {{0, static_cast<std::uint32_t>(st.size() - 1), false}});
  for (std::uint64_t th : {std::uint64_t{512}, std::uint64_t{4096}, std::uint64_t{16384}}) {
    auto c = evaluate_segments(st, greedy_segments(st, th));
    CHECK(c.peak_bytes <= all.peak_bytes);
  }
}

TEST_CASE("swaps that hide free memory over the peak and only add SwapOut/SwapIn ops") {
  for (std::uint32_t seed = 1; seed <= 10; ++seed) {
    CAPTURE(seed);
    auto r = random_training(seed, 30, 0.1);
    std::vector<double> secs(r.graph.ops.size(), 1e-3);
    SwapLinks links{1e9, 1e9};  // 256..2048-byte tensors: microseconds against millisecond ops
    const std::uint64_t none = real_peak(r.graph, r.schedule, RematChoice::keep_all(r.graph));
    RematChoice c = swap_to_budget(r.graph, r.schedule, RematChoice::keep_all(r.graph), secs, links, none / 3, 1);
    auto tr = apply_remat(r.graph, r.schedule, c);
    tr.graph.validate();
    CHECK(tr.swap_ops > 0);
    CHECK(tr.recompute_ops == 0);
    CHECK(analysis::analyze_liveness(tr.graph, tr.schedule, 1).lower_bound_bytes < none);
    for (auto& t : tr.graph.tensors)
      if (t.name.find("@host") != std::string::npos) CHECK(t.on_host);
  }
}

TEST_CASE("no swap is placed when the link is too slow to hide it") {
  auto r = random_training(3, 20);
  std::vector<double> secs(r.graph.ops.size(), 1e-9);
  RematChoice c = swap_to_budget(r.graph, r.schedule, RematChoice::keep_all(r.graph), secs, SwapLinks{1e3, 1e3}, 0, 1);
  for (auto a : c.action) CHECK(a != RematAction::swap);
}
