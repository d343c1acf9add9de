// Tests of planning autocast training steps: smaller activation arenas than fp32, verified plans, autocast's weight cache.
#include <doctest/doctest.h>

#include <string>

#include "analysis/import.hpp"
#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "planner/pytorch/eager_model.hpp"
#include "planner/fusion.hpp"
#include "planner/training_plan.hpp"

using namespace memplan;
using namespace memplan::analysis;

namespace {

TrainingGraph train(const Graph& shaped, Precision p, std::vector<std::string> frozen = {}) {
  TrainingOptions o;
  o.precision = p;
  o.frozen = std::move(frozen);
  return build_training_graph(shaped, o);
}

// Bytes of the activations the backward pass reads (what autocast shrinks; weight gradients stay fp32),
// without autocast's bf16 weight copies, which backward reads too (the matmuls' and convolutions' dX).
// Autocast's cached copy of a weight: a Cast whose input is a weight.
bool weight_copy(const Graph& g, TensorId t) {
  const OpId p = g.tensors[t].producer;
  return p != kNoOp && g.ops[p].type == "Cast" && g.tensors[g.ops[p].inputs[0]].role == TensorRole::weight;
}

std::uint64_t saved_bytes(const TrainingGraph& tg) {
  std::uint64_t n = 0;
  for (TensorId t : tg.saved_for_backward)
    if (!weight_copy(tg.graph, t)) n += tg.graph.tensors[t].bytes();
  return n;
}

planner::TrainingPlanResult plan(const Graph& shaped, Precision p, std::vector<std::string> frozen = {}) {
  const TrainingGraph tg = train(shaped, p, std::move(frozen));
  planner::TrainingPlanOptions po;
  po.strategy = "none";
  return planner::plan_training(tg, po);
}

Graph sample(const std::string& path, std::map<std::string, std::int64_t> dims) {
  ShapeOptions so;
  so.dims = std::move(dims);
  return infer_shapes(import_model(std::string(MEMPLAN_SOURCE_DIR) + "/samples/" + path), so);
}

}  // namespace

TEST_CASE("bf16 autocast shrinks the planned activations of a transformer and a CNN, and the plans verify") {
  // Most saved (percent of fp32): unfused attention saves softmax's fp32 output and its bf16 copy for the
  // next matmul, as eager autocast does; the residual stream and LayerNorm stay fp32.
  struct Case {
    std::string path;
    std::map<std::string, std::int64_t> dims;
    std::uint64_t most_percent;
  };
  const Case models[] = {
      {"transformers/bert_small.train.onnx", {{"batch", 4}, {"seq", 128}}, 85},
      {"models/resnet18.train.onnx", {{"batch", 4}}, 60},
  };
  for (const auto& m : models) {
    INFO(m.path);
    const Graph g = sample(m.path, m.dims);
    const auto f = plan(g, Precision::fp32);
    const auto b = plan(g, Precision::bf16);
    CHECK(f.report.valid);
    CHECK(b.report.valid);
    INFO("fp32 arena " << f.activation_arena_bytes << ", bf16 arena " << b.activation_arena_bytes);
    CHECK(b.activation_arena_bytes < f.activation_arena_bytes);
    const std::uint64_t saved_f = saved_bytes(train(g, Precision::fp32)), saved_b = saved_bytes(train(g, Precision::bf16));
    INFO("saved for backward: fp32 " << saved_f << ", bf16 " << saved_b);
    CHECK(saved_b * 100 < saved_f * m.most_percent);
    CHECK(b.lower_bound_bytes <= f.lower_bound_bytes);
    CHECK(b.persistent_bytes == f.persistent_bytes);  // fp32 master weights and optimizer state
  }
}

