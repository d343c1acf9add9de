// Tests of layout fusion: Transposes read through strides by MatMul (memplan MatMulT) and Gemm (flags) plan no copy.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <utility>

#include "analysis/import.hpp"
#include "analysis/ops.hpp"
#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "planner/fusion.hpp"
#include "planner/training_plan.hpp"
#include "runtime_allocator/executor.hpp"
#include "runtime_allocator/backend.hpp"
#include "tests/runtime_allocator/op_graph.hpp"

using namespace memplan;
using namespace memplan::analysis;
using namespace memplan::planner;
using runtime::testing::int_attr;
using runtime::testing::ints_attr;
using runtime::testing::OpGraph;
using runtime::testing::random_f32;

namespace {

bool is_swap_transpose(const Graph& g, const Op& op) {
  if (op.type != "Transpose") return false;
  const std::size_t r = g.tensors[op.inputs[0]].dims.size();
  std::vector<std::int64_t> perm = op.attr_ints("perm");
  if (perm.empty())
    for (std::size_t k = r; k-- > 0;) perm.push_back(static_cast<std::int64_t>(k));
  for (std::size_t k = 0; k + 2 < r; ++k)
    if (perm[k] != static_cast<std::int64_t>(k)) return false;
  return r >= 2 && perm[r - 2] == static_cast<std::int64_t>(r - 1) && perm[r - 1] == static_cast<std::int64_t>(r - 2);
}

struct TransposeReads {
  int any = 0;     // MatMul operands produced by a Transpose of the last two axes
  int weight = 0;  // of them, transposes of a weight
};

TransposeReads transposed_matmul_operands(const Graph& g) {
  TransposeReads n;
  for (const Op& op : g.ops) {
    if (op.type != "MatMul" && op.type != "MatMulT" && op.type != "Gemm") continue;
    for (std::size_t i = 0; i < 2; ++i) {
      const OpId p = g.tensors[op.inputs[i]].producer;
      if (p == kNoOp || !is_swap_transpose(g, g.ops[p])) continue;
      ++n.any;
      const Tensor& src = g.tensors[g.ops[p].inputs[0]];
      if (src.role == TensorRole::weight && src.producer == kNoOp) ++n.weight;
    }
  }
  return n;
}

int count_type(const Graph& g, std::string_view type) {
  int n = 0;
  for (const Op& op : g.ops) n += op.type == type;
  return n;
}

Graph sample(const std::string& name) {
  ShapeOptions so;
  so.dims = {{"batch", 2}, {"seq", 64}};
  return infer_shapes(import_model(std::string(MEMPLAN_SOURCE_DIR) + "/samples/transformers/" + name + ".train.onnx"), so);
}

FuseOptions layouts_only() {
  FuseOptions o = FuseOptions::none();
  o.layouts = true;
  return o;
}

}  // namespace

TEST_CASE("no MatMul of the transformer exports reads a transposed weight after layout fusion, and outputs keep their shapes") {
  for (const char* name : {"bert_small", "gpt2_small", "deit_tiny"}) {
    CAPTURE(name);
    const Graph g = sample(name);
    const TransposeReads before = transposed_matmul_operands(g);
    CHECK(before.weight > 0);
    const FusionResult r = fuse_graph(g, layouts_only());
    r.graph.validate();
    const TransposeReads after = transposed_matmul_operands(r.graph);
    CHECK(after.weight == 0);
    CHECK(after.any == 0);
    CHECK(count_type(r.graph, "Transpose") <= count_type(g, "Transpose") - before.weight);
    CHECK(count_type(r.graph, "MatMulT") == static_cast<int>(r.groups.size()));
    CHECK(r.intermediate_bytes_removed > 0);
    REQUIRE(r.graph.outputs.size() == g.outputs.size());
    for (std::size_t k = 0; k < g.outputs.size(); ++k) {
      CHECK(r.graph.tensors[r.graph.outputs[k]].name == g.tensors[g.outputs[k]].name);
      CHECK(r.graph.tensors[r.graph.outputs[k]].shape() == g.tensors[g.outputs[k]].shape());
    }
    for (const FusedGroup& grp : r.groups) {
      CHECK(grp.kind == "layout");
      REQUIRE(grp.op != kNoOp);
      const Op& op = r.graph.ops[grp.op];
      CHECK(op.type == "MatMulT");
      CHECK(op.attr("fused_ops")->strings == grp.members);
      CHECK(op_registry().find(op)->flops(r.graph, op) > 0.0);
    }
  }
}

