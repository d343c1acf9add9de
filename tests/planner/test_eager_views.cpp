// Tests of pytorch_unallocated_spans: what an ONNX export materializes that PyTorch eager does not, and eager_peak
// without it.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "planner/pytorch/eager_model.hpp"
#include "planner/pytorch/eager_views.hpp"
#include "planner/training_plan.hpp"
#include "tests/runtime_allocator/op_graph.hpp"

using namespace memplan;
using namespace memplan::analysis;

namespace {

// The training step of `g` (MSE loss, no optimizer) in `precision`, planned keep-all as PyTorch eager runs it.
planner::TrainingPlanResult plan_keep_all(const Graph& g, Precision precision = Precision::fp32) {
  TrainingOptions to;
  to.optimizer = Optimizer::none;
  to.precision = precision;
  planner::TrainingPlanOptions o;
  o.strategy = "none";
  return planner::plan_training(build_training_graph(infer_shapes(g, {}), to), o);
}

struct Scatter {
  planner::TrainingPlanResult r;
  TensorId grid = kNoTensor;  // the ScatterND's indices in the training graph
};

// y = ScatterND(x * w, indices, u * wu): torch.onnx's form of `y = x * w; y[:, :, 1:, 1:] = u * wu`, the indices a
// [2, 8, 63, 63, 4] int64 grid expanded from a constant (from the constant plus an int64 graph input when
// `data_dependent`), 8x the bytes of the float data.
Scatter plan_scatter(bool data_dependent) {
  runtime::testing::OpGraph b;
  b.g.name = "slice_assign";
  const std::vector<std::int64_t> data{2, 8, 64, 64}, upd{2, 8, 63, 63}, grid{2, 8, 63, 63, 4};
  const TensorId x = b.tensor("x", DType::f32, data, TensorRole::input);
  const TensorId u = b.tensor("u", DType::f32, upd, TensorRole::input);
  b.g.inputs = {x, u};
  const TensorId d = b.tensor("d", DType::f32, data, TensorRole::activation);
  b.op("Mul", "", {x, b.tensor("w", DType::f32, data, TensorRole::weight)}, {d});
  const TensorId v = b.tensor("v", DType::f32, upd, TensorRole::activation);
  b.op("Mul", "", {u, b.tensor("wu", DType::f32, upd, TensorRole::weight)}, {v});
  const TensorId corner =
      b.constant("corner", TensorData::from_int64(DType::i64, {1, 1, 63, 63, 4}, std::vector<std::int64_t>(63 * 63 * 4, 1)));
  TensorId idx = b.tensor("grid", DType::i64, grid, TensorRole::activation);
  b.op("Expand", "", {corner, b.constant("grid_shape", TensorData::from_int64(DType::i64, {5}, grid))}, {idx});
  if (data_dependent) {
    const TensorId offset = b.tensor("offset", DType::i64, {1}, TensorRole::input);
    b.g.inputs.push_back(offset);
    const TensorId moved = b.tensor("moved", DType::i64, grid, TensorRole::activation);
    b.op("Add", "", {idx, offset}, {moved});
    idx = moved;
  }
  b.op("ScatterND", "", {d, idx, v}, {b.result("y", DType::f32, data)});
  Scatter s;
  s.r = plan_keep_all(b.g);
  for (const Op& op : s.r.graph.ops)
    if (op.type == "ScatterND" && op.phase == Phase::forward) s.grid = op.inputs[1];
  return s;
}

}  // namespace

