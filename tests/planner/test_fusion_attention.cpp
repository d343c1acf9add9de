// Tests of attention fusion: every sample transformer export fuses one FusedAttention per layer, near misses stay.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>

#include "analysis/fused_ops.hpp"
#include "analysis/import.hpp"
#include "analysis/ops.hpp"
#include "analysis/shapes.hpp"
#include "attention_fixtures.hpp"
#include "planner/fusion.hpp"
#include "planner/fusion_attention.hpp"

using namespace memplan;
using namespace memplan::analysis;
using namespace memplan::planner;
using Shape = std::vector<std::int64_t>;
using attention_fixtures::Builder;
using attention_fixtures::integer;
using attention_fixtures::ints;

namespace {

bool is_fused_attention(const Op& op) { return op.domain == kMemplanDomain && op.type == memplan_ops::kFusedAttention; }

std::size_t count(const Graph& g, std::string_view type) {
  std::size_t n = 0;
  for (const auto& op : g.ops)
    if (op.type == type) ++n;
  return n;
}

std::vector<const Op*> fused(const Graph& g) {
  std::vector<const Op*> v;
  for (const auto& op : g.ops)
    if (is_fused_attention(op)) v.push_back(&op);
  return v;
}

AttentionGeometry geometry(const Graph& g, const Op& op) {
  return attention_geometry(op, g.tensors[op.input(0)].shape(), g.tensors[op.input(1)].shape(), g.tensors[op.input(2)].shape());
}

// The ways a hand-built attention deviates from softmax(Q K^T * 0.25) V.
struct Variant {
  enum class Scale { scores, div_scores, q, k, q_and_k } scale = Scale::scores;
  std::int64_t softmax_axis = -1;
  bool mask_after_softmax = false;
  bool scores_read_twice = false;
  bool causal_constant = false;
  bool transposes = false;  // Q, V from [B,S,H,D] through Transpose(0,2,1,3), O back to [B,S,H,D]
};

constexpr std::int64_t kB = 2, kH = 4, kS = 8, kD = 16;

Graph attention_graph(const Variant& v) {
  Builder b;
  const Shape bhsd{kB, kH, kS, kD}, bshd{kB, kS, kH, kD}, scores{kB, kH, kS, kS};
  TensorId q, k, val;
  if (v.transposes) {
    q = b.op("Transpose", {b.input("q", bshd)}, bhsd, {{"perm", ints({0, 2, 1, 3})}});
    val = b.op("Transpose", {b.input("v", bshd)}, bhsd, {{"perm", ints({0, 2, 1, 3})}});
  } else {
    q = b.input("q", bhsd);
    val = b.input("v", bhsd);
  }
  k = b.input("k", bhsd);
  using S = Variant::Scale;
  const TensorId half = b.constant("half", {1}, {0.5}), quarter = b.constant("quarter", {}, {0.25}),
                 four = b.constant("four", {}, {4.0});
  if (v.scale == S::q) q = b.op("Mul", {q, quarter}, bhsd);
  if (v.scale == S::q_and_k) q = b.op("Mul", {half, q}, bhsd);
  TensorId kt = b.op("Transpose", {k}, {kB, kH, kD, kS}, {{"perm", ints({0, 1, 3, 2})}});
  if (v.scale == S::k) kt = b.op("Mul", {kt, quarter}, {kB, kH, kD, kS});
  if (v.scale == S::q_and_k) kt = b.op("Mul", {kt, half}, {kB, kH, kD, kS});
  TensorId s = b.op("MatMul", {q, kt}, scores);
  if (v.scale == S::scores) s = b.op("Mul", {s, quarter}, scores);
  if (v.scale == S::div_scores) s = b.op("Div", {s, four}, scores);
  if (v.scores_read_twice) b.output(b.op("ReduceMax", {s}, {kB, kH, kS, 1}));
  if (v.causal_constant) {
    std::vector<double> m(kS * kS);
    for (std::int64_t i = 0; i < kS; ++i)
      for (std::int64_t j = 0; j < kS; ++j) m[i * kS + j] = j <= i ? 0.0 : -std::numeric_limits<double>::infinity();
    s = b.op("Add", {s, b.constant("causal_mask", {1, 1, kS, kS}, m)}, scores);
  }
  TensorId p = b.op("Softmax", {s}, scores, {{"axis", integer(v.softmax_axis)}});
  if (v.mask_after_softmax) p = b.op("Mul", {p, b.input("keep", {kB, 1, 1, kS})}, scores);
  TensorId o = b.op("MatMul", {p, val}, bhsd);
  if (v.transposes) o = b.op("Transpose", {o}, bshd, {{"perm", ints({0, 2, 1, 3})}});
  b.output(o);
  b.g.validate();
  return b.g;
}

std::string transformers() { return std::string(MEMPLAN_SOURCE_DIR) + "/samples/transformers/"; }

}  // namespace

