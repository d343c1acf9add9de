// Attention fusion keeps values: hand-built attention forms give the same output before and after fuse_attention.
#include <doctest/doctest.h>

#include <random>

#include "attention_fixtures.hpp"
#include "planner/fusion.hpp"

using namespace memplan;
using namespace memplan::analysis;
using namespace memplan::planner;
using namespace attention_fixtures;

namespace {

constexpr std::int64_t kB = 2, kH = 4, kS = 5, kD = 3;

// Runs `g` before and after fusion on random inputs (boolean inputs: key 0 always attended) and compares
// every graph output; returns the number of FusedAttention ops made.
std::size_t check_same_values(const Graph& g) {
  g.validate();
  const FusionResult r = fuse_attention(g);
  CHECK_NOTHROW(r.graph.validate());
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-1.5, 1.5);
  std::map<std::string, Values> in;
  for (TensorId t : g.inputs) {
    const auto& x = g.tensors[t];
    Values v(static_cast<std::size_t>(numel(x.shape())));
    for (std::size_t i = 0; i < v.size(); ++i)
      v[i] = x.dtype == DType::boolean ? ((i % static_cast<std::size_t>(x.shape().back())) == 0 || rng() % 3 != 0) : u(rng);
    in[x.name] = v;
  }
  const auto before = run(g, in), after = run(r.graph, in);
  for (TensorId t : g.outputs) {
    const auto& name = g.tensors[t].name;
    CAPTURE(name);
    REQUIRE(after.count(name));
    const Values &a = before.at(name), &b = after.at(name);
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) REQUIRE(b[i] == doctest::Approx(a[i]).epsilon(1e-9));
  }
  std::size_t n = 0;
  for (const auto& op : r.graph.ops) n += op.type == memplan_ops::kFusedAttention;
  return n;
}

// [B,Hkv,S,D] repeated to [B,Hkv*n,S,D] as llama's repeat_kv exports it.
TensorId repeat_kv(Builder& b, TensorId x, std::int64_t n) {
  const Shape s = b.g.tensors[x].shape();
  const TensorId u =
      b.op("Unsqueeze", {x, b.constant("axes" + std::to_string(x), {1}, {2}, DType::i64)}, {s[0], s[1], 1, s[2], s[3]});
  const Shape to{s[0], s[1], n, s[2], s[3]};
  const TensorId e = b.op(
      "Expand",
      {u, b.constant("to" + std::to_string(x), {5}, {1.0 * s[0], 1.0 * s[1], 1.0 * n, 1.0 * s[2], 1.0 * s[3]}, DType::i64)}, to);
  const Shape r{s[0], s[1] * n, s[2], s[3]};
  return b.op("Reshape",
              {e, b.constant("shape" + std::to_string(x), {4}, {1.0 * r[0], 1.0 * r[1], 1.0 * r[2], 1.0 * r[3]}, DType::i64)}, r);
}

}  // namespace

TEST_CASE("grouped-query attention through repeat_kv and bshd transposes keeps its values") {
  Builder b;
  const std::int64_t hkv = 2;
  const TensorId q = b.op("Transpose", {b.input("q", {kB, kS, kH, kD})}, {kB, kH, kS, kD}, {{"perm", ints({0, 2, 1, 3})}});
  const TensorId k = repeat_kv(b, b.input("k", {kB, hkv, kS, kD}), kH / hkv);
  const TensorId v0 = b.op("Transpose", {b.input("v", {kB, kS, hkv, kD})}, {kB, hkv, kS, kD}, {{"perm", ints({0, 2, 1, 3})}});
  const TensorId v = repeat_kv(b, v0, kH / hkv);
  const TensorId kt = b.op("Transpose", {k}, {kB, kH, kD, kS}, {{"perm", ints({0, 1, 3, 2})}});
  const Shape sc{kB, kH, kS, kS};
  const TensorId s = b.op("Mul", {b.op("MatMul", {q, kt}, sc), b.constant("c", {}, {0.4})}, sc);
  const TensorId o = b.op("MatMul", {b.op("Softmax", {s}, sc, {{"axis", integer(-1)}}), v}, {kB, kH, kS, kD});
  b.output(b.op("Transpose", {o}, {kB, kS, kH, kD}, {{"perm", ints({0, 2, 1, 3})}}));
  CHECK(check_same_values(b.g) == 1);
  const FusionResult r = fuse_attention(b.g);
  CHECK(r.graph.ops.size() == 1);  // the expansions and every transpose absorbed
}

