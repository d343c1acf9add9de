// Tests of the CPU FusedAttention kernels: forward and training gradients equal the unfused ONNX composition
// (MatMul, Transpose, Mul, Add/Where, Softmax, Dropout, Expand for GQA), and training saves no s x s tensor.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>

#include "analysis/fused_ops.hpp"
#include "analysis/ops.hpp"
#include "analysis/shapes.hpp"
#include "analysis/tensor_index.hpp"
#include "analysis/training.hpp"
#include "runtime_allocator/executor.hpp"
#include "tests/runtime_allocator/op_graph.hpp"

using namespace memplan;
using namespace memplan::runtime;
using namespace memplan::runtime::testing;
using analysis::DType;
using analysis::TensorData;
using analysis::TensorId;
using Dims = std::vector<std::int64_t>;
using Attrs = std::map<std::string, analysis::Attribute>;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

enum class Bias { none, trained, mask };

struct Spec {
  const char* name;
  bool bshd = false;  // Q, K, V and O all in layout bshd
  std::int64_t B = 2, Hq = 2, Hkv = 2, Sq = 3, Sk = 5, D = 4, Dv = 3;
  bool causal = false;  // the unfused graph adds an explicit -inf triangle instead
  Bias bias = Bias::none;
  double dropout = 0.0;

  Dims q() const { return heads(Hq, Sq, D); }
  Dims k() const { return heads(Hkv, Sk, D); }
  Dims v() const { return heads(Hkv, Sk, Dv); }
  Dims o() const { return heads(Hq, Sq, Dv); }
  Dims bias_dims() const { return bias == Bias::mask ? Dims{B, 1, 1, Sk} : Dims{B, 1, Sq, Sk}; }
  Dims heads(std::int64_t h, std::int64_t s, std::int64_t d) const {
    return analysis::head_shape(bshd ? analysis::HeadLayout::bshd : analysis::HeadLayout::bhsd, B, h, s, d);
  }
  double scale() const { return 1.0 / std::sqrt(static_cast<double>(D)); }
};

// A graph under construction: weights without values (so that they train), constants, inferred temporaries.
struct Builder {
  OpGraph og;
  TensorId weight(const std::string& name, const Dims& dims) {
    return og.tensor(name, DType::f32, dims, analysis::TensorRole::weight);
  }
  TensorId constant(const std::string& name, const TensorData& v) { return og.constant(name, v); }
  TensorId ints(const Dims& v) {
    return og.constant("c" + std::to_string(og.g.tensors.size()), TensorData::from_int64(DType::i64, {static_cast<std::int64_t>(v.size())}, v));
  }
  TensorId temp() {
    analysis::Tensor t;
    t.name = "t" + std::to_string(og.g.tensors.size());
    return og.g.add_tensor(std::move(t));
  }
  TensorId op(const std::string& type, std::vector<TensorId> in, Attrs attrs = {}, const std::string& domain = "") {
    const TensorId out = temp();
    op_to(type, std::move(in), out, std::move(attrs), domain);
    return out;
  }
  void op_to(const std::string& type, std::vector<TensorId> in, TensorId out, Attrs attrs = {}, const std::string& domain = "") {
    analysis::Op o;
    o.name = type + "_" + std::to_string(og.g.ops.size());
    o.type = type;
    o.domain = domain;
    o.inputs = std::move(in);
    o.outputs = {out};
    o.attrs = std::move(attrs);
    og.g.add_op(std::move(o));
  }
  void output(TensorId t) {
    og.g.outputs.push_back(t);
    og.g.tensors[t].is_graph_output = true;
  }
  analysis::Graph shaped() {
    og.g.opset = 17;
    analysis::ShapeOptions so;
    so.fold_max_elements = 0;
    return analysis::infer_shapes(og.g, so);
  }
};

// The weights' values (and the mask's) by name, drawn once per spec.
std::map<std::string, TensorData> values(const Spec& s, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::map<std::string, TensorData> v{{"Q", random_f32(s.q(), rng)}, {"K", random_f32(s.k(), rng)}, {"V", random_f32(s.v(), rng)}};
  if (s.bias == Bias::trained) v["bias"] = random_f32(s.bias_dims(), rng);
  if (s.bias == Bias::mask) {
    std::vector<std::int64_t> m(static_cast<std::size_t>(s.B * s.Sk));
    for (std::size_t k = 0; k < m.size(); ++k) m[k] = k % static_cast<std::size_t>(s.Sk) == 0 || rng() % 3 != 0;  // key 0 always seen
    v["mask"] = TensorData::from_int64(DType::boolean, s.bias_dims(), m);
  }
  return v;
}

