// Tests of decompose_math_attention and pytorch_sdpa_backend: the CUDA SDPA kernel PyTorch picks, the math
// backend's ops keeping the FusedAttention's values, and the eager peak growing by what the math backend saves.
#include <doctest/doctest.h>

#include <random>

#include "analysis/training.hpp"
#include "attention_fixtures.hpp"
#include "planner/pytorch/eager_model.hpp"
#include "planner/fusion.hpp"
#include "planner/training_plan.hpp"

using namespace memplan;
using namespace memplan::analysis;
using namespace memplan::planner;
using namespace attention_fixtures;

namespace {

struct Case {
  std::int64_t batch = 2, q_heads = 4, kv_heads = 2, len = 6, dim = 8;
  DType dtype = DType::f32;
  bool causal = true, mask = false;
  double dropout = 0.0;
};

// Q, K, V (inputs, each times a weight) -> FusedAttention(Q, K, V [, mask]) -> Y [B, Hq, S, D] -> MatMul with a
// weight (a loss input).
Graph attention(const Case& c, std::map<std::string, Attribute> extra = {}) {
  Builder b;
  const TensorId q = b.input("q", {c.batch, c.q_heads, c.len, c.dim});
  const TensorId k = b.input("k", {c.batch, c.kv_heads, c.len, c.dim});
  const TensorId v = b.input("v", {c.batch, c.kv_heads, c.len, c.dim});
  std::vector<TensorId> ins;
  for (TensorId t : {q, k, v}) {  // scaled by a trained weight: the backward runs through the attention
    b.g.tensors[t].dtype = c.dtype;
    const TensorId w = b.tensor("w_" + b.g.tensors[t].name, {c.dim}, c.dtype, TensorRole::weight);
    ins.push_back(b.op("Mul", {t, w}, b.g.tensors[t].shape(), {}, c.dtype));
  }
  if (c.mask) {
    const TensorId m = b.tensor("mask", {c.batch, 1, c.len, c.len}, DType::boolean, TensorRole::input);
    b.g.inputs.push_back(m);
    ins.push_back(m);
  }
  std::map<std::string, Attribute> attrs = {{"scale", autodiff::attr_f(0.35)}, {"causal", integer(c.causal ? 1 : 0)}};
  if (c.dropout > 0) {
    attrs["dropout_ratio"] = autodiff::attr_f(c.dropout);
    attrs["seed"] = integer(7);
  }
  for (auto& [name, a] : extra) attrs[name] = a;
  const TensorId y = b.op(std::string(memplan_ops::kFusedAttention), ins, {c.batch, c.q_heads, c.len, c.dim}, attrs, c.dtype);
  b.g.ops.back().domain = std::string(kMemplanDomain);
  const TensorId w = b.tensor("w", {c.dim, c.dim}, c.dtype, TensorRole::weight);
  b.output(b.op("MatMul", {y, w}, {c.batch, c.q_heads, c.len, c.dim}, {}, c.dtype));
  return b.g;
}

std::size_t count(const Graph& g, std::string_view type) {
  std::size_t n = 0;
  for (const auto& op : g.ops) n += op.type == type;
  return n;
}

const Op& fused_op(const Graph& g) {
  for (const auto& op : g.ops)
    if (op.type == memplan_ops::kFusedAttention) return op;
  FAIL("no FusedAttention");
  return g.ops[0];
}

std::uint64_t eager_peak_of(const Graph& forward) {
  TrainingOptions to;
  to.optimizer = Optimizer::sgd;
  const TrainingGraph tg = build_training_graph(forward, to);
  TrainingPlanOptions o;
  o.strategy = "none";
  const TrainingPlanResult r = plan_training(tg, o);
  return eager_peak(r.graph, r.plan).peak_bytes;
}

}  // namespace

TEST_CASE("pytorch_sdpa_backend: fp32 grouped-query heads run the math backend, fp32 equal heads the efficient kernel") {
  Case c;
  CHECK(pytorch_sdpa_backend(attention(c), fused_op(attention(c))) == SdpaBackend::math);
  c.kv_heads = c.q_heads;
  CHECK(pytorch_sdpa_backend(attention(c), fused_op(attention(c))) == SdpaBackend::efficient);
  c.mask = true;  // the efficient kernel takes masks
  CHECK(pytorch_sdpa_backend(attention(c), fused_op(attention(c))) == SdpaBackend::efficient);
  c.mask = false;
  c.dim = 6;  // not a multiple of 16 bytes
  CHECK(pytorch_sdpa_backend(attention(c), fused_op(attention(c))) == SdpaBackend::math);
  Case h;
  h.dtype = DType::bf16;  // flash: 16-bit, no mask, grouped-query heads allowed
  CHECK(pytorch_sdpa_backend(attention(h), fused_op(attention(h))) == SdpaBackend::flash);
  h.mask = true;  // a mask leaves flash; grouped-query heads leave the efficient kernel
  CHECK(pytorch_sdpa_backend(attention(h), fused_op(attention(h))) == SdpaBackend::math);
}

TEST_CASE("pytorch_sdpa_backend reads PyTorch eager's own call (pytorch_kv_heads, pytorch_mask) over the traced graph's") {
  Case c;
  c.kv_heads = c.q_heads;  // the trace repeated the kv heads and built a mask
  c.mask = true;
  c.causal = false;
  const Graph traced = attention(c);
  CHECK(pytorch_sdpa_backend(traced, fused_op(traced)) == SdpaBackend::efficient);
  const Graph eager = attention(c, {{"pytorch_kv_heads", integer(2)}, {"pytorch_mask", integer(0)}});
  CHECK(pytorch_sdpa_backend(eager, fused_op(eager)) == SdpaBackend::math);
  const Graph same = attention(c, {{"pytorch_kv_heads", integer(4)}, {"pytorch_mask", integer(1)}});
  CHECK(pytorch_sdpa_backend(same, fused_op(same)) == SdpaBackend::efficient);
}