TEST_CASE("every sample transformer export fuses one FusedAttention per attention layer and keeps its outputs") {
  // Per model: layers, text (binds seq), heads (0: unchecked; swin's vary by stage), the scale (T5 none), whether
  // its attention dropout is on (timm's attn_drop is 0).
  struct Model {
    const char* name;
    std::size_t layers;
    bool text;
    std::int64_t q_heads, kv_heads;
    bool scaled, dropout;
  };
  const Model models[] = {{"bert_small", 4, true, 4, 4, true, true},   {"gpt2_small", 4, true, 4, 4, true, true},
                          {"llama_gqa", 4, true, 8, 2, true, true},    {"qwen2_gqa", 4, true, 8, 2, true, true},
                          {"phi_small", 4, true, 4, 4, true, true},    {"t5_encoder", 4, true, 4, 4, false, true},
                          {"deit_tiny", 12, false, 3, 3, true, false}, {"swin_tiny", 12, false, 0, 0, true, false}};
  int files = 0;
  for (const auto& m : models)
    for (const char* variant : {".train.onnx", ".opset14.train.onnx", ".sdpa18.train.onnx", ".dynamo.onnx"}) {
      const std::string path = transformers() + m.name + variant;
      if (!std::filesystem::exists(path)) continue;
      ++files;
      CAPTURE(path);
      ShapeOptions so;
      so.dims = {{"batch", 2}};
      if (m.text) so.dims["seq"] = 64;
      const Graph g = infer_shapes(import_model(path), so);
      const FusionResult r = fuse_attention(g);
      std::vector<std::string> why;
      for (OpId o = 0; o < r.graph.ops.size(); ++o)
        if (r.graph.ops[o].type == "Softmax") why.push_back(match_attention(r.graph, o).near_miss);
      CAPTURE(why);
      CHECK(count(g, "Softmax") == m.layers);
      CHECK(count(r.graph, "Softmax") == 0);
      const auto ops = fused(r.graph);
      REQUIRE(ops.size() == m.layers);
      REQUIRE(r.groups.size() == m.layers);
      CHECK_NOTHROW(r.graph.validate());
      CHECK(count(r.graph, "Transpose") < count(g, "Transpose"));
      CHECK(r.intermediate_bytes_removed > 0);
      for (const auto& grp : r.groups) {
        REQUIRE(grp.op < r.graph.ops.size());
        CHECK(grp.kind == "attention");
        CHECK(r.graph.ops[grp.op].attr("fused_ops")->strings == grp.members);
      }
      for (const Op* op : ops) {
        CAPTURE(op->name);
        const auto a = geometry(r.graph, *op);
        if (m.q_heads > 0) {
          CHECK(a.batch == 2);
          CHECK(a.q_heads == m.q_heads);
          CHECK(a.kv_heads == m.kv_heads);  // GQA keeps K and V un-expanded
        }
        CHECK(a.scale == doctest::Approx(m.scaled ? 1.0 / std::sqrt(static_cast<double>(a.head_dim)) : 1.0).epsilon(1e-5));
        if (m.text) CHECK(a.q_len == 64);
        // The fused op writes the attention's own result: same name, shape and dtype as in the source.
        const Tensor& out = r.graph.tensors[op->output(0)];
        const TensorId src = g.find(out.name);
        REQUIRE(src != kNoTensor);
        CHECK(g.tensors[src].shape() == out.shape());
        // The SDPA trace keeps Dropout without its training_mode input: an identity by ONNX's rules.
        const std::string var = variant;
        const bool training = var.find("train") != std::string::npos && var.find("sdpa") == std::string::npos;
        CHECK((a.dropout_ratio > 0.0) == (m.dropout && training));
      }
      REQUIRE(r.graph.outputs.size() == g.outputs.size());
      for (std::size_t i = 0; i < g.outputs.size(); ++i) {
        CHECK(r.graph.tensors[r.graph.outputs[i]].name == g.tensors[g.outputs[i]].name);
        CHECK(r.graph.tensors[r.graph.outputs[i]].shape() == g.tensors[g.outputs[i]].shape());
      }
    }
  CHECK(files == 23);
}