analysis::Graph fused_graph(const Spec& s, const std::map<std::string, TensorData>& val) {
  Builder b;
  std::vector<TensorId> in{b.weight("Q", s.q()), b.weight("K", s.k()), b.weight("V", s.v())};
  if (s.bias == Bias::trained) in.push_back(b.weight("bias", s.bias_dims()));
  if (s.bias == Bias::mask) in.push_back(b.constant("mask", val.at("mask")));
  const TensorId o = b.og.tensor("O", DType::f32, s.o(), analysis::TensorRole::activation);
  const std::string layout = s.bshd ? "bshd" : "bhsd";
  Attrs a{{"scale", float_attr(s.scale())}, {"causal", int_attr(s.causal)}, {"dropout_ratio", float_attr(s.dropout)},
          {"seed", int_attr(11)}};
  for (const char* l : {"q_layout", "k_layout", "v_layout", "o_layout"}) a[l] = string_attr(layout);
  b.op_to(std::string(analysis::memplan_ops::kFusedAttention), in, o, a, "memplan");
  b.output(o);
  return b.shaped();
}

// The same attention from ONNX ops; `with_scores` makes the masked scores a second output.
analysis::Graph unfused_graph(const Spec& s, const std::map<std::string, TensorData>& val, bool with_scores) {
  Builder b;
  const Attrs swap12{{"perm", ints_attr({0, 2, 1, 3})}};
  auto to_bhsd = [&](TensorId x) { return s.bshd ? b.op("Transpose", {x}, swap12) : x; };
  auto share_heads = [&](TensorId x, std::int64_t len, std::int64_t dim) {  // [B, Hkv, S, d] -> [B, Hq, S, d]
    if (s.Hq == s.Hkv) return x;
    const TensorId u = b.op("Unsqueeze", {x, b.ints({2})});
    const TensorId e = b.op("Expand", {u, b.ints({s.B, s.Hkv, s.Hq / s.Hkv, len, dim})});
    return b.op("Reshape", {e, b.ints({s.B, s.Hq, len, dim})});
  };
  const TensorId q = to_bhsd(b.weight("Q", s.q()));
  const TensorId k = share_heads(to_bhsd(b.weight("K", s.k())), s.Sk, s.D);
  const TensorId v = share_heads(to_bhsd(b.weight("V", s.v())), s.Sk, s.Dv);
  const TensorId kt = b.op("Transpose", {k}, {{"perm", ints_attr({0, 1, 3, 2})}});
  const TensorId scale = b.constant("scale", TensorData::from_double(DType::f32, {}, {s.scale()}));
  TensorId scores = b.op("Mul", {b.op("MatMul", {q, kt}), scale});
  if (s.causal) {
    std::vector<double> tri(static_cast<std::size_t>(s.Sq * s.Sk));
    for (std::int64_t i = 0; i < s.Sq; ++i)
      for (std::int64_t j = 0; j < s.Sk; ++j) tri[static_cast<std::size_t>(i * s.Sk + j)] = j > i ? -kInf : 0.0;
    scores = b.op("Add", {scores, b.constant("triangle", TensorData::from_double(DType::f32, {s.Sq, s.Sk}, tri))});
  }
  if (s.bias == Bias::trained) scores = b.op("Add", {scores, b.weight("bias", s.bias_dims())});
  if (s.bias == Bias::mask) {
    const TensorId ninf = b.constant("ninf", TensorData::from_double(DType::f32, {}, {-kInf}));
    scores = b.op("Where", {b.constant("mask", val.at("mask")), scores, ninf});
  }
  TensorId p = b.op("Softmax", {scores}, {{"axis", int_attr(-1)}});
  if (s.dropout > 0) {
    const TensorId ratio = b.constant("ratio", TensorData::from_double(DType::f32, {}, {s.dropout}));
    const TensorId training = b.constant("training", TensorData::from_int64(DType::boolean, {}, {1}));
    p = b.op("Dropout", {p, ratio, training}, {{"seed", int_attr(11)}});
  }
  TensorId o = b.op("MatMul", {p, v});
  if (s.bshd) o = b.op("Transpose", {o}, swap12);
  b.output(o);
  if (with_scores) b.output(scores);
  return b.shaped();
}

TensorId by_name(const analysis::Graph& g, const std::string& name) {
  const TensorId t = g.find(name);
  REQUIRE_MESSAGE(t != analysis::kNoTensor, "no tensor " << name);
  return t;
}

