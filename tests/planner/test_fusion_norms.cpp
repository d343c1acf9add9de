// Tests of the norm and GELU passes: the transformer exports' norms and GELUs become one op each, the fused
// graph computes what the decomposed one does on the CPU executor, and near misses stay as they are.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>

#include "analysis/import.hpp"
#include "analysis/ops.hpp"
#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "planner/fusion.hpp"
#include "runtime_allocator/executor.hpp"
#include "tests/runtime_allocator/op_graph.hpp"

using namespace memplan;
using namespace memplan::analysis;
using memplan::runtime::testing::OpGraph;

namespace {

const planner::FuseOptions kNormsAndGelu{false, true, true, false, false};

Graph load(const std::string& file) {
  Graph g = import_model(std::string(MEMPLAN_SOURCE_DIR) + "/samples/transformers/" + file);
  ShapeOptions so;
  so.dims = {{"batch", 2}, {"seq", 16}};
  return infer_shapes(g, so);
}

std::size_t count(const Graph& g, std::string_view type) {
  std::size_t n = 0;
  for (const auto& op : g.ops) n += op.type == type;
  return n;
}

std::size_t groups_of(const planner::FusionResult& r, const std::string& kind) {
  std::size_t n = 0;
  for (const auto& grp : r.groups) n += grp.kind == kind;
  return n;
}

// The fused graph is a graph of its own: shapes infer again and a training graph builds from it.
void check_rebuilds(const Graph& fused) {
  ShapeOptions so;
  CHECK_NOTHROW((void)infer_shapes(fused, so));
  CHECK_NOTHROW((void)build_training_graph(fused, {}));
}

// A small graph builder: every tensor f32 with declared dims; constants carry values.
struct Net {
  OpGraph o;
  std::mt19937 rng{20261124};
  std::vector<std::int64_t> shape{3, 5, 8};

  TensorId x() { return o.input("x", runtime::testing::random_f32(shape, rng, -2.0, 2.0)); }
  TensorId k(double v) {
    return o.constant("k" + std::to_string(o.g.tensors.size()), TensorData::from_double(DType::f32, {}, {v}));
  }
  TensorId w(std::vector<std::int64_t> dims) {
    return o.constant("w" + std::to_string(o.g.tensors.size()), runtime::testing::random_f32(dims, rng, 0.5, 1.5));
  }
  TensorId axes(std::vector<std::int64_t> a) {
    const auto n = static_cast<std::int64_t>(a.size());
    return o.constant("axes" + std::to_string(o.g.tensors.size()), TensorData::from_int64(DType::i64, {n}, a));
  }
  TensorId op(const std::string& type, std::vector<TensorId> in, std::vector<std::int64_t> dims = {},
              std::map<std::string, Attribute> attrs = {}) {
    const TensorId t =
        o.tensor("t" + std::to_string(o.g.tensors.size()), DType::f32, dims.empty() ? shape : dims, TensorRole::activation);
    o.op(type, "", std::move(in), {t}, std::move(attrs));
    return t;
  }
  std::vector<std::int64_t> stats(std::size_t axis) const {
    auto s = shape;
    for (std::size_t a = axis; a < s.size(); ++a) s[a] = 1;
    return s;
  }
  TensorId mean(TensorId t, std::vector<std::int64_t> ax, std::vector<std::int64_t> dims) {
    return op("ReduceMean", {t}, std::move(dims), {{"axes", runtime::testing::ints_attr(std::move(ax))}});
  }
  void output(TensorId t) {
    o.g.outputs.push_back(t);
    o.g.tensors[t].is_graph_output = true;
  }
};

std::vector<TensorData> run(const Graph& g, const std::vector<TensorData>& feeds) {
  runtime::HostBackend backend;
  runtime::Executor ex(g, planner::Plan{}, backend, {.unshared = true});
  return ex.run(feeds);
}

// Fuses the net's graph, checks the op counts, and compares the outputs of both graphs on the CPU.
planner::FusionResult fuse_and_compare(Net& n, std::string_view fused_type, std::size_t expected) {
  n.o.g.opset = 17;
  auto r = planner::fuse_graph(n.o.g, kNormsAndGelu);
  CHECK(count(r.graph, fused_type) == expected);
  const auto a = run(n.o.g, n.o.feeds), b = run(r.graph, n.o.feeds);
  REQUIRE(a.size() == b.size());
  for (std::size_t k = 0; k < a.size(); ++k) {
    const auto va = runtime::testing::as_floats(a[k].bytes.data(), a[k].bytes.size());
    const auto vb = runtime::testing::as_floats(b[k].bytes.data(), b[k].bytes.size());
    REQUIRE(va.size() == vb.size());
    double worst = 0.0;
    for (std::size_t i = 0; i < va.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(va[i] - vb[i])));
    CHECK(worst < 1e-4);
  }
  return r;
}

