// Tests of cudnn_conv: PyTorch's cuDNN convolution workspaces and layout copies for the eager prediction. The rule's
// bytes are held to python/memplan_torch/device_rules.py over a grid by tests/python/test_estimate_conv_rule.py;
// these pin a few against the Python rule's values (device_rules.py as of 61f5ddc) and check which op of a
// training graph is which pass of which convolution.
#include <doctest/doctest.h>

#include <string>

#include "analysis/ops.hpp"
#include "analysis/training.hpp"
#include "planner/pytorch/cudnn_conv.hpp"
#include "planner/pytorch/eager_model.hpp"
#include "planner/training_plan.hpp"
#include "tests/runtime_allocator/op_graph.hpp"

using namespace memplan;
using namespace memplan::analysis;
using planner::ConvPass;
using planner::MemoryFormat;
using runtime::testing::int_attr;
using runtime::testing::ints_attr;

namespace {

planner::CudaConvolution conv2d(std::int64_t n, std::int64_t c, std::int64_t k, std::int64_t size, std::int64_t kernel,
                                std::int64_t stride, DType dtype, std::int64_t groups = 1) {
  planner::CudaConvolution cv;
  const std::int64_t out = (size + 2 * (kernel / 2) - kernel) / stride + 1;
  cv.x.shape = {n, c, size, size};
  cv.w.shape = {k, c / groups, kernel, kernel};
  cv.y.shape = {n, k, out, out};
  cv.dtype = dtype;
  cv.stride = {stride, stride};
  cv.dilation = {1, 1};
  cv.groups = groups;
  return cv;
}

std::uint64_t ws(const planner::CudaConvolution& c, ConvPass p) { return planner::cudnn_conv_workspace_bytes(c, p); }

}  // namespace

TEST_CASE("cuDNN workspaces per pass equal the Python rule's on each family") {
  // fp32, 3x3 stride 1, 64 channels on 56x56: no forward workspace, the FFT input gradient, the weight gradient's
  // 2.25 (x + y) + 3.85 w
  const auto a = conv2d(8, 64, 64, 56, 3, 1, DType::f32);
  CHECK(ws(a, ConvPass::forward) == 0);
  CHECK(ws(a, ConvPass::backward_data) == 26738688);
  CHECK(ws(a, ConvPass::backward_filter) == 29469081);
  // fp32 forward at an 8x8 output with 96 input channels: the FFT filter bank, 2484 bytes per filter pair
  CHECK(ws(conv2d(8, 96, 128, 8, 3, 1, DType::f32), ConvPass::forward) == 2484ull * 96 * 128);
  CHECK(ws(conv2d(8, 75, 128, 8, 3, 1, DType::f32), ConvPass::forward) == 0);
  // bf16: a contiguous 3x3 convolution transforms x, y and w in every pass; a 1x1 one only splits its weight gradient
  const auto b = conv2d(8, 64, 64, 56, 3, 1, DType::bf16);
  for (ConvPass p : {ConvPass::forward, ConvPass::backward_data, ConvPass::backward_filter}) CHECK(ws(b, p) == 6496256);
  const auto one = conv2d(8, 64, 256, 56, 1, 1, DType::bf16);
  CHECK(ws(one, ConvPass::forward) == 0);
  CHECK(ws(one, ConvPass::backward_data) == 0);
  CHECK(ws(one, ConvPass::backward_filter) == 32ull * 64 * 256);
  // channels-last: none in bf16; fp32 transforms to NCHW except for the weight gradient
  auto cl = b;
  cl.x.layout = MemoryFormat::channels_last;
  CHECK(planner::conv_memory_format(cl.x, cl.w) == MemoryFormat::channels_last);
  CHECK(ws(cl, ConvPass::forward) == 0);
  cl.dtype = DType::f32;
  CHECK(ws(cl, ConvPass::forward) == 2 * 6422528 + 147456);
  CHECK(ws(cl, ConvPass::backward_filter) == 0);
}

TEST_CASE("depthwise convolutions run PyTorch's kernels unless channels-last or fp16, and layouts are copied") {
  auto d = conv2d(8, 64, 64, 56, 3, 1, DType::f32, 64);
  CHECK_FALSE(planner::conv_runs_cudnn(d));
  d.dtype = DType::f16;
  CHECK(planner::conv_runs_cudnn(d));
  d.dtype = DType::bf16;
  d.w.layout = MemoryFormat::channels_last;  // one channel a group: the weight is both layouts, nothing changes
  CHECK_FALSE(planner::conv_runs_cudnn(d));
  d.x.layout = MemoryFormat::channels_last;
  CHECK(planner::conv_runs_cudnn(d));
  // a contiguous output gradient of a channels-last convolution is copied; one channel or a 1x1 map is both layouts
  const MemoryFormat f = planner::conv_memory_format(d.x, d.w);
  CHECK(planner::conv_operand_copy_bytes(d.y, DType::bf16, f) == 8ull * 64 * 56 * 56 * 2);
  CHECK(planner::conv_operand_copy_bytes(d.x, DType::bf16, f) == 0);
  CHECK(planner::conv_operand_copy_bytes(d.w, DType::bf16, f) == 0);
  CHECK(planner::conv_operand_copy_bytes({{8, 1, 28, 28}, MemoryFormat::contiguous}, DType::f32, MemoryFormat::channels_last) ==
        0);
  CHECK(planner::conv_operand_copy_bytes({{8, 64, 1, 1}, MemoryFormat::channels_last}, DType::f32, MemoryFormat::contiguous) ==
        0);
  CHECK(planner::conv_operand_copy_bytes({{8, 64, 100}, MemoryFormat::channels_last}, DType::f32, MemoryFormat::channels_last) ==
        0);
}