void attach(analysis::Graph& g, const std::map<std::string, TensorData>& val) {
  for (const auto& entry : val) g.tensors[by_name(g, entry.first)].data = std::make_shared<TensorData>(entry.second);
}

std::vector<float> read(const Executor& ex, const analysis::Graph& g, TensorId t) {
  return as_floats(ex.address(t), g.tensors[t].element_count() * sizeof(float));
}

// |got - want| <= tol * the largest |want| (gradients are small: an absolute bound would hide a 1% error).
void check_close(const std::vector<float>& got, const std::vector<float>& want, double tol, const std::string& what) {
  REQUIRE(got.size() == want.size());
  double norm = 0;
  for (float w : want) norm = std::max(norm, std::fabs(static_cast<double>(w)));
  std::size_t bad = 0;
  for (std::size_t k = 0; k < got.size(); ++k)
    if (!(std::fabs(static_cast<double>(got[k]) - want[k]) <= tol * norm)) {
      if (bad++ == 0) FAIL_CHECK(what << "[" << k << "]: fused " << got[k] << ", unfused " << want[k] << " (largest " << norm << ")");
    }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << got.size() << " elements differ");
}

const Spec kSpecs[] = {
    {"bhsd, float bias that trains", false, 2, 2, 2, 3, 5, 4, 3, false, Bias::trained, 0.0},
    {"bshd, GQA via Expand", true, 2, 4, 2, 3, 5, 4, 3, false, Bias::none, 0.0},
    {"causal vs an explicit -inf triangle, GQA", false, 1, 4, 2, 4, 6, 4, 4, true, Bias::none, 0.0},
    {"boolean key-padding mask", true, 2, 2, 1, 3, 5, 4, 3, false, Bias::mask, 0.0},
    {"dropout replays the unfused Dropout's mask", false, 2, 4, 2, 4, 5, 4, 3, true, Bias::trained, 0.3},
    {"bshd, GQA, mask and dropout", true, 1, 4, 1, 5, 4, 2, 3, false, Bias::mask, 0.5},
};

}  // namespace

TEST_CASE("FusedAttention forward on the CPU equals the unfused ONNX composition, and LSE is each row's logsumexp") {
  std::uint32_t seed = 100;
  for (const Spec& s : kSpecs) {
    INFO(s.name << " (seed " << seed << ")");
    const auto val = values(s, seed++);
    analysis::Graph fused = fused_graph(s, val), unfused = unfused_graph(s, val, true);
    attach(fused, val);
    attach(unfused, val);
    // The LSE output, as a training graph adds it.
    analysis::Op& fa = fused.ops.at(0);
    const TensorId lse = fused.add_tensor([&] {
      analysis::Tensor t;
      t.name = "LSE";
      t.dtype = DType::f32;
      t.rank_known = true;
      for (auto d : {s.B, s.Hq, s.Sq}) t.dims.push_back(analysis::Dim::of(d));
      return t;
    }());
    fa.outputs.push_back(lse);
    fused.outputs.push_back(lse);
    fused.tensors[lse].is_graph_output = true;
    fused.relink();
    HostBackend b1, b2;
    Executor ef(fused, planner::Plan{}, b1, {.unshared = true});
    Executor eu(unfused, planner::Plan{}, b2, {.unshared = true});
    const auto got = ef.run(std::vector<TensorData>{});
    const auto want = eu.run(std::vector<TensorData>{});
    check_close(as_floats(got[0].bytes.data(), got[0].bytes.size()), as_floats(want[0].bytes.data(), want[0].bytes.size()), 1e-5, "O");
    const auto l = as_floats(got[1].bytes.data(), got[1].bytes.size());
    const auto sc = as_floats(want[1].bytes.data(), want[1].bytes.size());
    std::vector<float> ref(l.size());
    for (std::size_t r = 0; r < ref.size(); ++r) {  // scores are [B, Hq, Sq, Sk]: row r is Sk consecutive values
      double m = -kInf, sum = 0;
      for (std::int64_t j = 0; j < s.Sk; ++j) m = std::max(m, static_cast<double>(sc[r * static_cast<std::size_t>(s.Sk) + static_cast<std::size_t>(j)]));
      for (std::int64_t j = 0; j < s.Sk; ++j) sum += std::exp(sc[r * static_cast<std::size_t>(s.Sk) + static_cast<std::size_t>(j)] - m);
      ref[r] = static_cast<float>(m + std::log(sum));
    }
    check_close(l, ref, 1e-5, "LSE");
  }
}

