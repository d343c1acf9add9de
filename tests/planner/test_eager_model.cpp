// Tests of eager_peak: PyTorch's eager memory replayed on a training plan, the mse_loss storage included.
#include <doctest/doctest.h>

#include <string>

#include "analysis/import.hpp"
#include "analysis/ops.hpp"
#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "planner/pytorch/eager_model.hpp"
#include "planner/training_plan.hpp"
#include "tests/runtime_allocator/op_graph.hpp"

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

namespace {

// logits y = x + w ([8, 64], `dt`), cross-entropy over axis 1, no optimizer; planned with strategy none.
struct CePlanned {
  TrainingGraph tg;
  planner::TrainingPlanResult r;
};
CePlanned plan_ce(DType dt) {
  runtime::testing::OpGraph b;
  b.g.name = "ce";
  const TensorId x = b.tensor("x", dt, {8, 64}, TensorRole::input);
  b.g.inputs = {x};
  b.op("Add", "", {x, b.tensor("w", dt, {8, 64}, TensorRole::weight)}, {b.result("y", dt, {8, 64})});
  const Graph& g = b.g;
  TrainingOptions to;
  to.optimizer = Optimizer::none;
  to.loss = Loss::ce;
  CePlanned p;
  p.tg = build_training_graph(g, to);
  planner::TrainingPlanOptions o;
  o.strategy = "none";
  p.r = planner::plan_training(p.tg, o);
  return p;
}

std::uint64_t plan_live(const planner::Plan& plan, std::uint32_t step) {
  std::uint64_t live = 0;
  for (const auto& b : plan.buffers)
    if (b.interval.first <= step && step <= b.interval.last) live += b.size;
  return live;
}

std::uint32_t step_of_type(const Graph& g, const planner::Plan& plan, std::string_view type) {
  for (std::uint32_t s = 0; s < plan.schedule.size(); ++s)
    if (g.ops[plan.schedule[s]].type == type) return s;
  FAIL("no " << std::string(type) << " in the schedule");
  return 0;
}

}  // namespace

TEST_CASE("eager_peak adds PyTorch's cross_entropy: fp32 log-probabilities saved and the nll gradient at backward") {
  const CePlanned p = plan_ce(DType::f32);
  REQUIRE(p.r.report.valid);
  const Graph& g = p.r.graph;
  const planner::Plan& plan = p.r.plan;
  const std::uint64_t logits = 8 * 64 * 4;  // already a multiple of the plan's alignment
  REQUIRE(logits % plan.alignment == 0);
  const std::uint32_t grad = step_of_type(g, plan, memplan_ops::kCrossEntropyLossGrad);
  const planner::EagerPeak e = planner::eager_peak(g, plan);
  // At log_softmax_backward: log-probabilities, nll_loss_backward's zeroed gradient and dlogits (the plan's dy).
  CHECK(e.peak_step == grad);
  CHECK(e.peak_bytes - e.resident_bytes == plan_live(plan, grad) + 2 * logits);
  CHECK(e.peak_bytes - e.resident_bytes >= 3 * logits);
  // memplan's own plan keeps a logsumexp per row, not log-probabilities: one logits-sized buffer at the loss.
  CHECK(plan_live(plan, grad) < 2 * logits);
}

TEST_CASE("eager_peak with bf16 logits: a bf16 temporary and fp32 log-probabilities at the loss, the nll gradient at backward") {
  // As measured (bench/results/cnn_gpu_h100_2026-11-24/ce_probe.txt): log_softmax(dtype=float) reads the bf16
  // logits with a bf16 temporary, no fp32 copy; at log_softmax_backward the logits, log-probabilities and the
  // nll gradient live; the bf16 logits gradient (the plan's dy) comes after the nll gradient is freed.
  const CePlanned p = plan_ce(DType::bf16);
  REQUIRE(p.r.report.valid);
  const Graph& g = p.r.graph;
  const planner::Plan& plan = p.r.plan;
  const std::uint64_t fp32 = 8 * 64 * 4, bf16 = 8 * 64 * 2;
  const std::uint32_t loss = step_of_type(g, plan, memplan_ops::kCrossEntropyLoss);
  const std::uint32_t grad = step_of_type(g, plan, memplan_ops::kCrossEntropyLossGrad);
  const planner::EagerPeak e = planner::eager_peak(g, plan);
  const std::uint64_t at_loss = plan_live(plan, loss) + bf16 + fp32, at_grad = plan_live(plan, grad) + fp32 + (fp32 - bf16);
  CHECK(e.peak_bytes - e.resident_bytes == std::max(at_loss, at_grad));
  CHECK(e.peak_step == (at_grad > at_loss ? grad : loss));  // the first step at the most
}

TEST_CASE("eager_peak under autocast: the plan's fp32 Cast of bf16 logits is no tensor of PyTorch's, the bf16 logits stay") {
  // logits = x @ w ([8, 16] x [16, 64]); bf16 autocast: the MatMul runs in bf16, the loss's input is a Cast to fp32.
  runtime::testing::OpGraph b;
  b.g.name = "ce_autocast";
  const TensorId x = b.tensor("x", DType::f32, {8, 16}, TensorRole::input);
  b.g.inputs = {x};
  b.op("MatMul", "", {x, b.tensor("w", DType::f32, {16, 64}, TensorRole::weight)}, {b.result("y", DType::f32, {8, 64})});
  TrainingOptions to;
  to.optimizer = Optimizer::none;
  to.loss = Loss::ce;
  to.precision = Precision::bf16;
  const TrainingGraph tg = build_training_graph(b.g, to);
  planner::TrainingPlanOptions o;
  o.strategy = "none";
  const planner::TrainingPlanResult r = planner::plan_training(tg, o);
  REQUIRE(r.report.valid);
  const Graph& g = r.graph;
  const planner::Plan& plan = r.plan;
  const std::uint32_t grad = step_of_type(g, plan, memplan_ops::kCrossEntropyLossGrad);
  const OpId ce_op = plan.schedule[step_of_type(g, plan, memplan_ops::kCrossEntropyLoss)];
  const TensorId y32 = g.ops[ce_op].inputs[0];
  REQUIRE(g.tensors[y32].dtype == DType::f32);
  const OpId cast = g.tensors[y32].producer;
  REQUIRE(cast != analysis::kNoOp);
  REQUIRE(g.ops[cast].type == "Cast");
  const TensorId y16 = g.ops[cast].inputs[0];
  REQUIRE(g.tensors[y16].dtype == DType::bf16);
  const std::uint64_t fp32 = 8 * 64 * 4, bf16 = 8 * 64 * 2;
  const planner::EagerPeak e = planner::eager_peak(g, plan);
  // At the gradient PyTorch holds the bf16 logits, the log-probabilities and the nll gradient (the plan's fp32
  // dy stands for it); the plan's fp32 y, in the arena at that step unless dy took its buffer, is not there.
  const bool shared = plan.tensor_buffer[y32] == plan.tensor_buffer[g.ops[plan.schedule[grad]].output(0)];
  const bool y16_planned_at_grad = plan.buffers[plan.tensor_buffer[y16]].interval.last >= grad;
  const std::uint64_t at_grad =
      plan_live(plan, grad) - (shared ? 0 : fp32) + (y16_planned_at_grad ? 0 : bf16) + fp32;
  CHECK(e.peak_bytes - e.resident_bytes >= at_grad);
  CHECK(e.peak_bytes - e.resident_bytes <= at_grad + bf16);  // at most the loss's bf16 temporary more, elsewhere
}