TEST_CASE("eager_peak keeps autocast's cast of a weight until the forward pass ends") {
  // x[2,8] @ W1[8,65536] (frozen) + bias -> relu -> mean: W1's bf16 copy is read by the matmul alone (no
  // gradient needs it), so the plan frees it there while PyTorch's autocast cache holds it to the loss.
  Graph g;
  auto add = [&](const std::string& n, std::vector<std::int64_t> d, TensorRole r) {
    Tensor t;
    t.name = n;
    t.dtype = DType::f32;
    for (auto v : d) t.dims.push_back(Dim::of(v));
    t.rank_known = true;
    t.role = r;
    const TensorId id = g.add_tensor(std::move(t));
    if (r == TensorRole::input) g.inputs.push_back(id);
    return id;
  };
  const TensorId x = add("x", {2, 8}, TensorRole::input), w1 = add("W1", {8, 65536}, TensorRole::weight);
  const TensorId bias = add("bias", {65536}, TensorRole::weight), h = add("h", {2, 65536}, TensorRole::activation);
  const TensorId hb = add("hb", {2, 65536}, TensorRole::activation), r = add("r", {2, 65536}, TensorRole::activation);
  const TensorId y = add("y", {2, 1}, TensorRole::activation);
  g.add_op(Op{.name = "mm", .type = "MatMul", .inputs = {x, w1}, .outputs = {h}});
  g.add_op(Op{.name = "bias", .type = "Add", .inputs = {h, bias}, .outputs = {hb}});
  g.add_op(Op{.name = "relu", .type = "Relu", .inputs = {hb}, .outputs = {r}});
  Op mean{.name = "mean", .type = "ReduceMean", .inputs = {r}, .outputs = {y}};
  Attribute axes;
  axes.kind = Attribute::Kind::ints;
  axes.ints = {1};
  mean.attrs["axes"] = axes;
  g.add_op(mean);
  g.outputs = {y};
  g.tensors[y].is_graph_output = true;
  const auto b = plan(g, Precision::bf16, {"W1"});
  REQUIRE(b.report.valid);
  const TensorId cast = b.graph.at("W1/autocast_bfloat16");
  const auto& buf = b.plan.buffers.at(b.plan.tensor_buffer.at(cast));
  std::uint32_t forward_end = 0;
  for (std::uint32_t s = 0; s < b.plan.schedule.size(); ++s)
    if (b.graph.ops[b.plan.schedule[s]].phase == Phase::forward) forward_end = s;
  CHECK(buf.interval.last < forward_end);  // planned: freed after its last reader
  // Replayed without the cache (the cast is no longer a weight's), the eager peak drops by the copy at most.
  Graph uncached = b.graph;
  uncached.tensors[w1].role = TensorRole::input;
  const auto with_cache = planner::eager_peak(b.graph, b.plan), without = planner::eager_peak(uncached, b.plan);
  const std::uint64_t cached_live = with_cache.peak_bytes - with_cache.resident_bytes;
  const std::uint64_t uncached_live = without.peak_bytes - without.resident_bytes;
  CHECK(cached_live > uncached_live);
  CHECK(cached_live <= uncached_live + buf.size);
}

TEST_CASE("a fused Linear bias + activation group reading a bf16 matmul runs in bf16 (no fp32 copy of the matmul output)") {
  // deit_tiny's MLP: fc1 MatMul, then Add(bias) and the erf GELU fused into one FusedElementwise. As F.linear
  // and the GELU after it under autocast, the group reads the bf16 matmul output and the bias, and runs in bf16.
  Graph fwd = sample("transformers/deit_tiny.train.onnx", {{"batch", 2}});
  planner::FuseOptions fo;
  fo.training = true;
  fwd = planner::fuse_graph(fwd, fo).graph;
  const TrainingGraph tg = train(fwd, Precision::bf16);
  const Graph& g = tg.graph;
  std::size_t groups = 0;
  for (const Op& op : g.ops) {
    if (op.type != memplan_ops::kFusedElementwise || op.phase != Phase::forward) continue;
    // A weight, or autocast's cached cast of one.
    const auto weight = [&g](TensorId t) {
      return g.tensors[t].producer == kNoOp ? g.tensors[t].role == TensorRole::weight : weight_copy(g, t);
    };
    bool from_matmul = false, only_weights_beside = true;
    for (TensorId t : op.inputs) {
      if (t == kNoTensor || !dtype_is_float(g.tensors[t].dtype)) continue;
      const OpId p = g.tensors[t].producer;
      if (p != kNoOp && (g.ops[p].type == "MatMul" || g.ops[p].type == memplan_ops::kMatMulT)) from_matmul = true;
      else if (!weight(t) && g.tensors[t].element_count() > 1) only_weights_beside = false;
    }
    if (!from_matmul || !only_weights_beside) continue;
    ++groups;
    CAPTURE(op.name);
    CHECK(g.tensors[op.outputs[0]].dtype == DType::bf16);
    for (TensorId t : op.inputs)  // the matmul output read as it is: no fp32 copy of it
      if (t != kNoTensor && g.tensors[t].producer != kNoOp && !weight(t)) CHECK(g.ops[g.tensors[t].producer].type != "Cast");
  }
  CHECK(groups == 12);  // one per block's MLP
}