TEST_CASE("FusedAttention training gradients on the CPU equal the unfused composition's") {
  std::uint32_t seed = 200;
  for (const Spec& s : kSpecs) {
    INFO(s.name << " (seed " << seed << ")");
    const auto val = values(s, seed++);
    analysis::TrainingOptions to;
    to.optimizer = analysis::Optimizer::none;
    auto tf = analysis::build_training_graph(fused_graph(s, val), to);
    auto tu = analysis::build_training_graph(unfused_graph(s, val, false), to);
    attach(tf.graph, val);
    attach(tu.graph, val);
    std::mt19937 rng(seed);
    const std::map<std::string, TensorData> feeds{{"target", random_f32(s.o(), rng)}};
    HostBackend b1, b2;
    Executor ef(tf.graph, planner::Plan{}, b1, {.unshared = true});
    Executor eu(tu.graph, planner::Plan{}, b2, {.unshared = true});
    ef.run(feeds);
    eu.run(feeds);
    check_close(read(ef, tf.graph, tf.loss), read(eu, tu.graph, tu.loss), 1e-5, "loss");
    std::size_t compared = 0;
    for (const char* w : {"Q", "K", "V", "bias"}) {
      if (!val.count(w)) continue;
      auto grad_of = [&](const analysis::TrainingGraph& tg) {
        const TensorId x = by_name(tg.graph, w);
        for (const auto& pg : tg.param_grads)
          if (pg.first == x) return pg.second;
        return analysis::kNoTensor;
      };
      const TensorId gf = grad_of(tf), gu = grad_of(tu);
      REQUIRE_MESSAGE((gf != analysis::kNoTensor && gu != analysis::kNoTensor), "no gradient of " << w);
      check_close(read(ef, tf.graph, gf), read(eu, tu.graph, gu), 1e-4, std::string("d") + w);
      ++compared;
    }
    CHECK(compared >= 3);
    int grads = 0;
    for (const auto& op : tf.graph.ops) grads += op.type == analysis::memplan_ops::kFusedAttentionGrad;
    CHECK(grads == 1);
  }
}

TEST_CASE("a FusedAttention training graph saves Q, K, V, O and LSE only, and no tensor has the [Sq, Sk] shape of the scores") {
  // Q, K, V are activations (input * weight) so that they count among the saved tensors.
  Spec s{"saved set", true, 2, 4, 2, 3, 7, 4, 5, true, Bias::none, 0.25};
  Builder b;
  std::vector<TensorId> qkv;
  for (const auto& [name, dims] : {std::pair{"Q", s.q()}, std::pair{"K", s.k()}, std::pair{"V", s.v()}}) {
    const TensorId x = b.og.input(std::string(name) + "_in", TensorData::from_double(DType::f32, dims, std::vector<double>(static_cast<std::size_t>(analysis::dims_product(dims)), 1.0)));
    qkv.push_back(b.op("Mul", {x, b.weight(std::string("w") + name, dims)}));
  }
  const TensorId o = b.og.tensor("O", DType::f32, s.o(), analysis::TensorRole::activation);
  Attrs a{{"causal", int_attr(1)}, {"dropout_ratio", float_attr(s.dropout)}, {"q_layout", string_attr("bshd")},
          {"k_layout", string_attr("bshd")}, {"v_layout", string_attr("bshd")}, {"o_layout", string_attr("bshd")}};
  b.op_to(std::string(analysis::memplan_ops::kFusedAttention), qkv, o, a, "memplan");
  b.output(o);
  const auto tg = analysis::build_training_graph(b.shaped(), {});
  const analysis::Graph& g = tg.graph;
  for (const auto& t : g.tensors) {
    const auto& d = t.dims;
    const bool scores = d.size() >= 2 && d[d.size() - 2].known() && d.back().known() &&
                        d[d.size() - 2].value == s.Sq && d.back().value == s.Sk;
    CHECK_MESSAGE(!scores, "tensor " << t.name << " has the scores' shape");
  }
  const TensorId lse = by_name(g, "O/lse");
  CHECK(g.tensors[lse].shape() == Dims{s.B, s.Hq, s.Sq});
  std::set<std::string> saved;
  for (TensorId t : tg.saved_for_backward) saved.insert(g.tensors[t].name);
  for (const auto& op : g.ops)
    if (op.type == analysis::memplan_ops::kFusedAttentionGrad) {
      REQUIRE(op.inputs.size() == 6);  // dO, Q, K, V, O, LSE
      CHECK(op.inputs[1] == qkv[0]);
      CHECK(op.inputs[4] == by_name(g, "O"));
      CHECK(op.inputs[5] == lse);
      CHECK(op.outputs.size() == 3);  // dQ, dK, dV; no bias
    }
  const std::set<std::string> want{"Q_in", "K_in", "V_in", g.tensors[qkv[0]].name, g.tensors[qkv[1]].name,
                                   g.tensors[qkv[2]].name, "O", "O/lse", "target"};
  CHECK(saved == want);
}

