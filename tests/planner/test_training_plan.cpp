// Tests of plan_training: every strategy verified and within budget, on hand-built and corpus training graphs.
#include <doctest/doctest.h>

#include <string>

#include "analysis/import.hpp"
#include "analysis/shapes.hpp"
#include "planner/training_plan.hpp"
#include "tests/planner/test_remat_graphs.hpp"

using namespace memplan;
using namespace memplan::planner;

namespace {

analysis::TrainingGraph wrap(analysis::Graph g) {
  analysis::TrainingGraph tg;
  tg.graph = std::move(g);
  return tg;
}

TrainingPlanResult plan(const analysis::TrainingGraph& tg, const std::string& strategy, std::optional<std::uint64_t> budget) {
  TrainingPlanOptions o;
  o.strategy = strategy;
  o.budget_bytes = budget;
  return plan_training(tg, o);
}

// Every strategy without a budget, then at budgets between the least reachable peak and none's: each
// plan verified, its peak within the budget, and an infeasible budget reported as such.
void check_all_strategies(const analysis::TrainingGraph& tg, const std::string& what, bool sqrt_saves) {
  CAPTURE(what);
  const TrainingPlanResult none = plan(tg, "none", std::nullopt);
  REQUIRE(none.report.valid);
  for (const auto& s : training_strategies()) {
    CAPTURE(s);
    const TrainingPlanResult least = plan(tg, s, std::nullopt);
    CHECK(least.report.valid);
    CHECK(least.peak_bytes == least.persistent_bytes + least.input_bytes + least.activation_arena_bytes);
    CHECK(least.recompute_overhead >= 0.0);
    if (s == "none" || s == "sqrt" || least.peak_bytes >= none.peak_bytes) continue;
    for (int k = 1; k <= 3; ++k) {
      const std::uint64_t budget = least.peak_bytes + (none.peak_bytes - least.peak_bytes) * static_cast<std::uint64_t>(k) / 4;
      CAPTURE(budget);
      const TrainingPlanResult r = plan(tg, s, budget);
      CHECK(r.report.valid);
      CHECK(r.peak_bytes <= budget);
    }
  }
  if (sqrt_saves) CHECK(plan(tg, "sqrt", std::nullopt).peak_bytes < none.peak_bytes);
  CHECK_THROWS_AS(plan(tg, "optimal", none.persistent_bytes / 2), Error);
  try {
    (void)plan(tg, "auto", none.persistent_bytes + none.input_bytes);
    FAIL("a budget with no room for activations was met");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::infeasible);
    CHECK(std::string(e.what()).find("sqrt") != std::string::npos);
  }
}

}  // namespace

TEST_CASE("parse_size reads binary and decimal units and rejects bad text") {
  CHECK(parse_size("16GiB") == 16ull << 30);
  CHECK(parse_size("512MB") == 512'000'000ull);
  CHECK(parse_size("1e9") == 1'000'000'000ull);
  CHECK(parse_size("1.5 KiB") == 1536);
  CHECK(parse_size("7") == 7);
  for (const char* bad : {"", "GiB", "12 parsecs", "-1GB", "1e30TB"}) {
    CAPTURE(bad);
    try {
      (void)parse_size(bad);
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::usage);
    }
  }
}

TEST_CASE("every strategy's plan of random training graphs is verified and within its budget") {
  for (std::uint32_t seed = 1; seed <= 6; ++seed) {
    auto r = memplan::testing::random_training(seed, 24, 0.15, 1 << 14);
    check_all_strategies(wrap(std::move(r.graph)), "random seed " + std::to_string(seed), false);
  }
}

TEST_CASE("an unknown strategy is a usage error") {
  auto r = memplan::testing::random_training(1, 4);
  try {
    (void)plan(wrap(std::move(r.graph)), "magic", std::nullopt);
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
  }
}

TEST_CASE("every strategy plans every corpus training model within budget") {
  struct Model {
    const char* file;
    analysis::DimBindings dims;
  };
  const Model models[] = {{"resnet18.train.onnx", {{"batch", 8}}},    {"resnet50.train.onnx", {{"batch", 4}}},
                          {"mobilenet_v2.train.onnx", {{"batch", 8}}}, {"vgg16.train.onnx", {{"batch", 2}}},
                          {"distilbert.dyn.onnx", {{"batch", 8}, {"seq", 128}}},
                          {"bert_base.dyn.onnx", {{"batch", 8}, {"seq", 128}}}};
  for (const auto& m : models) {
    const std::string path = std::string(MEMPLAN_SOURCE_DIR) + "/samples/models/" + m.file;
    analysis::ShapeOptions so;
    so.dims = m.dims;
    const auto shaped = analysis::infer_shapes(analysis::import_model(path), so);
    check_all_strategies(analysis::build_training_graph(shaped, {}), m.file, true);
  }
}