namespace {

// x [8, 64, 56, 56] -> `type` (3x3, 64 -> 64) -> Relu -> the same again -> GlobalAveragePool -> Flatten -> logits;
// cross-entropy, no optimizer, `precision`; planned keeping everything.
planner::TrainingPlanResult plan_convs(Precision precision) {
  runtime::testing::OpGraph b;
  b.g.name = "convs";
  const TensorId x = b.tensor("x", DType::f32, {8, 64, 56, 56}, TensorRole::input);
  b.g.inputs = {x};
  std::map<std::string, Attribute> a{{"pads", ints_attr({1, 1, 1, 1})}, {"group", int_attr(1)}};
  const auto act = [&](const char* n) { return b.tensor(n, DType::f32, {8, 64, 56, 56}, TensorRole::activation); };
  const TensorId h1 = act("h1"), r1 = act("r1"), h2 = act("h2");
  const TensorId pooled = b.tensor("p", DType::f32, {8, 64, 1, 1}, TensorRole::activation);
  b.op("Conv", "", {x, b.tensor("w1", DType::f32, {64, 64, 3, 3}, TensorRole::weight)}, {h1}, a);
  b.op("Relu", "", {h1}, {r1});
  b.op("Conv", "", {r1, b.tensor("w2", DType::f32, {64, 64, 3, 3}, TensorRole::weight)}, {h2}, a);
  b.op("GlobalAveragePool", "", {h2}, {pooled});
  b.op("Flatten", "", {pooled}, {b.result("logits", DType::f32, {8, 64})});
  TrainingOptions to;
  to.optimizer = Optimizer::none;
  to.loss = Loss::ce;
  to.precision = precision;
  planner::TrainingPlanOptions o;
  o.strategy = "none";
  return planner::plan_training(build_training_graph(b.g, to), o);
}

std::vector<std::uint64_t> workspaces_of(const Graph& g, const planner::Plan& plan, std::string_view type) {
  std::vector<std::uint64_t> out;
  for (OpId o : plan.schedule)
    if (g.ops[o].type == type) out.push_back(planner::pytorch_convolution_allocations(g, o).workspace);
  return out;
}

}  // namespace

TEST_CASE("a training graph's Conv, ConvGradInput and ConvGradWeight are the forward, input and weight gradient passes") {
  const planner::TrainingPlanResult r = plan_convs(Precision::fp32);
  REQUIRE(r.report.valid);
  const Graph& g = r.graph;
  CHECK(workspaces_of(g, r.plan, "Conv") == std::vector<std::uint64_t>{0, 0});
  CHECK(workspaces_of(g, r.plan, "ConvGradInput") == std::vector<std::uint64_t>{26738688});  // the first reads x
  CHECK(workspaces_of(g, r.plan, "ConvGradWeight") == std::vector<std::uint64_t>{29469081, 29469081});
  for (OpId o = 0; o < g.ops.size(); ++o) CHECK(planner::pytorch_convolution_allocations(g, o).held == 0);
  // the weight gradient's workspace, on top of what the plan holds there, is the step's peak
  const planner::EagerPeak e = planner::eager_peak(g, r.plan);
  std::uint32_t wgrad = 0;
  for (std::uint32_t s = 0; s < r.plan.schedule.size(); ++s)
    if (g.ops[r.plan.schedule[s]].type == "ConvGradWeight") wgrad = s;  // the first convolution's, the last one
  CHECK(g.ops[r.plan.schedule[e.peak_step]].type == "ConvGradWeight");
  std::uint64_t planned = 0;
  for (const auto& b : r.plan.buffers)
    if (b.interval.first <= wgrad && wgrad <= b.interval.last) planned += b.size;
  CHECK(e.peak_bytes - e.resident_bytes >= planned + align_up(29469081, r.plan.alignment));
}

TEST_CASE("under bf16 autocast the convolutions run in bf16: every pass of a 3x3 one transforms its operands") {
  const planner::TrainingPlanResult r = plan_convs(Precision::bf16);
  REQUIRE(r.report.valid);
  const std::uint64_t xyw = 2 * 8ull * 64 * 56 * 56 * 2 + 64 * 64 * 9 * 2;
  CHECK(workspaces_of(r.graph, r.plan, "Conv") == std::vector<std::uint64_t>{xyw, xyw});
  CHECK(workspaces_of(r.graph, r.plan, "ConvGradInput") == std::vector<std::uint64_t>{xyw});
  CHECK(workspaces_of(r.graph, r.plan, "ConvGradWeight") == std::vector<std::uint64_t>{xyw, xyw});
}

