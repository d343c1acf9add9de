// fit --max-gpus: the fewest GPUs whose layout fits, verified rank plans, monotone in the budget, lower bounds, microbatch ladders.
#include <doctest/doctest.h>

#include <array>
#include <map>
#include <vector>

#include "planner/parallel/parallel_fit.hpp"
#include "planner/verify.hpp"
#include "tests/planner/transformer_fixture.hpp"

namespace memplan::planner {
namespace {

using testing::make_transformer;
using testing::TransformerConfig;

// A 2-layer GPT-style transformer whose batch the layouts split: 4 samples per step. One greedy packer
// (the others' and the exact packer's time buys nothing these properties need).
struct Fixture {
  TransformerConfig base{.batch = 8, .seq = 32, .hidden = 64, .heads = 4, .layers = 2};
  std::map<std::int64_t, analysis::Graph> graphs;
  analysis::TrainingOptions training;
  TrainingPlanOptions options;
  LayoutSearchOptions search;

  Fixture() {
    training.optimizer = analysis::Optimizer::adam;
    options.assign.exact_pack_seconds = 0.0;
    options.assign.packer = "greedy_by_size";
    options.strategy = "auto";
    search.max_gpus = 4;
    search.global_batch = 4;
  }
  const analysis::Graph& at(std::int64_t b) {
    auto it = graphs.find(b);
    if (it != graphs.end()) return it->second;
    TransformerConfig c = base;
    c.batch = b;
    return graphs.emplace(b, make_transformer(c)).first->second;
  }
  LayoutSearchResult run(std::uint64_t budget) {
    options.budget_bytes = budget;
    return search_layouts([this](std::int64_t b) -> const analysis::Graph& { return at(b); }, training, options, search);
  }
  // The least a single GPU reaches: every sample its own microbatch, planned for the least memory.
  std::uint64_t single_gpu_least() {
    TrainingPlanOptions least = options;
    least.budget_bytes.reset();
    ParallelOptions par;
    par.microbatches = 4;
    const ParallelPlanResult r = plan_parallel(at(1), training, least, par);
    return r.roles.at(0).peak_bytes;
  }
};

// Searches shared by the test cases (each costs tens of plans): by share of one GPU's least peak.
const LayoutSearchResult& search_at(double share) {
  static Fixture f;
  static std::map<double, LayoutSearchResult> done;
  auto it = done.find(share);
  if (it == done.end()) it = done.emplace(share, f.run(static_cast<std::uint64_t>(static_cast<double>(f.single_gpu_least()) * share))).first;
  return it->second;
}

int chosen_gpus(const LayoutSearchResult& r) { return r.chosen ? r.candidates[*r.chosen].layout.gpus : 0; }

TEST_CASE("fit --max-gpus picks the fewest GPUs with a fitting layout, and the fastest fitting layout of that count") {
  const LayoutSearchResult& r = search_at(0.75);  // below what one GPU reaches: sharding must help
  REQUIRE(r.chosen);
  const LayoutCandidate& c = r.candidates[*r.chosen];
  CHECK(c.layout.gpus > 1);
  CHECK(c.fits);
  CHECK(r.searched_gpus == c.layout.gpus);
  for (const LayoutCandidate& x : r.candidates) {
    INFO(x.layout.gpus << " GPUs, tp " << x.layout.tp << " pp " << x.layout.pp << " zero " << x.layout.zero << " M " << x.layout.microbatches);
    CHECK(x.layout.gpus <= c.layout.gpus);
    if (x.layout.gpus < c.layout.gpus) CHECK_FALSE(x.fits);
    if (x.fits) CHECK(c.step_seconds <= x.step_seconds);
    // Every layout splits the same step: D x M microbatches of b samples.
    CHECK(static_cast<std::int64_t>(x.layout.data_parallel()) * x.layout.microbatches * x.microbatch == 4);
  }
}

TEST_CASE("a layout reported as fitting has verified per-rank plans whose peaks are within the budget") {
  Fixture f;
  const std::uint64_t budget = static_cast<std::uint64_t>(static_cast<double>(f.single_gpu_least()) * 0.75);
  const LayoutSearchResult& r = search_at(0.75);
  REQUIRE(r.chosen_plan);
  std::size_t fitting = 0;
  for (const LayoutCandidate& c : r.candidates) {
    if (!c.fits) continue;
    ++fitting;
    INFO(c.layout.gpus << " GPUs, tp " << c.layout.tp << " pp " << c.layout.pp << " zero " << c.layout.zero << " M " << c.layout.microbatches);
    CHECK(c.plan_valid);
    CHECK(c.peak_bytes <= budget);
    // Planned afresh (no cache): every role's plan passes the verifier and holds no more than was reported.
    TrainingPlanOptions po = f.options;
    po.budget_bytes = budget;
    const ParallelPlanResult again = plan_parallel(f.at(c.microbatch), f.training, po, c.layout, nullptr, true);
    for (const RankPlan& rp : again.roles) {
      CHECK(verify_plan(rp.result.graph, rp.result.plan).valid);
      CHECK(rp.peak_bytes <= budget);
    }
    CHECK(again.estimated_step_seconds == doctest::Approx(c.step_seconds));
  }
  CHECK(fitting >= 1);
  for (const RankPlan& rp : r.chosen_plan->roles) CHECK(verify_plan(rp.result.graph, rp.result.plan).valid);
}

TEST_CASE("a tighter per-GPU budget never gives fewer GPUs") {
  int last = 1;
  bool sharded = false;
  for (double share : {1.2, 0.75, 0.5}) {
    const int n = chosen_gpus(search_at(share));
    INFO(share << " of one GPU's least peak: " << n << " GPUs");
    if (n == 0) {
      last = 1 << 30;  // nothing fits within 4 GPUs: no tighter budget may fit
      continue;
    }
    CHECK(n >= last);
    sharded = sharded || n > 1;
    last = n;
  }
  CHECK(sharded);
}

TEST_CASE("nothing fitting within MAX GPUs leaves no choice and names the least per-GPU peak found") {
  Fixture f;
  f.search.max_gpus = 2;
  const std::uint64_t budget = f.single_gpu_least() / 8;
  const LayoutSearchResult r = f.run(budget);
  CHECK_FALSE(r.chosen);
  REQUIRE(r.least);
  const LayoutCandidate& l = r.candidates[*r.least];
  CHECK(l.peak_bytes > budget);
  for (const LayoutCandidate& c : r.candidates) {
    CHECK_FALSE(c.fits);
    if (c.planned && !l.peak_is_lower_bound) CHECK(l.peak_bytes <= c.peak_bytes);
  }
  CHECK(r.searched_gpus == 2);
}

TEST_CASE("a budget a role cannot meet is infeasible, or with least_where_over_budget plans that role for its least memory") {
  Fixture f;
  TrainingPlanOptions po = f.options;
  po.budget_bytes = f.single_gpu_least() / 2;
  ParallelOptions par;
  par.gpus = 2;
  par.zero = 3;
  CHECK_THROWS_AS(plan_parallel(f.at(2), f.training, po, par), Error);
  const ParallelPlanResult r = plan_parallel(f.at(2), f.training, po, par, nullptr, true);
  REQUIRE(r.roles.size() == 1);
  CHECK(r.roles[0].least_memory);
  CHECK_FALSE(r.fits);
  CHECK(r.roles[0].peak_bytes > *po.budget_bytes);
  CHECK(verify_plan(r.roles[0].result.graph, r.roles[0].result.plan).valid);
}

TEST_CASE("the model state + inputs bound never exceeds a role's planned peak") {
  Fixture f;
  TrainingPlanOptions po = f.options;
  const std::vector<std::array<int, 4>> layouts{{1, 1, 1, 0}, {2, 1, 1, 1}, {4, 1, 1, 3}, {2, 2, 1, 0}, {4, 1, 2, 2}};  // gpus, tp, pp, zero
  for (const auto& l : layouts) {
    ParallelOptions par;
    par.gpus = l[0];
    par.tp = l[1];
    par.pp = l[2];
    par.zero = l[3];
    par.microbatches = par.pp;
    const ParallelLowerBounds lb = parallel_lower_bounds(f.at(2), f.training, po, par);
    const ParallelPlanResult r = plan_parallel(f.at(2), f.training, po, par);
    REQUIRE(lb.peak_bytes.size() == r.roles.size());
    for (std::size_t i = 0; i < r.roles.size(); ++i) {
      INFO("gpus " << par.gpus << " tp " << par.tp << " pp " << par.pp << " zero " << par.zero << " role " << i);
      CHECK(lb.peak_bytes[i] <= r.roles[i].peak_bytes);
      CHECK(lb.peak_bytes[i] >= r.roles[i].model_state_bytes);
    }
  }
}

TEST_CASE("a role's plan is reused where its training graph recurs (ZeRO-0 at two data-parallel degrees)") {
  Fixture f;
  RolePlanCache cache;
  ParallelOptions a;
  a.gpus = 2;
  a.microbatches = 2;
  ParallelOptions b;
  b.gpus = 4;
  const ParallelPlanResult ra = plan_parallel(f.at(2), f.training, f.options, a, &cache);
  const ParallelPlanResult rb = plan_parallel(f.at(2), f.training, f.options, b, &cache);
  CHECK(cache.misses == 1);
  CHECK(cache.hits == 1);
  const ParallelPlanResult fresh = plan_parallel(f.at(2), f.training, f.options, b);
  CHECK(rb.roles[0].peak_bytes == fresh.roles[0].peak_bytes);
  CHECK(rb.roles[0].communication.total() == fresh.roles[0].communication.total());
  CHECK(ra.roles[0].communication.total() != rb.roles[0].communication.total());  // ring sizes differ
}

TEST_CASE("microbatch choices split the global batch: all halvings without a pipeline, a ladder from P with one") {
  LayoutSearchOptions s;
  s.global_batch = 12;
  CHECK(microbatch_choices(s, 1, 1) == std::vector<int>{1, 2, 4, 12});
  CHECK(microbatch_choices(s, 2, 1) == std::vector<int>{1, 2, 6});
  CHECK(microbatch_choices(s, 5, 1).empty());
  CHECK(microbatch_choices(s, 1, 2) == std::vector<int>{2, 4, 12});
  CHECK(microbatch_choices(s, 1, 3) == std::vector<int>{3, 6, 12});
  s.global_batch = 64;
  CHECK(microbatch_choices(s, 1, 2) == std::vector<int>{2, 4, 8, 16});  // max_microbatch_choices 4
  s.fixed_microbatch = 8;
  CHECK(microbatch_choices(s, 2, 1) == std::vector<int>{4});
  CHECK(microbatch_choices(s, 16, 1).empty());
}

TEST_CASE("rank roles are named by what they hold: pipeline stage, tensor-parallel ranks, data-parallel replicas") {
  ParallelOptions p;
  CHECK(rank_role_name(p, 0) == "single GPU");
  p.gpus = 2;
  p.tp = 2;
  CHECK(rank_role_name(p, 0) == "tp ranks 0-1 of 2");
  p.gpus = 8;
  p.pp = 2;
  p.zero = 1;
  CHECK(rank_role_name(p, 1) == "stage 1 of 2, tp ranks 0-1 of 2, data parallel x2 (ZeRO-1)");
  p.tp = 1;
  p.pp = 1;
  p.zero = 0;
  CHECK(rank_role_name(p, 0) == "data parallel x8");
}

}  // namespace
}  // namespace memplan::planner
