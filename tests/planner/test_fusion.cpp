// Tests of elementwise fusion: grouping rules, the expression text form, and value equivalence.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <memory>
#include <random>

#include "analysis/liveness.hpp"
#include "planner/fusion.hpp"

using namespace memplan;
using namespace memplan::analysis;
using namespace memplan::planner;

namespace {

struct Builder {
  Graph g;
  std::vector<std::int64_t> shape{4, 8};

  TensorId tensor(const std::string& name, TensorRole role = TensorRole::activation, std::vector<std::int64_t> dims = {}) {
    Tensor t;
    t.name = name;
    t.dtype = DType::f32;
    t.rank_known = true;
    for (auto d : dims.empty() ? shape : dims) t.dims.push_back(Dim::of(d));
    t.role = role;
    return g.add_tensor(std::move(t));
  }
  TensorId scalar(const std::string& name, double v) {
    TensorId t = tensor(name, TensorRole::weight, {1});
    g.tensors[t].data = std::make_shared<TensorData>(TensorData::from_double(DType::f32, {1}, {v}));
    return t;
  }
  TensorId input(const std::string& name) {
    TensorId t = tensor(name, TensorRole::input);
    g.inputs.push_back(t);
    return t;
  }
  TensorId op(const std::string& type, std::vector<TensorId> ins, const std::string& out) {
    TensorId o = tensor(out);
    Op x;
    x.name = type + "_" + out;
    x.type = type;
    x.inputs = std::move(ins);
    x.outputs = {o};
    g.add_op(std::move(x));
    return o;
  }
  void output(TensorId t) {
    g.outputs.push_back(t);
    g.tensors[t].is_graph_output = true;
  }
};

// Interprets a graph elementwise on one value per graph input: fusible ops through their expression,
// any other op as (sum of its inputs + 1), so that structure, not op semantics, is what is compared.
std::map<std::string, float> interpret(const Graph& g, const std::map<std::string, float>& in) {
  std::vector<float> val(g.tensors.size(), 0.0f);
  for (TensorId t = 0; t < g.tensors.size(); ++t) {
    if (g.tensors[t].data) val[t] = static_cast<float>(g.tensors[t].data->as_double()[0]);
    if (auto it = in.find(g.tensors[t].name); it != in.end()) val[t] = it->second;
  }
  for (OpId o : topological_order(g)) {
    const Op& op = g.ops[o];
    std::vector<float> operands;
    for (TensorId t : op.inputs) operands.push_back(val[t]);
    if (auto e = elementwise_expr(g, o)) {
      std::vector<float> scratch(e->nodes.size());
      val[op.outputs[0]] = e->evaluate(operands.data(), scratch.data());
    } else {
      float s = 1.0f;
      for (float x : operands) s += x;
      val[op.outputs[0]] = s;
    }
  }
  std::map<std::string, float> out;
  for (TensorId t : g.outputs) out[g.tensors[t].name] = val[t];
  return out;
}

}  // namespace

TEST_CASE("a chain of elementwise ops becomes one fused op whose intermediates are gone") {
  Builder b;
  TensorId x = b.input("x");
  TensorId bias = b.tensor("bias", TensorRole::weight, {8});
  b.g.inputs.push_back(bias);
  TensorId m = b.op("Mul", {x, b.scalar("two", 2.0)}, "m");
  TensorId a = b.op("Add", {m, bias}, "a");
  TensorId r = b.op("Relu", {a}, "r");
  TensorId s = b.op("Sigmoid", {r}, "s");
  b.output(s);
  FusionResult res = fuse_elementwise(b.g);
  REQUIRE(res.groups.size() == 1);
  CHECK(res.groups[0].members.size() == 4);
  CHECK(res.intermediate_bytes_removed == 3 * 4 * 8 * 4);
  const Graph& f = res.graph;
  f.validate();
  CHECK(f.ops.size() == 1);
  CHECK(f.ops[0].type == kFusedOpType);
  CHECK(f.find("m") == kNoTensor);
  CHECK(f.find("r") == kNoTensor);
  CHECK(f.ops[0].inputs.size() == 2);  // x and bias; the scalar 2 is inlined
  const auto before = analyze_liveness(b.g, topological_order(b.g));
  const auto after = analyze_liveness(f, topological_order(f));
  CHECK(after.lower_bound_bytes < before.lower_bound_bytes);
  auto e = FusedExpr::parse(f.ops[0].attr_string("expr", ""));
  CHECK(e.op_count() == 4);
  const float in[2] = {-0.3f, 1.0f};  // x, bias element
  std::vector<float> scratch(e.nodes.size());
  CHECK(e.evaluate(in, scratch.data()) == doctest::Approx(1.0f / (1.0f + std::exp(-0.4f))));
}