TEST_CASE("head layouts: Transposes of Q, V and O are read and written through strides (bshd)") {
  Variant v;
  v.transposes = true;
  const Graph g = attention_graph(v);
  const FusionResult r = fuse_attention(g);
  REQUIRE(fused(r.graph).size() == 1);
  const Op& f = *fused(r.graph).front();
  CHECK(f.attr_string("q_layout", "") == "bshd");
  CHECK(f.attr_string("k_layout", "") == "bhsd");
  CHECK(f.attr_string("v_layout", "") == "bshd");
  CHECK(f.attr_string("o_layout", "") == "bshd");
  CHECK(r.graph.ops.size() == 1);  // every Transpose absorbed
  CHECK(r.graph.tensors[f.input(0)].name == "q");
  CHECK(r.graph.tensors[f.output(0)].is_graph_output);
  CHECK(r.graph.tensors[f.output(0)].shape() == Shape{kB, kS, kH, kD});
  CHECK_NOTHROW(r.graph.validate());
}

TEST_CASE("scale on the scores, divided, on Q, on K or on both gives the same scale attribute") {
  using S = Variant::Scale;
  for (S s : {S::scores, S::div_scores, S::q, S::k, S::q_and_k}) {
    CAPTURE(static_cast<int>(s));
    Variant v;
    v.scale = s;
    const FusionResult r = fuse_attention(attention_graph(v));
    REQUIRE(fused(r.graph).size() == 1);
    CHECK(fused(r.graph).front()->attr_float("scale", 0.0) == doctest::Approx(0.25));
    CHECK(r.graph.ops.size() == 1);
    CHECK(r.groups.front().members.size() >= 4);
  }
}

TEST_CASE("only Q and K^T each scaled is SDPA's exported form, attention scaled on the scores or Q alone keeps its ops there") {
  using S = Variant::Scale;
  const std::map<S, bool> sdpa_form{{S::scores, false}, {S::div_scores, false}, {S::q, false}, {S::k, false}, {S::q_and_k, true}};
  for (const auto& [scale, expected] : sdpa_form) {
    CAPTURE(static_cast<int>(scale));
    const Graph g = attention_graph(Variant{scale});
    const auto softmax = static_cast<OpId>(
        std::find_if(g.ops.begin(), g.ops.end(), [](const Op& o) { return o.type == "Softmax"; }) - g.ops.begin());
    const auto m = match_attention(g, softmax).match;
    REQUIRE(m.has_value());
    CHECK(m->sdpa_form == expected);
    CHECK(fused(fuse_attention(g, true).graph).size() == (expected ? 1u : 0u));
    CHECK(fused(fuse_attention(g, false).graph).size() == 1);
  }
}

TEST_CASE("a constant causal mask becomes causal=1 and no bias input") {
  Variant v;
  v.causal_constant = true;
  const FusionResult r = fuse_attention(attention_graph(v));
  REQUIRE(fused(r.graph).size() == 1);
  const Op& f = *fused(r.graph).front();
  CHECK(f.attr_int("causal", 0) == 1);
  CHECK(f.inputs.size() == 3);
  CHECK(r.graph.find("causal_mask") == kNoTensor);
}