TEST_CASE("a Transpose read by another op stays, and a Gemm reading one flips its flag") {
  std::mt19937 rng(1);
  OpGraph b;
  const TensorId x = b.input("x", random_f32({3, 4}, rng));
  const TensorId w = b.constant("w", random_f32({5, 4}, rng));
  const TensorId wt = b.tensor("wt", DType::f32, {4, 5}, TensorRole::activation);
  b.op("Transpose", "", {w}, {wt}, {{"perm", ints_attr({1, 0})}});
  const TensorId y = b.result("y", DType::f32, {3, 5}), r = b.result("r", DType::f32, {4, 5});
  b.op("MatMul", "", {x, wt}, {y});
  b.op("Relu", "", {wt}, {r});
  const TensorId v = b.constant("v", random_f32({6, 3}, rng));
  const TensorId vt = b.tensor("vt", DType::f32, {3, 6}, TensorRole::activation);
  b.op("Transpose", "", {v}, {vt});  // default perm: reversed axes
  const TensorId z = b.result("z", DType::f32, {6, 5});
  b.op("Gemm", "", {vt, y}, {z}, {{"transA", int_attr(1)}});
  b.g.validate();
  const FusionResult f = fuse_layouts(b.g);
  f.graph.validate();
  REQUIRE(f.groups.size() == 2);
  CHECK(count_type(f.graph, "Transpose") == 1);  // w's stays for the Relu
  CHECK(f.groups[0].members == std::vector<std::string>{"MatMul_1"});
  CHECK(f.groups[0].intermediate_bytes == 0);
  CHECK(f.groups[1].members.size() == 2);
  CHECK(f.groups[1].intermediate_bytes == 3 * 6 * 4);
  const Op& gemm = f.graph.ops[f.groups[1].op];
  CHECK(gemm.type == "Gemm");
  CHECK(gemm.attr_int("transA", -1) == 0);
  CHECK(gemm.inputs[0] == f.graph.find("v"));
  const Op& mm = f.graph.ops[f.groups[0].op];
  CHECK(mm.inputs[1] == f.graph.find("w"));
  CHECK(mm.attr_int("trans_b", 0) == 1);
  CHECK(mm.attr_int("trans_a", 1) == 0);
}