TEST_CASE("swin's shifted-window bias between reshapes of the scores keeps its values") {
  Builder b;
  const std::int64_t windows = 2, bw = kB * windows;
  const Shape sc{bw, kH, kS, kS}, five{kB, windows, kH, kS, kS};
  const TensorId q = b.input("q", {bw, kH, kS, kD}), k = b.input("k", {bw, kH, kS, kD}), v = b.input("v", {bw, kH, kS, kD});
  const TensorId kt = b.op("Transpose", {k}, {bw, kH, kD, kS}, {{"perm", ints({0, 1, 3, 2})}});
  const TensorId s = b.op("MatMul", {b.op("Mul", {q, b.constant("c", {}, {0.5})}, {bw, kH, kS, kD}), kt}, sc);
  const TensorId biased = b.op("Add", {s, b.input("rel", {1, kH, kS, kS})}, sc);
  std::vector<double> mask(static_cast<std::size_t>(windows * kS * kS));
  for (std::size_t i = 0; i < mask.size(); ++i) mask[i] = i % 3 == 1 ? -100.0 : 0.0;
  const TensorId r5 =
      b.op("Reshape", {biased, b.constant("s5", {5}, {1.0 * kB, 1.0 * windows, 1.0 * kH, 1.0 * kS, 1.0 * kS}, DType::i64)}, five);
  const TensorId m5 = b.op("Add", {r5, b.constant("mask", {1, windows, 1, kS, kS}, mask)}, five);
  const TensorId r4 = b.op("Reshape", {m5, b.constant("s4", {4}, {1.0 * bw, 1.0 * kH, 1.0 * kS, 1.0 * kS}, DType::i64)}, sc);
  b.output(b.op("MatMul", {b.op("Softmax", {r4}, sc, {{"axis", integer(-1)}}), v}, {bw, kH, kS, kD}));
  CHECK(check_same_values(b.g) == 1);
}

TEST_CASE("two added biases, a boolean Where mask, and a K^T given as is keep their values") {
  const Shape sc{kB, kH, kS, kS};
  for (int form = 0; form < 3; ++form) {
    CAPTURE(form);
    Builder b;
    const TensorId q = b.input("q", {kB, kH, kS, kD}), v = b.input("v", {kB, kH, kS, kD});
    TensorId kt;
    if (form == 2)
      kt = b.input("kt", {kB, kH, kD, kS});
    else
      kt = b.op("Transpose", {b.input("k", {kB, kH, kS, kD})}, {kB, kH, kD, kS}, {{"perm", ints({0, 1, 3, 2})}});
    TensorId s = b.op("MatMul", {q, b.op("Div", {kt, b.constant("c", {1}, {2.0})}, {kB, kH, kD, kS})}, sc);
    if (form == 0) {
      s = b.op("Add", {b.input("position", {1, kH, kS, kS}), s}, sc);
      s = b.op("Add", {s, b.input("padding", {kB, 1, 1, kS})}, sc);
    } else if (form == 1) {
      const TensorId keep = b.tensor("keep", {kB, 1, 1, kS}, DType::boolean, TensorRole::input);
      b.g.inputs.push_back(keep);
      s = b.op("Where", {keep, s, b.constant("neg", {}, {-1e30})}, sc);
    }
    const TensorId p = b.op("Cast", {b.op("Softmax", {s}, sc, {{"axis", integer(3)}})}, sc, {{"to", integer(1)}});
    b.output(b.op("MatMul", {p, v}, {kB, kH, kS, kD}));
    CHECK(check_same_values(b.g) == 1);
  }
}