// LayerNorm as the opset-14 exports write it: ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul, Add.
TensorId layer_norm_14(Net& n, TensorId x, std::vector<std::int64_t> mean_axes = {-1}) {
  const auto m =
      n.mean(x, mean_axes, mean_axes == std::vector<std::int64_t>{-1} ? n.stats(2) : std::vector<std::int64_t>{3, 1, 8});
  const auto d = n.op("Sub", {x, m});
  const auto v = n.mean(n.op("Pow", {d, n.k(2.0)}), {-1}, n.stats(2));
  const auto s = n.op("Sqrt", {n.op("Add", {v, n.k(1e-5)}, n.stats(2))}, n.stats(2));
  return n.op("Add", {n.op("Mul", {n.op("Div", {d, s}), n.w({8})}), n.w({8})});
}

}  // namespace

TEST_CASE("every LayerNorm of the opset-14 exports becomes one LayerNormalization, as many as opset 17 has") {
  for (const char* model : {"bert_small", "gpt2_small", "deit_tiny"}) {
    INFO(model);
    const Graph g14 = load(std::string(model) + ".opset14.train.onnx");
    const auto r = planner::fuse_norms(g14);
    const std::size_t expected = count(load(std::string(model) + ".train.onnx"), "LayerNormalization");
    CHECK(expected > 0);
    CHECK(count(r.graph, "LayerNormalization") == expected);
    CHECK(groups_of(r, "layer_norm") == expected);
    CHECK(count(r.graph, "ReduceMean") == 0);
    CHECK(r.intermediate_bytes_removed > 0);
    for (const auto& op : r.graph.ops)
      if (op.type == "LayerNormalization") {
        CHECK(op.inputs.size() == 3);  // scale and bias taken in
        CHECK(op.attr("fused_ops") != nullptr);
        CHECK(op.attr_float("epsilon", 0.0) > 0.0);
      }
    check_rebuilds(r.graph);
  }
}

TEST_CASE("the RMSNorms of Llama, Qwen2 and T5 (TorchScript and dynamo exports) become RMSNormalization") {
  constexpr std::size_t kLayers = 4;  // bench/transformer_zoo.py: every model has 4 layers
  for (const char* file : {"llama_gqa.train.onnx", "qwen2_gqa.train.onnx", "t5_encoder.train.onnx", "llama_gqa.dynamo.onnx",
                           "qwen2_gqa.dynamo.onnx", "t5_encoder.dynamo.onnx"}) {
    INFO(file);
    const auto r = planner::fuse_graph(load(file), kNormsAndGelu);
    CHECK(count(r.graph, analysis::memplan_ops::kRMSNormalization) == 2 * kLayers + 1);
    CHECK(groups_of(r, "rms_norm") == 2 * kLayers + 1);
    CHECK(count(r.graph, "ReduceMean") == 0);
    for (const auto& op : r.graph.ops)
      if (op.type == analysis::memplan_ops::kRMSNormalization) CHECK(op.inputs.size() == 2);  // the weight taken in
    if (std::string(file).find("train") != std::string::npos) {
      const auto tg = build_training_graph(r.graph, {});
      CHECK(count(tg.graph, analysis::memplan_ops::kRMSNormGrad) == 2 * kLayers + 1);
    }
  }
}

TEST_CASE("the erf GELU of BERT and the tanh GELU of GPT-2, Phi and T5 become ONNX Gelu") {
  const std::map<std::string, std::string> cases{
      {"bert_small.opset14.train.onnx", "Erf"},  {"bert_small.train.onnx", "Erf"}, {"deit_tiny.train.onnx", "Erf"},
      {"gpt2_small.opset14.train.onnx", "Tanh"}, {"phi_small.train.onnx", "Tanh"}, {"t5_encoder.train.onnx", "Tanh"}};
  for (const auto& c : cases) {
    const std::string file = c.first, source = c.second;
    INFO(file);
    const Graph g = load(file);
    const auto r = planner::fuse_gelu(g);
    const std::size_t expected = count(g, source);  // one per MLP (BERT's head has one more)
    CHECK(expected >= 4);
    CHECK(count(r.graph, "Gelu") == expected);
    CHECK(groups_of(r, "gelu") == expected);
    CHECK(count(r.graph, source) == 0);
    const std::string approx = source == "Tanh" ? "tanh" : "none";
    for (const auto& op : r.graph.ops)
      if (op.type == "Gelu") CHECK(op.attr_string("approximate", "") == approx);
    check_rebuilds(r.graph);
  }
}