namespace {

// Linear layers as TorchScript writes them, a K^T-style batched transpose and a transposed left operand.
OpGraph small_model() {
  std::mt19937 rng(7);
  OpGraph b;
  const TensorId x = b.input("x", random_f32({2, 3, 4}, rng));
  auto weight = [&](const std::string& n, std::vector<std::int64_t> d) { return b.constant(n, random_f32(d, rng, -0.5, 0.5)); };
  auto act = [&](const std::string& n, std::vector<std::int64_t> d) { return b.tensor(n, DType::f32, d, TensorRole::activation); };
  const TensorId w1 = weight("w1", {5, 4}), z = weight("z", {2, 6, 5}), w2 = weight("w2", {6, 4});
  const TensorId w1t = act("w1t", {4, 5}), h = act("h", {2, 3, 5}), zt = act("zt", {2, 5, 6}), s = act("s", {2, 3, 6});
  const TensorId st = act("st", {2, 6, 3}), u = act("u", {2, 6, 4}), w2t = act("w2t", {4, 6});
  b.op("Transpose", "", {w1}, {w1t}, {{"perm", ints_attr({1, 0})}});
  b.op("MatMul", "", {x, w1t}, {h});
  b.op("Transpose", "", {z}, {zt}, {{"perm", ints_attr({0, 2, 1})}});
  b.op("MatMul", "", {h, zt}, {s});
  b.op("Transpose", "", {s}, {st}, {{"perm", ints_attr({0, 2, 1})}});
  b.op("MatMul", "", {st, x}, {u});
  b.op("Transpose", "", {w2}, {w2t}, {{"perm", ints_attr({1, 0})}});
  const TensorId y = b.result("y", DType::f32, {2, 6, 6});
  b.op("MatMul", "", {u, w2t}, {y});
  return b;
}

std::vector<float> values(const TensorData& d) {
  std::vector<float> f(d.bytes.size() / 4);
  std::memcpy(f.data(), d.bytes.data(), f.size() * 4);
  return f;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = a.size() == b.size() ? 0.0 : INFINITY;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

// Output y and each weight's gradient after one training step's backward (CPU executor, unshared).
// The weights train as initializers do (values off the graph while it is built, given back after).
std::map<std::string, std::vector<float>> train_step(Graph g, const TensorData& x) {
  std::map<std::string, std::shared_ptr<const TensorData>> weights;
  for (Tensor& t : g.tensors)
    if (t.role == TensorRole::weight) weights[t.name] = std::exchange(t.data, nullptr);
  TrainingOptions to;
  to.optimizer = Optimizer::none;
  TrainingGraph tg = build_training_graph(g, to);
  for (const auto& [name, data] : weights) tg.graph.tensors[tg.graph.find(name)].data = data;
  runtime::HostBackend backend;
  runtime::Executor ex(tg.graph, Plan{}, backend, {.unshared = true});
  const Tensor& y = tg.graph.tensors[tg.graph.find("y")];
  std::vector<double> target(y.element_count());
  for (std::size_t i = 0; i < target.size(); ++i) target[i] = std::sin(static_cast<double>(i));
  ex.run(std::map<std::string, TensorData>{{"x", x}, {"target", TensorData::from_double(DType::f32, y.shape(), target)}});
  std::map<std::string, std::vector<float>> out{{"y", values(ex.read(tg.graph.find("y")))}};
  for (const auto& [w, grad] : tg.param_grads) out[tg.graph.tensors[w].name] = values(ex.read(grad));
  return out;
}

}  // namespace

TEST_CASE("fused and unfused graphs give the same outputs and weight gradients on the CPU") {
  const OpGraph b = small_model();
  b.g.validate();
  const FusionResult f = fuse_layouts(b.g);
  f.graph.validate();
  CHECK(count_type(f.graph, "Transpose") == 0);
  CHECK(count_type(f.graph, "MatMulT") == 4);
  const auto plain = train_step(b.g, b.feeds[0]), fused = train_step(f.graph, b.feeds[0]);
  REQUIRE(plain.size() == 4);  // y, w1, z, w2
  for (const auto& entry : plain) {
    const std::string name = entry.first;
    CAPTURE(name);
    REQUIRE(fused.count(name) == 1);
    const double d = max_diff(fused.at(name), entry.second);
    CHECK(d <= 1e-4);
  }
}

TEST_CASE("bert_small's planned training peak (strategy none) drops with layout fusion") {
  const Graph g = sample("bert_small");
  const FusionResult f = fuse_graph(g, layouts_only());
  TrainingPlanOptions o;
  o.strategy = "none";
  const auto plain = plan_training(build_training_graph(g, {}), o), fused = plan_training(build_training_graph(f.graph, {}), o);
  INFO("peak without " << plain.peak_bytes << " B, with " << fused.peak_bytes << " B");
  CHECK(fused.report.valid);
  CHECK(fused.peak_bytes < plain.peak_bytes);
  // The saved transposed weights went: at least the bytes of one weight-sized copy.
  CHECK(plain.peak_bytes - fused.peak_bytes >= f.intermediate_bytes_removed / 26);
}

namespace {

// One ViT attention block as TorchScript exports timm's: a fused qkv projection reshaped to [B, S, 3, H, D], permuted
// to [3, B, H, S, D], unbound (Split + Squeeze, or three Gathers), softmax(q k^T * scale) v, heads merged into y.
OpGraph vit_attention(bool gathers) {
  constexpr std::int64_t B = 2, S = 5, H = 2, D = 4, C = H * D;
  std::mt19937 rng(5);
  OpGraph b;
  b.g.opset = 17;
  auto act = [&](const std::string& n, std::vector<std::int64_t> d) { return b.tensor(n, DType::f32, d, TensorRole::activation); };
  auto ints = [&](const std::string& n, std::vector<std::int64_t> v) {
    const auto len = static_cast<std::int64_t>(v.size());
    return b.constant(n, TensorData::from_int64(DType::i64, len ? std::vector<std::int64_t>{len} : std::vector<std::int64_t>{}, v));
  };
  const TensorId x = b.input("x", random_f32({B, S, C}, rng));
  const TensorId w = b.constant("w_qkv", random_f32({C, 3 * C}, rng, -0.5, 0.5));
  const TensorId qkv = act("qkv", {B, S, 3 * C}), r5 = act("r5", {B, S, 3, H, D}), t5 = act("t5", {3, B, H, S, D});
  b.op("MatMul", "", {x, w}, {qkv});
  b.op("Reshape", "", {qkv, ints("shape5", {B, S, 3, H, D})}, {r5});
  b.op("Transpose", "", {r5}, {t5}, {{"perm", ints_attr({2, 0, 3, 1, 4})}});
  std::vector<TensorId> qkv3;
  if (gathers) {
    for (std::int64_t i = 0; i < 3; ++i) {
      const TensorId o = act("g" + std::to_string(i), {B, H, S, D});
      const TensorId idx = b.constant("i" + std::to_string(i), TensorData::from_int64(DType::i64, {}, {i}));
      b.op("Gather", "", {t5, idx}, {o}, {{"axis", int_attr(0)}});
      qkv3.push_back(o);
    }
  } else {
    const TensorId p0 = act("p0", {1, B, H, S, D}), p1 = act("p1", {1, B, H, S, D}), p2 = act("p2", {1, B, H, S, D});
    b.op("Split", "", {t5, ints("split", {1, 1, 1})}, {p0, p1, p2}, {{"axis", int_attr(0)}});
    for (TensorId p : {p0, p1, p2}) {
      const TensorId o = act(b.g.tensors[p].name + "s", {B, H, S, D});
      b.op("Squeeze", "", {p, ints("axes" + std::to_string(p), {0})}, {o});
      qkv3.push_back(o);
    }
  }
  const TensorId kt = act("kt", {B, H, D, S}), sc = act("sc", {B, H, S, S}), ss = act("ss", {B, H, S, S});
  const TensorId pr = act("pr", {B, H, S, S}), o = act("o", {B, H, S, D}), ot = act("ot", {B, S, H, D});
  b.op("Transpose", "", {qkv3[1]}, {kt}, {{"perm", ints_attr({0, 1, 3, 2})}});
  b.op("MatMul", "", {qkv3[0], kt}, {sc});
  b.op("Mul", "", {sc, b.constant("scale", TensorData::from_double(DType::f32, {}, {0.5}))}, {ss});
  b.op("Softmax", "", {ss}, {pr}, {{"axis", int_attr(-1)}});
  b.op("MatMul", "", {pr, qkv3[2]}, {o});
  b.op("Transpose", "", {o}, {ot}, {{"perm", ints_attr({0, 2, 1, 3})}});
  const TensorId y = b.result("y", DType::f32, {B, S, C});
  b.op("Reshape", "", {ot, ints("shape3", {B, S, C})}, {y});
  return b;
}

std::size_t packed_attentions(const Graph& g) {
  std::size_t n = 0;
  for (const Op& op : g.ops)
    if (op.type == memplan_ops::kFusedAttention && op.attr_string("q_layout", "") == "packed") ++n;
  return n;
}

}  // namespace

TEST_CASE("a ViT attention's unbound qkv projection is read packed: no head copies, the unfused graph's gradients") {
  for (bool gathers : {false, true}) {
    CAPTURE(gathers);
    OpGraph b = vit_attention(gathers);
    b.g.validate();
    const FusionResult f = fuse_graph(b.g, FuseOptions{true, false, false, false, true});
    f.graph.validate();
    CHECK(packed_attentions(f.graph) == 1);
    CHECK(count_type(f.graph, "Split") + count_type(f.graph, "Gather") + count_type(f.graph, "Squeeze") == 0);
    for (const Op& op : f.graph.ops) CHECK_FALSE((op.type == "Transpose" && f.graph.tensors[op.inputs[0]].dims.size() == 5));
    const auto tg = build_training_graph(f.graph, {});
    for (const Op& op : tg.graph.ops)
      if (op.type == memplan_ops::kFusedAttentionGrad) {
        CHECK(op.output(0) != kNoTensor);  // the packed tensor's one gradient
        CHECK(op.output(1) == kNoTensor);
        CHECK(op.output(2) == kNoTensor);
      }
    const auto plain = train_step(b.g, b.feeds[0]), fused = train_step(f.graph, b.feeds[0]);
    REQUIRE(plain.size() == 2);  // y, w_qkv
    for (const auto& entry : plain) {
      const std::string name = entry.first;
      CAPTURE(name);
      REQUIRE(fused.count(name) == 1);
      CHECK(max_diff(fused.at(name), entry.second) <= 1e-5);
    }
  }
}

TEST_CASE("the ViT and Swin samples read every attention's qkv packed") {
  for (const char* name : {"deit_tiny", "swin_tiny"}) {
    CAPTURE(name);
    const FusionResult f = fuse_graph(sample(name), FuseOptions{});
    CHECK(packed_attentions(f.graph) == 12);
    // what PyTorch's prediction fuses is left alone (its permute/unbind are views, its backward stacks copies)
    CHECK(packed_attentions(fuse_graph(sample(name), FuseOptions::pytorch_eager(true)).graph) == 0);
  }
}

namespace {

// torch.roll as both exporters write it, twice (axis 1 by 2, axis 2 by a negative split point), between two weight
// products so that gradients flow through both rolls; `near_miss` makes the second pair leave a gap (x[-2:], x[:3]
// of 6 elements: 5 of them, no roll).
OpGraph roll_model(bool near_miss) {
  std::mt19937 rng(11);
  OpGraph b;
  const TensorId x = b.input("x", random_f32({2, 5, 6, 3}, rng));
  const TensorId w1 = b.constant("w1", random_f32({2, 5, 6, 3}, rng, -0.5, 0.5));
  auto act = [&](const std::string& n, std::vector<std::int64_t> d) { return b.tensor(n, DType::f32, d, TensorRole::activation); };
  auto i64 = [&](const std::string& n, std::vector<std::int64_t> v) {
    return b.constant(n, runtime::testing::ints(DType::i64, {static_cast<std::int64_t>(v.size())}, v));
  };
  const TensorId a = act("a", {2, 5, 6, 3});
  b.op("Mul", "", {x, w1}, {a});
  const TensorId p0 = act("p0", {2, 3, 6, 3}), p1 = act("p1", {2, 2, 6, 3}), r1 = act("r1", {2, 5, 6, 3});
  b.op("Slice", "", {a, i64("s0", {2}), i64("e0", {INT64_MAX}), i64("a0", {1})}, {p0});
  b.op("Slice", "", {a, i64("s1", {0}), i64("e1", {2}), i64("a1", {1})}, {p1});
  b.op("Concat", "", {p0, p1}, {r1}, {{"axis", int_attr(1)}});
  const std::int64_t tail_end = near_miss ? 3 : -2, tail_len = near_miss ? 3 : 4;
  const TensorId q0 = act("q0", {2, 5, 2, 3}), q1 = act("q1", {2, 5, tail_len, 3});
  const TensorId r2 = act("r2", {2, 5, 2 + tail_len, 3});
  b.op("Slice", "", {r1, i64("s2", {-2}), i64("e2", {INT64_MAX}), i64("a2", {-2})}, {q0});
  b.op("Slice", "", {r1, i64("s3", {0}), i64("e3", {tail_end}), i64("a3", {2})}, {q1});
  b.op("Concat", "", {q0, q1}, {r2}, {{"axis", int_attr(-2)}});
  const TensorId w2 = b.constant("w2", random_f32({2, 5, 2 + tail_len, 3}, rng, -0.5, 0.5));
  const TensorId y = b.result("y", DType::f32, {2, 5, 2 + tail_len, 3});
  b.op("Mul", "", {r2, w2}, {y});
  return b;
}

FuseOptions rolls_only() {
  FuseOptions o = FuseOptions::none();
  o.rolls = true;
  return o;
}

}  // namespace

TEST_CASE("torch.roll's Slice, Slice, Concat becomes one Roll: same outputs and gradients, bit for bit") {
  const OpGraph b = roll_model(false);
  b.g.validate();
  const FusionResult f = fuse_graph(b.g, rolls_only());
  f.graph.validate();
  CHECK(count_type(f.graph, "Roll") == 2);
  CHECK(count_type(f.graph, "Slice") == 0);
  CHECK(count_type(f.graph, "Concat") == 0);
  REQUIRE(f.groups.size() == 2);
  for (const auto& grp : f.groups) {
    CHECK(grp.kind == "roll");
    CHECK(grp.members.size() == 3);
  }
  const Op& first = f.graph.ops[f.groups[0].op];
  CHECK(first.attr_ints("shifts") == std::vector<std::int64_t>{3});  // concat(x[2:], x[:2]) of 5: roll by 3
  CHECK(first.attr_ints("axes") == std::vector<std::int64_t>{1});
  const auto plain = train_step(b.g, b.feeds[0]), fused = train_step(f.graph, b.feeds[0]);
  REQUIRE(plain.size() == 3);  // y, w1, w2
  for (const auto& entry : plain) {
    const std::string name = entry.first;
    CAPTURE(name);
    REQUIRE(fused.count(name) == 1);
    CHECK(max_diff(fused.at(name), entry.second) == 0.0);
  }
}

TEST_CASE("pieces that leave a gap are no roll: the Concat and its Slices stay") {
  const OpGraph b = roll_model(true);
  const FusionResult f = fuse_graph(b.g, rolls_only());
  CHECK(count_type(f.graph, "Roll") == 1);  // the first pair still rolls
  CHECK(count_type(f.graph, "Slice") == 2);
  CHECK(count_type(f.graph, "Concat") == 1);
}

TEST_CASE("Swin's shifted windows roll as memplan Roll in planning and in PyTorch's prediction, not with --no-fuse") {
  const Graph g = sample("swin_tiny");
  // A Concat of two Slices of one tensor: what an exported roll looks like.
  auto slice_pairs = [](const Graph& x) {
    int n = 0;
    for (const Op& op : x.ops) {
      if (op.type != "Concat" || op.inputs.size() != 2) continue;
      const OpId p = x.tensors[op.inputs[0]].producer, q = x.tensors[op.inputs[1]].producer;
      n += p != kNoOp && q != kNoOp && x.ops[p].type == "Slice" && x.ops[q].type == "Slice" &&
           x.ops[p].inputs[0] == x.ops[q].inputs[0];
    }
    return n;
  };
  const int exported = slice_pairs(g);
  CHECK(exported > 0);
  const FusionResult all = fuse_graph(g, FuseOptions{});
  CHECK(count_type(all.graph, "Roll") == exported);
  CHECK(slice_pairs(all.graph) == 0);
  CHECK(count_type(fuse_graph(g, FuseOptions::pytorch_eager(true)).graph, "Roll") == exported);
  CHECK(count_type(fuse_graph(g, FuseOptions::none()).graph, "Roll") == 0);
}