TEST_CASE("a tensor read outside the group or returned by the graph keeps its buffer") {
  Builder b;
  TensorId x = b.input("x"), y = b.input("y");
  TensorId a = b.op("Add", {x, y}, "a");
  TensorId r = b.op("Relu", {a}, "r");
  TensorId mm = b.op("MatMul", {r, r}, "mm");
  TensorId s = b.op("Sigmoid", {r}, "s");
  TensorId t = b.op("Tanh", {s}, "t");
  TensorId u = b.op("Exp", {t}, "u");
  b.output(mm);
  b.output(t);
  b.output(u);
  FusionResult res = fuse_elementwise(b.g);
  res.graph.validate();
  // {a, r}: r is read by MatMul, so it is the group's result. Sigmoid/Tanh: t is a graph output, so
  // Exp cannot absorb it; {s, t} fuse with t as result and Exp stays alone.
  REQUIRE(res.groups.size() == 2);
  CHECK(res.graph.find("r") != kNoTensor);
  CHECK(res.graph.find("t") != kNoTensor);
  CHECK(res.graph.find("a") == kNoTensor);
  CHECK(res.graph.find("s") == kNoTensor);
  CHECK(res.graph.ops.size() == 4);
}

TEST_CASE("only forward ops fuse: backward and optimizer chains of a training step are left alone") {
  for (Phase phase : {Phase::backward, Phase::optimizer}) {
    Builder b;
    TensorId x = b.input("x");
    TensorId f = b.op("Tanh", {b.op("Relu", {x}, "r")}, "f");  // forward: fuses
    TensorId m = b.op("Mul", {f, b.scalar("two", 2.0)}, "m");
    TensorId s = b.op("Sigmoid", {b.op("Neg", {m}, "n")}, "s");
    for (auto& op : b.g.ops)
      if (op.type == "Mul" || op.type == "Neg" || op.type == "Sigmoid") op.phase = phase;
    b.output(s);
    INFO("phase " << phase_name(phase));
    FusionResult res = fuse_elementwise(b.g);
    res.graph.validate();
    REQUIRE(res.groups.size() == 1);
    CHECK(res.groups[0].members.size() == 2);
    CHECK(res.graph.ops.size() == 4);
    CHECK(res.graph.find("n") != kNoTensor);
  }
}

TEST_CASE("the text form round-trips, infinite clip bounds included, and bad text is rejected") {
  FusedExpr e;
  auto x = e.add({ElemOp::input, 0, 0, 0, 0});
  auto c = e.add({ElemOp::clip, x, 0, 0.0, HUGE_VAL});
  auto k = e.add({ElemOp::constant, 0, 0, 0.1, 0});
  e.add({ElemOp::pow, c, k, 0, 0});
  e.num_inputs = 1;
  FusedExpr back = FusedExpr::parse(e.to_string());
  CHECK(back.to_string() == e.to_string());
  CHECK(back.num_inputs == 1);
  CHECK(std::isinf(back.nodes[1].p1));
  auto kind = [](const char* text) {
    try {
      FusedExpr::parse(text);
    } catch (const Error& err) {
      return err.kind();
    }
    return ErrorKind::runtime;
  };
  CHECK(kind("in 0;frobnicate 0") == ErrorKind::malformed);
  CHECK(kind("in 0;add 0 5") == ErrorKind::malformed);
  CHECK(kind("") == ErrorKind::malformed);
}

TEST_CASE("fused graphs compute what the original graphs compute (random DAGs)") {
  const char* unary[] = {"Relu", "Sigmoid", "Tanh", "Neg", "Abs", "Erf"};
  const char* binary[] = {"Add", "Sub", "Mul", "Max"};
  for (unsigned seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    Builder b;
    std::vector<TensorId> pool = {b.input("x0"), b.input("x1"), b.scalar("c", 0.75)};
    const int nops = 6 + static_cast<int>(rng() % 20);
    for (int i = 0; i < nops; ++i) {
      auto pick = [&] { return pool[rng() % pool.size()]; };
      const std::string name = "t" + std::to_string(i);
      const unsigned kind = rng() % 10;
      TensorId t;
      if (kind < 4) t = b.op(unary[rng() % 6], {pick()}, name);
      else if (kind < 8) t = b.op(binary[rng() % 4], {pick(), pick()}, name);
      else t = b.op("Softmax", {pick()}, name);  // opaque to fusion
      pool.push_back(t);
      if (rng() % 6 == 0) b.output(t);
    }
    if (b.g.tensors[pool.back()].is_graph_output == false) b.output(pool.back());
    FusionResult res = fuse_elementwise(b.g);
    res.graph.validate();
    std::size_t fused_ops = 0;
    for (const auto& grp : res.groups) fused_ops += grp.members.size();
    CHECK(res.graph.ops.size() == b.g.ops.size() - fused_ops + res.groups.size());
    const std::map<std::string, float> in = {{"x0", 0.37f}, {"x1", -1.25f}};
    const auto want = interpret(b.g, in);
    const auto got = interpret(res.graph, in);
    REQUIRE(want.size() == got.size());
    for (const auto& [tensor, v] : want) {
      const std::string& name = tensor;  // CAPTURE is a lambda; clang 14 cannot capture a structured binding
      CAPTURE(name);
      REQUIRE(got.count(name));
      CHECK(got.at(name) == doctest::Approx(v).epsilon(1e-6));
    }
  }
}
