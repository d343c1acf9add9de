// Pipeline rank plans: balanced cuts at layer boundaries, in-flight microbatches, Megatron's activation formula.
#include <doctest/doctest.h>

#include "planner/parallel/parallel.hpp"
#include "tests/planner/parallel_fixture.hpp"

namespace memplan::planner {
namespace {

using testing::make_transformer;
using testing::TransformerConfig;

TEST_CASE("pipeline stages hold the saved activations of the schedule's microbatches in flight (1F1B: min(P - i, M), GPipe: M)") {
  const analysis::Graph g = make_transformer(TransformerConfig{.layers = 4});
  for (auto sched : {PipelineSchedule::one_f_one_b, PipelineSchedule::gpipe}) {
    ParallelOptions par;
    par.gpus = 4;
    par.pp = 2;
    par.microbatches = 4;
    par.pp_schedule = sched;
    const ParallelPlanResult r = plan_small(g, par);
    REQUIRE(r.roles.size() == 2);
    std::size_t ops = 0;
    for (const auto& s : r.stages) ops += s.end_op - s.first_op;
    CHECK(ops == g.ops.size());
    for (int i = 0; i < 2; ++i) {
      const RankPlan& rp = r.roles[static_cast<std::size_t>(i)];
      INFO("stage " << i << " " << pipeline_schedule_name(sched));
      CHECK(rp.result.report.valid);
      CHECK(rp.in_flight == (sched == PipelineSchedule::gpipe ? 4 : 2 - i));
      CHECK(rp.activation_bytes == rp.saved_bytes_per_microbatch * static_cast<std::uint64_t>(rp.in_flight));
      CHECK(rp.peak_bytes == rp.result.peak_bytes + rp.saved_bytes_per_microbatch * static_cast<std::uint64_t>(rp.in_flight - 1));
      CHECK(rp.ranks.size() == 2);  // 2 data-parallel replicas per stage
      CHECK(rp.communication.send_recv == r.stages[0].boundary_bytes * 4);
    }
    // Balanced: two blocks each (the cut at the residual stream between blocks 1 and 2).
    CHECK(r.stages[0].forward_seconds == doctest::Approx(r.stages[1].forward_seconds).epsilon(0.05));
    CHECK(r.stages[0].boundary_bytes == 2 * 16 * 64 * 4);
  }
}

TEST_CASE("more pipeline stages than layer boundaries is a usage error") {
  const analysis::Graph g = make_transformer(TransformerConfig{.layers = 2});
  ParallelOptions par;
  par.gpus = 8;
  par.pp = 8;
  try {
    plan_small(g, par);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    CHECK(std::string(e.what()).find("--pp 8") != std::string::npos);
  }
}

TEST_CASE("saved activations per layer agree with Megatron-LM's sbh(34 + 5as/h) (fp16, dropout, no fused attention) within 2%") {
  // Korthikanti et al. 2022, eq. 1: attention 11sbh + 5as^2b, MLP 19sbh, LayerNorms 4sbh bytes.
  for (std::int64_t s : {64, 128}) {
    TransformerConfig c{.batch = 2, .seq = s, .hidden = 256, .heads = 8, .layers = 1, .dtype = analysis::DType::f16, .dropout = true};
    const analysis::Graph one = make_transformer(c);
    c.layers = 3;
    const analysis::Graph three = make_transformer(c);
    analysis::TrainingOptions to;
    const std::uint64_t a1 = saved_activation_bytes(analysis::build_training_graph(one, to));
    const std::uint64_t a3 = saved_activation_bytes(analysis::build_training_graph(three, to));
    const double per_layer = static_cast<double>(a3 - a1) / 2.0;
    const double sbh = static_cast<double>(s * c.batch * c.hidden);
    const double megatron = sbh * (34.0 + 5.0 * static_cast<double>(c.heads * s) / static_cast<double>(c.hidden));
    INFO("seq " << s << ": memplan " << per_layer << " bytes per layer, Megatron " << megatron);
    CHECK(per_layer == doctest::Approx(megatron).epsilon(0.02));
  }
}

}  // namespace
}  // namespace memplan::planner
