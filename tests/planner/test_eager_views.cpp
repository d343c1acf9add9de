// Tests of buffers_pytorch_never_allocates: what an ONNX export materializes that PyTorch eager does not, and eager_peak
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

struct Scatter {
  TrainingGraph tg;
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
  TrainingOptions to;
  to.optimizer = Optimizer::none;
  s.tg = build_training_graph(infer_shapes(b.g, {}), to);
  planner::TrainingPlanOptions o;
  o.strategy = "none";
  s.r = planner::plan_training(s.tg, o);
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
  const auto never = planner::buffers_pytorch_never_allocates(c.r.graph, plan);
  REQUIRE(never.size() == 1);
  CHECK(plan.buffers[never[0]].tensors == std::vector<TensorId>{c.grid});
  CHECK(planner::buffers_pytorch_never_allocates(dep.r.graph, dep.r.plan).empty());
  // The grid is saved for ScatterND's backward: counted, it would be live at the peak with the data's gradient.
  const std::uint64_t grid_bytes = 2 * 8 * 63 * 63 * 4 * 8;
  const planner::EagerPeak ec = planner::eager_peak(c.r.graph, plan), ed = planner::eager_peak(dep.r.graph, dep.r.plan);
  CHECK(ec.resident_bytes + sizeof(std::int64_t) == ed.resident_bytes);  // the offset input
  CHECK(ed.peak_bytes - ed.resident_bytes >= ec.peak_bytes - ec.resident_bytes + grid_bytes);
}