TEST_CASE("fused LayerNorms compute what the decomposed ones do (attribute and input axes, Pow and Mul squares)") {
  Net n;
  const auto x = n.x();
  n.output(layer_norm_14(n, x));
  // Opset 18 spelling: axes as an input; Mul(d, d); d * Reciprocal(sqrt); scale first, no bias.
  const auto m = n.op("ReduceMean", {x, n.axes({2})}, n.stats(2));
  const auto d = n.op("Sub", {x, m});
  const auto v = n.op("ReduceMean", {n.op("Mul", {d, d}), n.axes({-1})}, n.stats(2));
  const auto r = n.op("Reciprocal", {n.op("Sqrt", {n.op("Add", {n.k(1e-6), v}, n.stats(2))}, n.stats(2))}, n.stats(2));
  n.output(n.op("Mul", {n.w({8}), n.op("Mul", {d, r})}));
  const auto res = fuse_and_compare(n, "LayerNormalization", 2);
  CHECK(count(res.graph, "ReduceMean") == 0);
}

TEST_CASE("fused RMSNorms compute what the decomposed ones do (Llama, dynamo, Div and Pow -0.5 forms)") {
  Net n;
  const auto x = n.x();
  auto mean_sq = [&](TensorId sq) { return n.op("Add", {n.mean(sq, {-1}, n.stats(2)), n.k(1e-6)}, n.stats(2)); };
  auto sqrt = [&](TensorId v) { return n.op("Sqrt", {v}, n.stats(2)); };
  // Llama (TorchScript): 1 / Sqrt as Div(1, s), x * r, a Cast to float32 (a no-op), the weight first.
  const auto r1 = n.op("Div", {n.k(1.0), sqrt(mean_sq(n.op("Pow", {x, n.k(2.0)})))}, n.stats(2));
  const auto c = n.op("Cast", {n.op("Mul", {x, r1})}, {}, {{"to", runtime::testing::int_attr(1)}});
  n.output(n.op("Mul", {n.w({8}), c}));
  // Dynamo: Reciprocal(Sqrt), r * x, weight last.
  const auto r2 = n.op("Reciprocal", {sqrt(mean_sq(n.op("Mul", {x, x})))}, n.stats(2));
  n.output(n.op("Mul", {n.op("Mul", {r2, x}), n.w({8})}));
  // x / Sqrt(...) without a weight, and x * Pow(mean + eps, -0.5).
  n.output(n.op("Div", {x, sqrt(mean_sq(n.op("Pow", {x, n.k(2.0)})))}));
  const auto r4 = n.op("Pow", {mean_sq(n.op("Pow", {x, n.k(2.0)})), n.k(-0.5)}, n.stats(2));
  n.output(n.op("Mul", {x, r4}));
  const auto res = fuse_and_compare(n, analysis::memplan_ops::kRMSNormalization, 4);
  CHECK(count(res.graph, "ReduceMean") == 0);
  CHECK(count(res.graph, "Cast") == 0);
}