TEST_CASE("a constant index grid of slice assignment is no buffer of PyTorch's, a data-dependent index is") {
  const Scatter c = plan_scatter(false), dep = plan_scatter(true);
  REQUIRE(c.r.report.valid);
  REQUIRE(dep.r.report.valid);
  REQUIRE(c.grid != kNoTensor);
  const planner::Plan& plan = c.r.plan;
  const auto spans = planner::pytorch_unallocated_spans(c.r.graph, plan);
  REQUIRE(spans.size() == 1);
  const planner::Buffer& buf = plan.buffers[spans[0].buffer];
  CHECK(buf.tensors == std::vector<TensorId>{c.grid});
  CHECK((spans[0].first == buf.interval.first && spans[0].last == buf.interval.last));
  // Left out there: the Add's Expand operand alone, up to the Add (which may write the index over its bytes).
  std::uint32_t add_step = 0;
  for (std::uint32_t s = 0; s < dep.r.plan.schedule.size(); ++s)
    if (dep.r.plan.schedule[s] == dep.r.graph.tensors[dep.grid].producer) add_step = s;
  for (const auto& u : planner::pytorch_unallocated_spans(dep.r.graph, dep.r.plan)) CHECK(u.last < add_step);
  // The grid is saved for ScatterND's backward: counted, it would be live at the peak with the data's gradient.
  const std::uint64_t grid_bytes = 2 * 8 * 63 * 63 * 4 * 8;
  const planner::EagerPeak ec = planner::eager_peak(c.r.graph, plan), ed = planner::eager_peak(dep.r.graph, dep.r.plan);
  CHECK(ec.resident_bytes + sizeof(std::int64_t) == ed.resident_bytes);  // the offset input
  CHECK(ed.peak_bytes - ed.resident_bytes >= ec.peak_bytes - ec.resident_bytes + grid_bytes);
}

namespace {

// y = x * Expand(Sigmoid(ReduceMean(x)), shape(x)) over x [8, 64, 32, 32]: an efficient-channel-attention gate
// (`x * y.expand_as(x)`), or with `reshaped` the gate expanded to [8, 64, 2, 16, 32] and reshaped back first, which
// PyTorch copies.
planner::TrainingPlanResult plan_gate(bool reshaped) {
  runtime::testing::OpGraph b;
  b.g.name = "gate";
  const std::vector<std::int64_t> dims{8, 64, 32, 32}, pooled{8, 64, 1, 1};
  const TensorId x = b.tensor("x", DType::f32, dims, TensorRole::input);
  b.g.inputs = {x};
  const TensorId h = b.tensor("h", DType::f32, dims, TensorRole::activation);
  b.op("Mul", "", {x, b.tensor("w", DType::f32, dims, TensorRole::weight)}, {h});
  const TensorId m = b.tensor("m", DType::f32, pooled, TensorRole::activation);
  b.op("ReduceMean", "", {h, b.constant("axes", TensorData::from_int64(DType::i64, {2}, {2, 3}))}, {m});
  const TensorId s = b.tensor("s", DType::f32, pooled, TensorRole::activation);
  b.op("Sigmoid", "", {m}, {s});
  TensorId e = b.tensor("e", DType::f32, dims, TensorRole::activation);
  if (reshaped) {
    const std::vector<std::int64_t> split{8, 64, 2, 16, 32};
    const TensorId s5 = b.tensor("s5", DType::f32, {8, 64, 1, 1, 1}, TensorRole::activation);
    b.op("Unsqueeze", "", {s, b.constant("ax", TensorData::from_int64(DType::i64, {1}, {4}))}, {s5});
    const TensorId e5 = b.tensor("e5", DType::f32, split, TensorRole::activation);
    b.op("Expand", "", {s5, b.constant("split", TensorData::from_int64(DType::i64, {5}, split))}, {e5});
    b.op("Reshape", "", {e5, b.constant("back", TensorData::from_int64(DType::i64, {4}, dims))}, {e});
  } else {
    b.op("Expand", "", {s, b.constant("full", TensorData::from_int64(DType::i64, {4}, dims))}, {e});
  }
  b.op("Mul", "", {h, e}, {b.result("y", DType::f32, dims)});
  return plan_keep_all(b.g);
}

}  // namespace