TEST_CASE("near misses stay unfused: softmax over axis 2, a mask after the softmax, scores read twice") {
  Variant axis, after, twice;
  axis.softmax_axis = 2;
  after.mask_after_softmax = true;
  twice.scores_read_twice = true;
  for (const Variant& v : {axis, after, twice}) {
    const Graph g = attention_graph(v);
    const FusionResult r = fuse_attention(g);
    CHECK(fused(r.graph).empty());
    CHECK(r.groups.empty());
    CHECK(r.graph.ops.size() == g.ops.size());
    CHECK(count(r.graph, "Softmax") == 1);
  }
  OpId sm = 0;
  const Graph g = attention_graph(axis);
  while (g.ops[sm].type != "Softmax") ++sm;
  CHECK(match_attention(g, sm).near_miss.find("axis 2") != std::string::npos);
}

TEST_CASE("the dropout seed is the op's seed attribute, else a hash of its name") {
  Op d;
  d.name = "layer.0/attn/Dropout";
  const auto h = attention_dropout_seed(d);
  CHECK(h >= 0);
  CHECK(h == attention_dropout_seed(d));
  d.name = "layer.1/attn/Dropout";
  CHECK(attention_dropout_seed(d) != h);
  d.attrs["seed"] = integer(42);
  CHECK(attention_dropout_seed(d) == 42);
}

TEST_CASE("ONNX Attention with 4-D operands infers its shape and becomes FusedAttention, 3-D stays") {
  Builder b;
  b.g.opset = 23;
  const Shape q{kB, 8, kS, kD}, kv{kB, 2, kS, kD};
  const TensorId mask = b.tensor("mask", {kB, 1, 1, kS}, DType::boolean, TensorRole::input);
  b.g.inputs.push_back(mask);
  const TensorId y = b.tensor("y", {}, DType::undefined);
  b.g.tensors[y].rank_known = false;
  Op att;
  att.name = "attn";
  att.type = "Attention";
  att.inputs = {b.input("q", q), b.input("k", kv), b.input("v", kv), mask};
  att.outputs = {y};
  att.attrs["is_causal"] = integer(1);
  b.g.add_op(att);
  b.output(y);
  const Graph g = infer_shapes(b.g, {});
  CHECK(g.tensors[g.find("y")].shape() == q);
  CHECK(op_registry().find("", "Attention")->grad_kind == GradKind::none);
  const FusionResult r = fuse_attention(g);
  REQUIRE(fused(r.graph).size() == 1);
  const Op& f = *fused(r.graph).front();
  CHECK(f.attr_int("causal", 0) == 1);
  CHECK(f.attr_float("scale", 0.0) == doctest::Approx(0.25));  // 1 / sqrt(16), ONNX's default
  CHECK(r.graph.tensors[f.input(3)].name == "mask");
  CHECK(geometry(r.graph, f).kv_heads == 2);
  CHECK(r.graph.tensors[f.output(0)].name == "y");

  Builder three;
  three.g.opset = 23;
  Op a3;
  a3.name = "attn3";
  a3.type = "Attention";
  a3.inputs = {three.input("q", {kB, kS, 8 * kD}), three.input("k", {kB, kS, 2 * kD}), three.input("v", {kB, kS, 2 * kD})};
  a3.outputs = {three.tensor("y", {kB, kS, 8 * kD})};
  a3.attrs["q_num_heads"] = integer(8);
  a3.attrs["kv_num_heads"] = integer(2);
  three.g.add_op(a3);
  three.output(three.g.find("y"));
  const Graph g3 = infer_shapes(three.g, {});
  CHECK(g3.tensors[g3.find("y")].shape() == Shape{kB, kS, 8 * kD});
  CHECK(fused(fuse_attention(g3).graph).empty());
}