TEST_CASE("FusedAttention gradients with dropout, GQA, causal and a trained bias match central finite differences") {
  const Spec s{"finite differences", true, 1, 4, 2, 3, 4, 4, 3, true, Bias::trained, 0.4};
  const auto val = values(s, 300);
  analysis::TrainingOptions to;
  to.optimizer = analysis::Optimizer::none;
  auto tg = analysis::build_training_graph(fused_graph(s, val), to);
  attach(tg.graph, val);
  std::mt19937 rng(301);
  const std::map<std::string, TensorData> feeds{{"target", random_f32(s.o(), rng)}};
  auto loss_at = [&](const std::string& w, std::size_t i, double delta) {
    auto v = val;
    float x;
    std::memcpy(&x, v.at(w).bytes.data() + i * 4, 4);
    x = static_cast<float>(x + delta);
    std::memcpy(v.at(w).bytes.data() + i * 4, &x, 4);
    analysis::Graph g = tg.graph;
    attach(g, v);
    HostBackend backend;
    Executor ex(g, planner::Plan{}, backend, {.unshared = true});
    ex.run(feeds);
    return static_cast<double>(read(ex, g, tg.loss)[0]);
  };
  HostBackend backend;
  Executor ex(tg.graph, planner::Plan{}, backend, {.unshared = true});
  ex.run(feeds);
  const double step = 1e-3;
  for (const auto& pg : tg.param_grads) {
    const std::string w = tg.graph.tensors[pg.first].name;
    const auto grad = read(ex, tg.graph, pg.second);
    for (std::size_t i : {std::size_t{0}, grad.size() / 3, grad.size() / 2, grad.size() - 1}) {
      const double fd = (loss_at(w, i, step) - loss_at(w, i, -step)) / (2 * step);
      INFO(w << "[" << i << "]: gradient " << grad[i] << ", finite difference " << fd);
      CHECK(std::fabs(fd - grad[i]) <= 2e-2 * std::max(std::fabs(fd), std::fabs(static_cast<double>(grad[i]))) + 1e-4);
    }
  }
  CHECK(tg.param_grads.size() == 4);
}

TEST_CASE("a row with every key masked gives O = 0, LSE = -inf, and no gradient to its query") {
  Spec s{"fully masked batch", false, 2, 2, 2, 3, 4, 4, 3, false, Bias::mask, 0.0};
  auto val = values(s, 400);
  std::vector<std::int64_t> m{1, 0, 1, 1, 0, 0, 0, 0};  // batch 1 sees no key
  val["mask"] = TensorData::from_int64(DType::boolean, s.bias_dims(), m);
  auto tg = analysis::build_training_graph(fused_graph(s, val), {});
  attach(tg.graph, val);
  std::mt19937 rng(401);
  HostBackend backend;
  Executor ex(tg.graph, planner::Plan{}, backend, {.unshared = true});
  ex.run(std::map<std::string, TensorData>{{"target", random_f32(s.o(), rng)}});
  const auto o = read(ex, tg.graph, by_name(tg.graph, "O"));
  const auto lse = read(ex, tg.graph, by_name(tg.graph, "O/lse"));
  const std::size_t half_o = o.size() / 2, half_l = lse.size() / 2;
  for (std::size_t k = 0; k < o.size(); ++k) CHECK((k < half_o ? o[k] != 0.0f : o[k] == 0.0f));
  for (std::size_t k = 0; k < lse.size(); ++k) CHECK((k < half_l ? std::isfinite(lse[k]) : lse[k] == -std::numeric_limits<float>::infinity()));
  for (const auto& pg : tg.param_grads) {
    const std::string w = tg.graph.tensors[pg.first].name;
    const auto grad = read(ex, tg.graph, pg.second);
    for (std::size_t k = 0; k < grad.size(); ++k) {
      INFO(w << "[" << k << "]");
      CHECK(std::isfinite(grad[k]));
      if (k >= grad.size() / 2) CHECK(grad[k] == 0.0f);  // batch 1: Q, K and V take no gradient
    }
  }
}