TEST_CASE("an expanded view that elementwise ops read is no buffer of PyTorch's until a tensor of its own takes the bytes") {
  const planner::TrainingPlanResult r = plan_gate(false), copied = plan_gate(true);
  REQUIRE(r.report.valid);
  REQUIRE(copied.report.valid);
  const Graph& g = r.graph;
  const TensorId e = g.find("e");
  REQUIRE(e != kNoTensor);
  const auto spans = planner::pytorch_unallocated_spans(g, r.plan);
  REQUIRE(spans.size() == 1);
  const planner::Buffer& buf = r.plan.buffers[spans[0].buffer];
  CHECK(buf.tensors.front() == e);
  CHECK(spans[0].first == buf.interval.first);
  // The Mul saved e for its backward: it lives until the gradient of h is made, in place over it or not.
  std::uint32_t e_last = 0;
  for (std::uint32_t s = 0; s < r.plan.schedule.size(); ++s)
    for (TensorId t : g.ops[r.plan.schedule[s]].inputs)
      if (t == e) e_last = s;
  CHECK(spans[0].last >= e_last - 1);
  CHECK(spans[0].last <= e_last);
  // Expanded to other dims and reshaped back, PyTorch copies: nothing is left out.
  CHECK(planner::pytorch_unallocated_spans(copied.graph, copied.plan).empty());
  // The gate's bytes (x-sized) are below the prediction: PyTorch holds x, h and y-sized gradients, never e.
  const planner::EagerPeak with_view = planner::eager_peak(g, r.plan), with_copy = planner::eager_peak(copied.graph, copied.plan);
  CHECK(with_copy.peak_bytes - with_view.peak_bytes >= 8ull * 64 * 32 * 32 * 4);
}

namespace {

// z = MatMul(x, w) * g under bf16 autocast, g a float32 scale: the Mul reads the bf16 product beside a float32
// weight (type promotion). With `model_cast` the model casts the product to float32 itself first (`y.float() * g`).
planner::TrainingPlanResult plan_scaled(bool model_cast) {
  runtime::testing::OpGraph b;
  b.g.name = "scaled";
  const TensorId x = b.tensor("x", DType::f32, {512, 256}, TensorRole::input);
  b.g.inputs = {x};
  TensorId y = b.tensor("y", DType::f32, {512, 1024}, TensorRole::activation);
  b.op("MatMul", "", {x, b.tensor("w", DType::f32, {256, 1024}, TensorRole::weight)}, {y});
  if (model_cast) {
    const TensorId y32 = b.tensor("y32", DType::f32, {512, 1024}, TensorRole::activation);
    b.op("Cast", "", {y}, {y32}, {{"to", runtime::testing::int_attr(static_cast<std::int64_t>(DType::f32))}});
    y = y32;
  }
  b.op("Mul", "", {y, b.tensor("g", DType::f32, {1024}, TensorRole::weight)}, {b.result("z", DType::f32, {512, 1024})});
  return plan_keep_all(b.g, Precision::bf16);
}

}  // namespace

TEST_CASE("under autocast a promoting elementwise op holds its 16-bit operand, not the plan's float32 cast of it") {
  const planner::TrainingPlanResult r = plan_scaled(false), own = plan_scaled(true);
  REQUIRE(r.report.valid);
  REQUIRE(own.report.valid);
  const Graph& g = r.graph;
  const TensorId y = g.find("y");
  REQUIRE(g.tensors[y].dtype == DType::bf16);
  const auto held = planner::pytorch_promoted_sources(g, r.plan);
  REQUIRE(held.size() == 1);
  CHECK(held[0].tensor == y);
  std::uint32_t spans_of_casts = 0;
  for (const auto& u : planner::pytorch_unallocated_spans(g, r.plan)) {
    const Tensor& t = g.tensors[r.plan.buffers[u.buffer].tensors.front()];
    CHECK(t.dtype == DType::f32);
    CHECK(g.ops[t.producer].type == "Cast");
    CHECK(g.ops[t.producer].inputs[0] == y);
    ++spans_of_casts;
  }
  CHECK(spans_of_casts == 1);
  // The model's own .float() is PyTorch's copy: saved for the Mul's backward as the float32 tensor it is.
  CHECK(planner::pytorch_promoted_sources(own.graph, own.plan).empty());
  const std::uint64_t y_bf16 = 512 * 1024 * 2;
  const planner::EagerPeak promoted = planner::eager_peak(g, r.plan), copied = planner::eager_peak(own.graph, own.plan);
  CHECK(copied.peak_bytes >= promoted.peak_bytes + y_bf16);
}