TEST_CASE("a channels-last input runs its convolution channels-last: both backward passes hold the copies of both") {
  const planner::TrainingPlanResult r = plan_convs(Precision::fp32);
  REQUIRE(r.report.valid);
  const Graph& g = r.graph;
  std::vector<MemoryFormat> layouts(g.tensors.size(), MemoryFormat::contiguous);
  layouts[g.at("r1")] = MemoryFormat::channels_last;  // the second convolution's input
  const std::uint64_t act = 8ull * 64 * 56 * 56 * 4, w = 64 * 64 * 9 * 4;
  std::vector<std::uint64_t> held, workspace;
  for (OpId o : r.plan.schedule) {
    const auto& op = g.ops[o];
    if (op.type != "Conv" && op.type != "ConvGradInput" && op.type != "ConvGradWeight") continue;
    const auto a = planner::pytorch_convolution_allocations(g, o, layouts);
    held.push_back(a.held);
    workspace.push_back(a.workspace);
  }
  // forward: conv1, conv2 (its weight copied to channels-last; fp32 transforms to NCHW: x + y + w); backward:
  // conv2's input and weight gradients (the contiguous output gradient and the weight copied, in both), conv1's
  // weight gradient (contiguous, nothing copied)
  CHECK(held == std::vector<std::uint64_t>{0, w, act + w, act + w, 0});
  CHECK(workspace == std::vector<std::uint64_t>{0, 2 * act + w, 2 * act + w, 0, 29469081});
}

TEST_CASE("a transposed convolution and its gradients (a Conv and a ConvGradWeight in the backward) take no workspace") {
  runtime::testing::OpGraph b;
  b.g.name = "deconv";
  const TensorId x = b.tensor("x", DType::f32, {8, 64, 28, 28}, TensorRole::input);
  b.g.inputs = {x};
  const TensorId h = b.tensor("h", DType::f32, {8, 32, 56, 56}, TensorRole::activation);
  const TensorId r1 = b.tensor("r", DType::f32, {8, 32, 56, 56}, TensorRole::activation);
  const TensorId y = b.tensor("y", DType::f32, {8, 32, 56, 56}, TensorRole::activation);
  const TensorId pooled = b.tensor("p", DType::f32, {8, 32, 1, 1}, TensorRole::activation);
  b.op("Conv", "", {x, b.tensor("w0", DType::f32, {64, 64, 1, 1}, TensorRole::weight)},
       {b.tensor("x1", DType::f32, {8, 64, 28, 28}, TensorRole::activation)});
  b.op("ConvTranspose", "", {b.g.at("x1"), b.tensor("w", DType::f32, {64, 32, 4, 4}, TensorRole::weight)}, {h},
       {{"strides", ints_attr({2, 2})}, {"pads", ints_attr({1, 1, 1, 1})}});
  b.op("Relu", "", {h}, {r1});
  b.op("Conv", "", {r1, b.tensor("w2", DType::f32, {32, 32, 3, 3}, TensorRole::weight)}, {y},
       {{"pads", ints_attr({1, 1, 1, 1})}});
  b.op("GlobalAveragePool", "", {y}, {pooled});
  b.op("Flatten", "", {pooled}, {b.result("logits", DType::f32, {8, 32})});
  TrainingOptions to;
  to.optimizer = Optimizer::none;
  to.loss = Loss::ce;
  to.precision = Precision::bf16;  // where a non-transposed 4x4 convolution's every pass would take x + y + w
  planner::TrainingPlanOptions o;
  o.strategy = "none";
  const planner::TrainingPlanResult r = planner::plan_training(build_training_graph(b.g, to), o);
  REQUIRE(r.report.valid);
  const Graph& g = r.graph;
  std::size_t transposed_passes = 0;
  for (OpId op = 0; op < g.ops.size(); ++op) {
    const auto& o2 = g.ops[op];
    const bool deconv =
        o2.type == "ConvTranspose" || (o2.type == "Conv" && o2.phase == Phase::backward) ||
        (o2.type == "ConvGradWeight" && g.tensors[o2.outputs[0]].shape() == std::vector<std::int64_t>{64, 32, 4, 4});
    if (!deconv) continue;
    ++transposed_passes;
    CHECK(planner::pytorch_convolution_allocations(g, op).workspace == 0);
  }
  CHECK(transposed_passes == 3);  // forward, input gradient, weight gradient
  // the ordinary 3x3 convolution after it still takes its workspaces
  CHECK(workspaces_of(g, r.plan, "ConvGradInput") == std::vector<std::uint64_t>{2 * 8ull * 32 * 56 * 56 * 2 + 32 * 32 * 9 * 2});
}