TEST_CASE("fused GELUs compute what the decomposed ones do (erf and tanh forms, any operand order)") {
  Net n;
  const auto x = n.x();
  // BERT: (x * (1 + erf(x / 1.41421))) * 0.5
  const auto e1 = n.op("Add", {n.op("Erf", {n.op("Div", {x, n.k(1.4142135381698608)})}), n.k(1.0)});
  n.output(n.op("Mul", {n.op("Mul", {x, e1}), n.k(0.5)}));
  // (0.5 * x) * (1 + erf(0.7071 * x))
  const auto e2 = n.op("Add", {n.k(1.0), n.op("Erf", {n.op("Mul", {n.k(0.70710678), x})})});
  n.output(n.op("Mul", {n.op("Mul", {n.k(0.5), x}), e2}));
  // GPT-2's gelu_new: (x * 0.5) * (1 + tanh(0.79788 * (x + 0.044715 * x^3)))
  const auto cube = n.op("Mul", {n.op("Pow", {x, n.k(3.0)}), n.k(0.044714998453855515)});
  const auto t = n.op("Tanh", {n.op("Mul", {n.op("Add", {x, cube}), n.k(0.7978845834732056)})});
  n.output(n.op("Mul", {n.op("Mul", {x, n.k(0.5)}), n.op("Add", {t, n.k(1.0)})}));
  // torch's F.gelu(approximate="tanh") as the TorchScript exporter writes it: 0.5 * (x * (1 + tanh(c * (x + k * x*(x*x)))))
  const auto cube3 = n.op("Mul", {n.k(0.044714998453855515), n.op("Mul", {x, n.op("Mul", {x, x})})});
  const auto t3 = n.op("Tanh", {n.op("Mul", {n.k(0.7978845834732056), n.op("Add", {x, cube3})})});
  n.output(n.op("Mul", {n.k(0.5), n.op("Mul", {x, n.op("Add", {n.k(1.0), t3})})}));
  const auto res = fuse_and_compare(n, "Gelu", 4);
  CHECK(count(res.graph, "Erf") == 0);
  CHECK(count(res.graph, "Tanh") == 0);
  CHECK(count(res.graph, "Mul") == 0);
  // What PyTorch eager runs as one kernel: the two F.gelu associations (0.5 applied last, x^3 as products), not the
  // Python GELUs that scale x first or take Pow(x, 3).
  const auto eager = planner::fuse_graph(n.o.g, planner::FuseOptions::pytorch_eager(true));
  CHECK(count(eager.graph, "Gelu") == 2);
  CHECK(count(eager.graph, "Erf") == 1);
  CHECK(count(eager.graph, "Tanh") == 1);
}

TEST_CASE("PyTorch-eager fusion keeps what PyTorch runs op by op: Python GELUs and decomposed RMSNorms of real exports") {
  // BERT and DeiT call F.gelu / nn.GELU; GPT-2, Phi and T5 use Hugging Face's NewGELUActivation (Python arithmetic);
  // Llama's and T5's RMSNorms are Python arithmetic (F.rms_norm does not export to opset 17).
  const std::map<std::string, std::pair<std::size_t, std::size_t>> cases{  // file -> (eager Gelus, eager RMSNorms)
      {"bert_small.train.onnx", {5, 0}}, {"deit_tiny.train.onnx", {12, 0}}, {"gpt2_small.train.onnx", {0, 0}},
      {"t5_encoder.train.onnx", {0, 0}}, {"llama_gqa.train.onnx", {0, 0}}};
  for (const auto& c : cases) {
    INFO(c.first);
    const Graph g = load(c.first);
    const auto eager = planner::fuse_graph(g, planner::FuseOptions::pytorch_eager(true));
    CHECK(count(eager.graph, "Gelu") == c.second.first);
    CHECK(count(eager.graph, analysis::memplan_ops::kRMSNormalization) == c.second.second);
    const auto all = planner::fuse_graph(g, kNormsAndGelu);
    CHECK(count(all.graph, "Gelu") >= c.second.first);
    check_rebuilds(eager.graph);
  }
}

TEST_CASE("near misses stay unfused: a mean over another axis, no epsilon, a non-trailing axis, a shared intermediate") {
  Net n;
  const auto x = n.x();
  n.output(layer_norm_14(n, x, {1}));  // the mean over axis 1, the variance over the last axis
  // No epsilon: Sqrt(ReduceMean(x^2)).
  n.output(n.op("Div", {x, n.op("Sqrt", {n.mean(n.op("Pow", {x, n.k(2.0)}), {-1}, n.stats(2))}, n.stats(2))}));
  // The mean square over axis 1 (not the trailing axes).
  const auto v = n.op("Add", {n.mean(n.op("Mul", {x, x}), {1}, {3, 1, 8}), n.k(1e-6)}, {3, 1, 8});
  n.output(n.op("Div", {x, n.op("Sqrt", {v}, {3, 1, 8})}));
  // An intermediate read elsewhere: the rms is also a graph output.
  const auto s =
      n.op("Sqrt", {n.op("Add", {n.mean(n.op("Pow", {x, n.k(2.0)}), {-1}, n.stats(2)), n.k(1e-6)}, n.stats(2))}, n.stats(2));
  n.output(s);
  n.output(n.op("Div", {x, s}));
  // A GELU whose half is 0.4: not a GELU.
  const auto e = n.op("Add", {n.op("Erf", {n.op("Div", {x, n.k(1.4142135)})}), n.k(1.0)});
  n.output(n.op("Mul", {n.op("Mul", {x, e}), n.k(0.4)}));
  const auto res = fuse_and_compare(n, "LayerNormalization", 0);
  CHECK(res.groups.empty());
  CHECK(res.graph.ops.size() == n.o.g.ops.size());
}
