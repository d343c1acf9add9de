// Tests of estimate_step: compute in order, copies on one stream after the compute before them, waits counted.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <string>

#include "analysis/import.hpp"
#include "analysis/ops.hpp"
#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "planner/step_time.hpp"
#include "planner/training_plan.hpp"

using namespace memplan;
using namespace memplan::planner;

namespace {

TrainingPlanResult mobilenet_plan(const std::string& strategy, std::optional<std::uint64_t> budget) {
  analysis::ShapeOptions so;
  so.dims = {{"batch", 4}};
  const auto shaped = analysis::infer_shapes(analysis::import_model(std::string(MEMPLAN_SOURCE_DIR) + "/samples/models/mobilenet_v2.train.onnx"), so);
  TrainingPlanOptions o;
  o.strategy = strategy;
  o.budget_bytes = budget;
  return plan_training(analysis::build_training_graph(shaped, {}), o);
}

bool is_copy(const analysis::Op& op) {
  const analysis::OpInfo* info = analysis::op_registry().find(op);
  return info && info->kind == analysis::OpKind::memory;
}

}  // namespace

TEST_CASE("without swaps the step is the compute ops end to end, and plan states that estimate") {
  const TrainingPlanResult r = mobilenet_plan("none", std::nullopt);
  const auto seconds = estimated_op_seconds(r.graph, analysis::default_device_profile());
  const StepEstimate e = estimate_step(r.graph, r.plan, seconds);
  double sum = 0.0;
  for (std::size_t s = 0; s < r.plan.schedule.size(); ++s) {
    CHECK(e.start[s] == doctest::Approx(sum));
    sum += seconds[r.plan.schedule[s]];
  }
  CHECK(e.step_seconds == doctest::Approx(sum));
  CHECK(e.stall_seconds == 0.0);
  CHECK(r.estimated_step_seconds == doctest::Approx(e.step_seconds).epsilon(1e-12));
  CHECK(r.keep_all_step_seconds == doctest::Approx(r.estimated_step_seconds).epsilon(1e-12));
}

TEST_CASE("swap copies run on one stream after the compute before them, waits are the stall, and plan states them") {
  const TrainingPlanResult r = mobilenet_plan("swap", 310ull << 20);
  REQUIRE(r.swapped_tensors > 0);
  for (double slow : {1.0, 100.0}) {
    CAPTURE(slow);
    analysis::DeviceProfile p = analysis::default_device_profile();
    p.host_to_device_bytes_per_s /= slow;
    p.device_to_host_bytes_per_s /= slow;
    const auto seconds = estimated_op_seconds(r.graph, p);
    const StepEstimate e = estimate_step(r.graph, r.plan, seconds);
    double compute_end = 0.0, copy_end = 0.0, compute = 0.0;
    std::size_t copies = 0;
    for (std::size_t s = 0; s < r.plan.schedule.size(); ++s) {
      const analysis::OpId o = r.plan.schedule[s];
      CHECK(e.end[s] == doctest::Approx(e.start[s] + seconds[o]));
      if (is_copy(r.graph.ops[o])) {
        ++copies;
        CHECK(e.start[s] >= compute_end - 1e-15);  // issued after the compute ops before it
        CHECK(e.start[s] >= copy_end - 1e-15);     // one copy stream, in issue order
        copy_end = e.end[s];
      } else {
        CHECK(e.start[s] >= compute_end - 1e-15);  // one compute stream, in schedule order
        compute_end = e.end[s];
        compute += seconds[o];
      }
    }
    CHECK(copies == 2 * r.swapped_tensors);
    CHECK(e.compute_seconds == doctest::Approx(compute));
    CHECK(e.step_seconds == doctest::Approx(std::max(compute_end, copy_end)));
    CHECK(e.stall_seconds == doctest::Approx(e.step_seconds - compute));
    if (slow == 1.0) {
      CHECK(r.estimated_step_seconds == doctest::Approx(e.step_seconds).epsilon(1e-12));
      CHECK(r.swap_stall_seconds == doctest::Approx(e.stall_seconds).epsilon(1e-9));
    } else {
      CHECK(e.stall_seconds > 0.0);  // a link 100x slower cannot hide behind this compute
    }
  }
}

TEST_CASE("a plan naming ops the graph lacks is a plan mismatch for the step estimate") {
  TrainingPlanResult r = mobilenet_plan("none", std::nullopt);
  r.plan.schedule.push_back(static_cast<analysis::OpId>(r.graph.ops.size() + 5));
  CHECK_THROWS_AS(estimate_step(r.graph, r.plan, std::vector<double>(r.graph.ops.size(), 1e-6)), Error);
}
