// Tests of partial recomputation options: Pareto keep sets per stage, costed as the transform clones them.
#include <doctest/doctest.h>

#include <algorithm>

#include "analysis/liveness.hpp"
#include "planner/assign.hpp"
#include "planner/remat_segments.hpp"
#include "planner/verify.hpp"
#include "tests/planner/test_remat_graphs.hpp"

using namespace memplan;
using namespace memplan::planner;
using memplan::testing::random_training;

namespace {

// Every stage kept, except `stage`, which keeps its partial option `k`.
SegmentPlan one_partial(const ForwardStages& s, std::uint32_t stage, std::uint32_t k) {
  SegmentPlan plan;
  for (std::uint32_t i = 0; i < s.size(); ++i) plan.push_back({i, i, false, i == stage ? k + 1 : 0});
  return plan;
}

// A random training graph's forward stages with their partial options.
ForwardStages partial_stages(const memplan::testing::RandomTraining& r) {
  return with_partial_options(r.graph, find_forward_stages(r.graph, r.schedule, r.flops, 1), r.flops, 1);
}

}  // namespace

TEST_CASE("partial options are a Pareto front of keep sets that never drop the boundary") {
  int stages_with_options = 0;
  for (std::uint32_t seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    auto r = random_training(seed, 24, 0.4);
    const auto st = partial_stages(r);
    REQUIRE(st.partial.size() == st.size());
    for (std::uint32_t i = 0; i < st.size(); ++i) {
      const auto& opts = st.partial[i];
      CHECK(opts.size() <= kMaxStageOptions);
      stages_with_options += !opts.empty();
      for (std::size_t k = 0; k < opts.size(); ++k) {
        CHECK(!opts[k].dropped.empty());
        CHECK(std::find(opts[k].dropped.begin(), opts[k].dropped.end(), st.boundary[i]) == opts[k].dropped.end());
        std::uint64_t dropped = 0;
        for (TensorId t : opts[k].dropped) {
          CHECK(st.stage_of_op[r.graph.tensors[t].producer] == i);
          dropped += r.graph.tensors[t].bytes();
        }
        CHECK(opts[k].kept_bytes + dropped <= st.total_bytes(i) + st.input_loose(i));
        CHECK(opts[k].kept_bytes >= st.held_boundary(i));
        if (k > 0) {  // more bytes kept, fewer FLOPs
          CHECK(opts[k].kept_bytes > opts[k - 1].kept_bytes);
          CHECK(opts[k].flops < opts[k - 1].flops);
        }
      }
    }
  }
  CHECK(stages_with_options > 20);
}

TEST_CASE("a partial option costs exactly the FLOPs the transform clones and frees what it drops") {
  int checked = 0;
  for (std::uint32_t seed = 1; seed <= 25; ++seed) {
    CAPTURE(seed);
    auto r = random_training(seed, 20, 0.4);
    const auto st = partial_stages(r);
    for (std::uint32_t i = 0; i < st.size(); ++i)
      for (std::uint32_t k = 0; k < st.partial[i].size(); ++k) {
        CAPTURE(i);
        CAPTURE(k);
        const SegmentPlan plan = one_partial(st, i, k);
        const RematChoice c = choice_from_segments(r.graph, st, plan);
        const auto tr = apply_remat(r.graph, r.schedule, c);
        tr.graph.validate();
        CHECK(recompute_flops(tr, r.flops) == doctest::Approx(st.partial[i][k].flops));
        CHECK(evaluate_segments(st, plan).recompute_flops == doctest::Approx(st.partial[i][k].flops));
        const auto l = analysis::analyze_liveness(tr.graph, tr.schedule, 1);
        for (TensorId t : st.partial[i][k].dropped) {
          // Dropped tensors die in the forward: no backward op reads the original.
          for (OpId reader : tr.graph.tensors[t].consumers)
            CHECK(tr.graph.ops[reader].phase != analysis::Phase::backward);
          CHECK(c.action[t] == RematAction::recompute);
        }
        AssignOptions greedy;  // the plan's validity is the point, not the exact packer (test_pack_exact)
        greedy.exact_pack_nodes = 0;
        CHECK(verify_plan(tr.graph, assign(tr.graph, l, greedy)).valid);
        ++checked;
      }
  }
  CHECK(checked > 30);
}

TEST_CASE("a partial option that keeps least costs no more than recomputing its stage as a segment") {
  int checked = 0;
  for (std::uint32_t seed = 1; seed <= 20; ++seed) {
    CAPTURE(seed);
    auto r = random_training(seed, 30, 0.6);
    const auto st = partial_stages(r);
    for (std::uint32_t i = 0; i < st.size(); ++i) {
      if (st.partial[i].empty()) continue;
      SegmentPlan whole = one_partial(st, i, 0);
      whole[i].option = 0;
      whole[i].recompute = true;
      CHECK(evaluate_segments(st, one_partial(st, i, 0)).recompute_flops <=
            evaluate_segments(st, whole).recompute_flops + 1e-9);
      ++checked;
    }
  }
  CHECK(checked > 10);
}
