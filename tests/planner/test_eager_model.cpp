// Tests of eager_peak: PyTorch's eager memory replayed on a training plan, the mse_loss storage included.
#include <doctest/doctest.h>

#include <string>

#include "analysis/import.hpp"
#include "analysis/ops.hpp"
#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "planner/eager_model.hpp"
#include "planner/training_plan.hpp"

using namespace memplan;
using namespace memplan::analysis;

namespace {

struct Planned {
  TrainingGraph tg;
  planner::TrainingPlanResult r;
};

Planned plan_none(const std::string& file, std::int64_t batch, std::int64_t seq) {
  Graph g = import_model(std::string(MEMPLAN_SOURCE_DIR) + "/samples/transformers/" + file);
  ShapeOptions so;
  so.dims = {{"batch", batch}, {"seq", seq}};
  Planned p;
  p.tg = build_training_graph(infer_shapes(g, so), {});
  planner::TrainingPlanOptions o;
  o.strategy = "none";
  p.r = planner::plan_training(p.tg, o);
  return p;
}

std::uint64_t loss_input_bytes(const Graph& g, std::uint32_t& loss_step, const planner::Plan& plan) {
  for (std::uint32_t s = 0; s < plan.schedule.size(); ++s) {
    const Op& op = g.ops[plan.schedule[s]];
    if (op.type == memplan_ops::kMSELoss) {
      loss_step = s;
      return g.tensors[op.inputs[0]].bytes();
    }
  }
  FAIL("no MSELoss in the training graph");
  return 0;
}

}  // namespace

TEST_CASE("eager_peak holds the logits, their gradient and mse_loss's logits-sized storage at once") {
  // GPT-2's LM head at batch 2, seq 64: logits [2,64,50257] float32 = 25.7 MB dwarf every activation.
  const Planned p = plan_none("gpt2_small.train.onnx", 2, 64);
  REQUIRE(p.r.report.valid);
  const Graph& g = p.r.graph;
  std::uint32_t loss_step = 0;
  const std::uint64_t logits = loss_input_bytes(g, loss_step, p.r.plan);
  CHECK(logits == 2ull * 64 * 50257 * 4);
  const planner::EagerPeak e = planner::eager_peak(g, p.r.plan);
  CHECK(e.resident_bytes >= logits);  // the target is a graph input, held the whole step
  // At the loss's gradient: logits (read by MSELossGrad), dlogits, and the 0-dim loss's full-size storage
  // (pytorch/pytorch#185647); none of these is in memplan's own arena at once with the third.
  CHECK(e.peak_bytes >= e.resident_bytes + 3 * logits);
  CHECK(e.peak_step >= loss_step);
}

TEST_CASE("eager_peak is deterministic and above what is resident") {
  const Planned a = plan_none("bert_small.train.onnx", 2, 16);
  const Planned b = plan_none("bert_small.train.onnx", 2, 16);
  const auto ea = planner::eager_peak(a.r.graph, a.r.plan);
  const auto eb = planner::eager_peak(b.r.graph, b.r.plan);
  CHECK(ea.peak_bytes == eb.peak_bytes);
  CHECK(ea.peak_step == eb.peak_step);
  CHECK(ea.peak_bytes > ea.resident_bytes);
}
