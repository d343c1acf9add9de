// Data-parallel rank plans with ZeRO 0-3: model state against DeepSpeed's formulas, collectives, verification.
#include <doctest/doctest.h>

#include "analysis/ops.hpp"
#include "planner/parallel/parallel.hpp"
#include "tests/planner/transformer_fixture.hpp"

namespace memplan::planner {
namespace {

using testing::make_transformer;
using testing::TransformerConfig;

analysis::TrainingOptions adam() {
  analysis::TrainingOptions to;
  to.optimizer = analysis::Optimizer::adam;
  return to;
}

ParallelPlanResult plan(const analysis::Graph& g, int gpus, int zero, analysis::TrainingOptions to = adam()) {
  ParallelOptions par;
  par.gpus = gpus;
  par.zero = zero;
  TrainingPlanOptions po;
  po.assign.exact_pack_nodes = 20000;
  return plan_parallel(g, to, po, par);
}

TEST_CASE("ZeRO 0-3 model state per rank equals DeepSpeed's fp32 Adam formulas (4+4+8 bytes per parameter)") {
  const analysis::Graph g = make_transformer(TransformerConfig{});
  for (int n : {1, 2, 4}) {
    for (int zero = 0; zero <= 3; ++zero) {
      INFO("gpus " << n << " zero " << zero);
      const ParallelPlanResult r = plan(g, n, zero);
      REQUIRE(r.roles.size() == 1);
      const RankPlan& rp = r.roles[0];
      CHECK(rp.result.report.valid);
      CHECK(rp.ranks.size() == static_cast<std::size_t>(n));
      const double psi = static_cast<double>(r.unsharded_parameters);
      const double N = n;
      const double expected = zero == 0 ? 16 * psi : zero == 1 ? 8 * psi + 8 * psi / N : zero == 2 ? 4 * psi + 12 * psi / N : 16 * psi / N;
      // Adam's step count (one float32) is the only state outside the formula.
      CHECK(static_cast<double>(rp.model_state_bytes) == doctest::Approx(expected + 4.0).epsilon(1e-9));
      CHECK(rp.zero.weight_bytes == static_cast<std::uint64_t>(zero == 3 ? 4 * psi / N : 4 * psi));
          CHECK(rp.zero.gradient_bytes == static_cast<std::uint64_t>(zero >= 2 ? 4 * psi / N : 4 * psi));
    }
  }
}

TEST_CASE("data-parallel gradient reduction sends the ring volume: all-reduce 2(N-1)/N, reduce-scatter + all-gather (N-1)/N each") {
  const analysis::Graph g = make_transformer(TransformerConfig{});
  const int n = 4;
  const ParallelPlanResult r0 = plan(g, n, 0), r2 = plan(g, n, 2), r3 = plan(g, n, 3);
  const std::uint64_t grads = r0.roles[0].zero.unsharded_gradient_bytes, weights = r0.roles[0].zero.unsharded_weight_bytes;
  CHECK(r0.roles[0].communication.all_reduce == grads / 4 * 3 * 2);
  CHECK(r2.roles[0].communication.reduce_scatter == grads / 4 * 3);
  CHECK(r2.roles[0].communication.all_gather == weights / 4 * 3);
  // Every weight gathered for the forward; those the backward ops read (not biases) again for the backward.
  CHECK(r3.roles[0].communication.all_gather > weights / 4 * 3);
  CHECK(r3.roles[0].communication.all_gather < 2 * (weights / 4 * 3));
}

TEST_CASE("ZeRO-3 gathers each unit into arena buffers that die inside the unit's pass, one unit ahead") {
  const analysis::Graph g = make_transformer(TransformerConfig{.layers = 3});
  const ParallelPlanResult r = plan(g, 2, 3);
  const RankPlan& rp = r.roles[0];
  REQUIRE(rp.result.report.valid);
  CHECK(rp.zero.units == 3);
  const analysis::Graph& tg = rp.result.graph;
  std::size_t gathers = 0, reduce_scatters = 0;
  for (OpId o = 0; o < tg.ops.size(); ++o) {
    const auto& op = tg.ops[o];
    if (op.type == analysis::memplan_ops::kReduceScatter) ++reduce_scatters;
    if (op.type != analysis::memplan_ops::kAllGather) continue;
    ++gathers;
    for (TensorId t : op.outputs) {
      CHECK(rp.result.plan.tensor_offset[t] != kNotInArena);
      // Every reader of a forward gather is a forward op (freed before backward).
      if (op.phase == analysis::Phase::forward)
        for (OpId c : tg.tensors[t].consumers) CHECK(tg.ops[c].phase == analysis::Phase::forward);
    }
  }
  CHECK(gathers == 6);  // each unit before its forward and its backward
  CHECK(reduce_scatters == 3);
  // Prefetch: the second unit's forward gather runs before the first unit's first matmul.
  std::size_t gather1 = 0, first_matmul = 0;
  for (std::size_t s = 0; s < rp.result.plan.schedule.size(); ++s) {
    const auto& op = tg.ops[rp.result.plan.schedule[s]];
    if (op.name == "fsdp/all_gather/layers.1") gather1 = s;
    if (op.name == "layers.0.attn.q/MatMul" && first_matmul == 0) first_matmul = s;
  }
  CHECK(gather1 < first_matmul);
  // Less peak than plain data parallel: sharded weights, gradients and state.
  CHECK(rp.peak_bytes < plan(g, 2, 0).roles[0].peak_bytes);
}

TEST_CASE("ZeRO-2 frees each unit's full gradients at its reduce-scatter: a lower peak than ZeRO-1") {
  // Weights dominate (one short sequence): the gradients decide the peak.
  const analysis::Graph g = make_transformer(TransformerConfig{.batch = 1, .seq = 8, .hidden = 128, .layers = 4});
  const ParallelPlanResult r1 = plan(g, 4, 1), r2 = plan(g, 4, 2);
  CHECK(r1.roles[0].result.report.valid);
  CHECK(r2.roles[0].result.report.valid);
  CHECK(r2.roles[0].peak_bytes < r1.roles[0].peak_bytes);
}

TEST_CASE("parallel layouts that cannot be laid out are usage errors") {
  ParallelOptions o;
  o.gpus = 3;
  o.tp = 2;
  CHECK_THROWS_AS(check_parallel_options(o), Error);
  o = {};
  o.zero = 4;
  CHECK_THROWS_AS(check_parallel_options(o), Error);
  o = {};
  o.sequence_parallel = true;
  CHECK_THROWS_AS(check_parallel_options(o), Error);
  o = {};
  o.zero = 3;  // ZeRO on one GPU: nothing to shard, allowed
  CHECK_NOTHROW(check_parallel_options(o));
  try {
    o = {};
    o.gpus = 6;
    o.pp = 4;
    check_parallel_options(o);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    CHECK(std::string(e.what()).find("--gpus 6") != std::string::npos);
  }
}

}  // namespace
}  // namespace memplan::planner