TEST_CASE("decompose_math_attention writes the math backend's ops and keeps the attention's values") {
  for (const bool causal : {true, false})
    for (const bool mask : {false, true})
      for (const std::int64_t kv : {4, 2, 1}) {
        Case c;
        c.causal = causal;
        c.mask = mask;
        c.kv_heads = kv;
        CAPTURE(causal);
        CAPTURE(mask);
        CAPTURE(kv);
        const Graph g = attention(c);
        const Graph d = decompose_math_attention(g, true).graph;
        CHECK_NOTHROW(d.validate());
        CHECK(count(d, memplan_ops::kFusedAttention) == 0);
        CHECK(count(d, "Softmax") == 1);
        CHECK(count(d, "MatMul") == 3);  // scores, probabilities x V, and the graph's own
        CHECK(count(d, "Expand") == (kv == 4 ? 0u : 2u));  // K and V repeated per query head
        CHECK(count(d, "Trilu") == (causal ? 1u : 0u));
        CHECK(d.tensors[d.outputs[0]].shape() == g.tensors[g.outputs[0]].shape());
        std::mt19937 rng(3);
        std::uniform_real_distribution<double> u(-1.0, 1.0);
        std::map<std::string, Values> in;
        for (TensorId t : g.inputs) {
          const auto& x = g.tensors[t];
          Values v(static_cast<std::size_t>(numel(x.shape())));
          for (std::size_t i = 0; i < v.size(); ++i)
            v[i] = x.dtype == DType::boolean ? double(i % static_cast<std::size_t>(c.len) == 0 || rng() % 3 != 0) : u(rng);
          in[x.name] = v;
        }
        for (const char* w : {"w", "w_q", "w_k", "w_v"}) {
          in[w] = Values(static_cast<std::size_t>(std::string(w) == "w" ? c.dim * c.dim : c.dim));
          for (auto& x : in[w]) x = u(rng);
        }
        const auto want = run(g, in).at(g.tensors[g.outputs[0]].name);
        const auto got = run(d, in).at(d.tensors[d.outputs[0]].name);
        REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == doctest::Approx(want[i]).epsilon(1e-6));  // sqrt(scale) is an fp32 constant
      }
}

TEST_CASE("decompose_math_attention leaves what PyTorch runs as one kernel, every=true writes out each one") {
  Case c;
  c.kv_heads = c.q_heads;
  const Graph g = attention(c);
  CHECK(count(decompose_math_attention(g, false).graph, memplan_ops::kFusedAttention) == 1);
  CHECK(count(decompose_math_attention(g, true).graph, memplan_ops::kFusedAttention) == 0);
  // the PyTorch-eager fusion options write out the math-backend ones and keep the others
  Case gqa;
  CHECK(count(fuse_graph(attention(gqa), FuseOptions::pytorch_eager(true)).graph, memplan_ops::kFusedAttention) == 0);
  CHECK(count(fuse_graph(g, FuseOptions::pytorch_eager(true)).graph, memplan_ops::kFusedAttention) == 1);
  CHECK(count(fuse_graph(g, FuseOptions::pytorch_eager(false)).graph, memplan_ops::kFusedAttention) == 0);
  CHECK(count(fuse_graph(attention(gqa)).graph, memplan_ops::kFusedAttention) == 1);  // memplan's own plan keeps it
}

TEST_CASE("decompose_attention_above writes out attention whose head dim a runtime's kernels do not take, keeps the rest") {
  Case c;  // head dim 8
  const Graph g = attention(c);
  CHECK(count(decompose_attention_above(g, 8).graph, memplan_ops::kFusedAttention) == 1);
  const Graph d = decompose_attention_above(g, 7).graph;
  CHECK_NOTHROW(d.validate());
  CHECK(count(d, memplan_ops::kFusedAttention) == 0);
  CHECK(count(d, "Softmax") == 1);
  // through fuse_graph: the limit applies to the attention the fusion finds; 0 is none
  FuseOptions limited;
  limited.attention_max_head_dim = 4;
  CHECK(count(fuse_graph(g, limited).graph, memplan_ops::kFusedAttention) == 0);
  CHECK(count(fuse_graph(g).graph, memplan_ops::kFusedAttention) == 1);
  limited.attention_max_head_dim = 128;
  CHECK(count(fuse_graph(g, limited).graph, memplan_ops::kFusedAttention) == 1);
}

TEST_CASE("the eager peak of the math backend holds its probabilities, dropout output and mask for the backward") {
  Case c;
  c.batch = 4;
  c.len = 64;
  c.dim = 16;
  c.dropout = 0.1;
  const Graph g = attention(c);
  const std::uint64_t fused = eager_peak_of(g);
  const std::uint64_t math = eager_peak_of(decompose_math_attention(g, false).graph);
  const std::uint64_t scores = static_cast<std::uint64_t>(c.batch * c.q_heads * c.len * c.len);
  // saved between forward and backward: fp32 probabilities and dropout output, a one-byte mask
  CHECK(math >= fused + scores * (4 + 4 + 1));
}
