// Property tests of inference planning on random DAGs, and every sample model planned and verified.
#include <doctest/doctest.h>

#include <filesystem>
#include <random>

#include "analysis/import.hpp"
#include "analysis/shapes.hpp"
#include "bench/gen_graph.hpp"
#include "planner/inference.hpp"
#include "planner/pack.hpp"
#include "tests/planner/planner_fixtures.hpp"

using namespace memplan;
using namespace memplan::planner;

namespace {

synthetic::GraphOptions random_options(std::uint32_t seed) {
  std::mt19937 rng(seed * 7919u);
  synthetic::GraphOptions o;
  o.seed = seed;
  o.ops = 2 + rng() % 80;
  o.window = 1 + rng() % 8;
  o.max_skip = 2 + rng() % 40;
  o.skip_rate = (rng() % 20) / 100.0;
  o.view_rate = (rng() % 30) / 100.0;
  o.unary_rate = (rng() % 40) / 100.0;
  o.binary_rate = (rng() % 30) / 100.0;
  o.output_rate = (rng() % 5) / 100.0;
  o.max_elements = 1 + rng() % 20000;
  return o;
}

}  // namespace

TEST_CASE("on 1,000 random DAGs every plan verifies and no arena beats the aliased lower bound") {
  const std::vector<std::uint64_t> alignments = {1, 64, 256};
  std::vector<std::string> packers = packer_names();
  packers.push_back("best");
  for (std::uint32_t seed = 1; seed <= 1000; ++seed) {
    const auto g = synthetic::random_graph(random_options(seed));
    AssignOptions o;
    o.alignment = alignments[seed % alignments.size()];
    o.packer = packers[seed % packers.size()];
    o.views = seed % 7 != 0;
    o.inplace = seed % 5 != 0;
    // The packers on the file order; every 50th graph on the memory order (the schedules: test_schedule).
    ScheduleOptions so;
    so.kind = seed % 50 == 0 ? ScheduleKind::memory : ScheduleKind::file;
    INFO("seed " << seed << " (" << g.ops.size() << " ops, packer " << o.packer << ", alignment " << o.alignment << ", schedule "
                 << schedule_kind_name(so.kind) << ")");
    const InferencePlan ip = plan_inference(g, o, so);
    REQUIRE(ip.report.valid);
    CHECK(ip.plan.arena_bytes >= ip.plan.aliased_lower_bound_bytes);
    const std::uint64_t plain = testing::plain_bound_with_scratch(ip.liveness, ip.plan);
    CHECK(ip.plan.aliased_lower_bound_bytes <= plain);
    CHECK(ip.report.peak_bytes <= ip.plan.arena_bytes);
    if (o.views && o.inplace) CHECK(ip.plan.arena_bytes <= plain * 2 + o.alignment);
    CHECK(testing::overlapping_pairs_across_buffers(g, ip.plan) == 0);
  }
}

TEST_CASE("on random DAGs the verifier rejects a plan with one buffer moved onto a live neighbour") {
  std::size_t tried = 0;
  for (std::uint32_t seed = 1; seed <= 300; ++seed) {
    const auto g = synthetic::random_graph(random_options(seed));
    ScheduleOptions so;
    so.kind = seed % 50 == 0 ? ScheduleKind::memory : ScheduleKind::file;
    Plan p = plan_inference(g, {}, so).plan;
    // Find two buffers live at a common step and put the second on the first's bytes.
    for (std::uint32_t i = 0; i + 1 < p.buffers.size(); ++i) {
      std::uint32_t j = i + 1;
      while (j < p.buffers.size() && !p.buffers[i].interval.overlaps(p.buffers[j].interval)) ++j;
      if (j == p.buffers.size()) continue;
      p.buffers[j].offset = p.buffers[i].offset;
      for (TensorId t : p.buffers[j].tensors) p.tensor_offset[t] = p.buffers[i].offset;
      INFO("seed " << seed << " buffers " << i << " and " << j);
      CHECK_FALSE(verify_plan(g, p).valid);
      ++tried;
      break;
    }
  }
  CHECK(tried > 200);
}

TEST_CASE("every sample model at batch 32, seq 128 gets a verified plan no smaller than the aliased bound") {
  const std::filesystem::path dir = std::filesystem::path(MEMPLAN_SOURCE_DIR) / "samples" / "models";
  std::vector<std::filesystem::path> models;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".onnx") models.push_back(e.path());
  std::sort(models.begin(), models.end());
  REQUIRE(models.size() >= 7);
  analysis::ShapeOptions so;
  so.dims = {{"batch", 32}, {"seq", 128}};
  for (const auto& m : models) {
    INFO(m.filename().string());
    const auto g = analysis::infer_shapes(analysis::import_onnx(m.string()), so);
    const InferencePlan ip = plan_inference(g, {});
    CHECK(ip.report.valid);
    CHECK(ip.plan.arena_bytes >= ip.plan.aliased_lower_bound_bytes);
    CHECK(ip.plan.aliased_lower_bound_bytes <= testing::plain_bound_with_scratch(ip.liveness, ip.plan));
    CHECK(ip.plan.arena_bytes > 0);
  }
}
