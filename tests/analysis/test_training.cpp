// Tests of build_training_graph on hand-built graphs: backward op types, saved tensors, shapes, order.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "analysis/liveness.hpp"
#include "analysis/training.hpp"
#include "tests/analysis/test_training_fixture.hpp"

using namespace memplan;
using namespace memplan::analysis;
using memplan::analysis::testing::GraphBuilder;
using memplan::analysis::testing::ai;
using memplan::analysis::testing::aints;

namespace {

// Backward ops emitted for the forward op named `fwd` (their names start with "<fwd>/grad/").
std::vector<const Op*> backward_of(const Graph& g, const std::string& fwd) {
  std::vector<const Op*> out;
  for (const Op& op : g.ops)
    if (op.phase == Phase::backward && op.name.rfind(fwd + "/grad/", 0) == 0) out.push_back(&op);
  return out;
}

std::set<std::string> types_of(const std::vector<const Op*>& ops) {
  std::set<std::string> s;
  for (const Op* op : ops) s.insert(op->type);
  return s;
}

// Forward tensors that are not constants (activations, graph inputs, trainable weights) read by `ops`.
std::set<std::string> forward_reads(const Graph& g, const std::vector<const Op*>& ops) {
  std::set<std::string> s;
  for (const Op* op : ops)
    for (TensorId t : op->inputs) {
      if (t == kNoTensor) continue;
      const Tensor& x = g.tensors[t];
      const bool backward_made = x.producer != kNoOp && g.ops[x.producer].phase != Phase::forward;
      if (backward_made || x.name.rfind("grad/", 0) == 0 || x.data) continue;
      s.insert(x.name);
    }
  return s;
}

const Tensor& named(const Graph& g, const std::string& n) { return g.tensors[g.at(n)]; }

GraphBuilder mlp() {
  GraphBuilder b;
  auto x = b.input("x", {4, 8});
  auto w1 = b.weight("w1", {16, 8});
  auto b1 = b.weight("b1", {16});
  auto w2 = b.weight("w2", {3, 16});
  auto b2 = b.weight("b2", {3});
  auto h = b.op1("Gemm", {x, w1, b1}, "h", {4, 16}, {{"transB", ai(1)}});
  auto r = b.op1("Relu", {h}, "r", {4, 16});
  auto y = b.op1("Gemm", {r, w2, b2}, "y", {4, 3}, {{"transB", ai(1)}});
  b.output(y);
  return b;
}

}  // namespace

TEST_CASE("an MLP gets Gemm and ReluGrad backward ops that read exactly what PyTorch saves") {
  auto b = mlp();
  TrainingGraph tg = build_training_graph(b.g, {});
  const Graph& g = tg.graph;
  CHECK(types_of(backward_of(g, "Relu1")) == std::set<std::string>{"ReluGrad"});
  CHECK(forward_reads(g, backward_of(g, "Relu1")) == std::set<std::string>{"r"});
  CHECK(types_of(backward_of(g, "Gemm2")) == std::set<std::string>{"Gemm", "ReduceSumTo"});
  CHECK(forward_reads(g, backward_of(g, "Gemm2")) == std::set<std::string>{"r", "w2"});
  // x is a graph input that needs no gradient: Gemm0's backward reads only x (for dW1), never w1.
  CHECK(forward_reads(g, backward_of(g, "Gemm0")) == std::set<std::string>{"x"});
  // The Gemm output h is not saved: ReLU saves its result, Gemm its inputs.
  std::set<std::string> saved;
  for (TensorId t : tg.saved_for_backward) saved.insert(g.tensors[t].name);
  CHECK(saved == std::set<std::string>{"x", "r", "y", "target"});
  CHECK(named(g, "loss").dims.empty());
  CHECK(g.outputs.front() == tg.loss);
}

TEST_CASE("every trainable weight has one gradient of its shape, role gradient, in the arena to the step's end") {
  auto b = mlp();
  TrainingGraph tg = build_training_graph(b.g, {});
  const Graph& g = tg.graph;
  REQUIRE(tg.param_grads.size() == 4);
  std::set<std::string> names;
  for (auto [w, gw] : tg.param_grads) {
    names.insert(g.tensors[w].name);
    CHECK(g.tensors[gw].role == TensorRole::gradient);
    CHECK(g.tensors[gw].shape() == g.tensors[w].shape());
    CHECK(g.tensors[gw].name == "grad/" + g.tensors[w].name);
    CHECK(occupies_arena(g.tensors[gw]));
    const auto l = analyze_liveness(g, training_schedule(tg));
    CHECK(l.interval[gw].last + 1 == l.schedule.size());  // the step's result: held to the end
    CHECK(l.interval[gw].first == l.step_of_op[g.tensors[gw].producer]);
  }
  CHECK(names == std::set<std::string>{"w1", "b1", "w2", "b2"});
  // Activation gradients live in the arena and have their forward tensor's shape.
  CHECK(named(g, "grad/r").shape() == named(g, "r").shape());
  CHECK(occupies_arena(named(g, "grad/r")));
  CHECK(g.find("grad/x") == kNoTensor);  // graph inputs get no gradient
}

TEST_CASE("ops run forward, loss, backward in reverse forward order, then the optimizer") {
  auto b = mlp();
  TrainingGraph tg = build_training_graph(b.g, {});
  const Graph& g = tg.graph;
  CHECK(is_topological(g, training_schedule(tg)));
  int last_phase = 0, last_fwd = 1 << 30;
  for (const Op& op : g.ops) {
    const int phase = op.phase == Phase::forward ? 0 : op.phase == Phase::backward ? 1 : 2;
    CHECK(phase >= last_phase);
    last_phase = phase;
    if (op.phase != Phase::backward) continue;
    const auto slash = op.name.find('/');
    const std::string fwd = op.name.substr(0, slash);
    int k = fwd == "loss" ? 1 << 20 : -1;
    for (OpId o = 0; o < g.ops.size(); ++o)
      if (g.ops[o].name == fwd) k = static_cast<int>(o);
    CHECK(k <= last_fwd);
    last_fwd = k;
  }
  CHECK(g.ops.back().phase == Phase::optimizer);
  CHECK(g.ops.front().phase == Phase::forward);
}

TEST_CASE("a tensor read twice accumulates its gradient with Add before its producer's backward") {
  GraphBuilder b;
  auto x = b.input("x", {2, 5});
  auto w = b.weight("w", {2, 5});
  auto a = b.op1("Mul", {x, w}, "a", {2, 5});
  auto r = b.op1("Relu", {a}, "r", {2, 5});
  auto s = b.op1("Sigmoid", {r}, "s", {2, 5});
  auto t = b.op1("Tanh", {r}, "t", {2, 5});
  auto y = b.op1("Add", {s, t}, "y", {2, 5});
  b.output(y);
  TrainingGraph tg = build_training_graph(b.g, {});
  const Graph& g = tg.graph;
  const TensorId gr = g.at("grad/r");
  const Op& acc = g.ops[g.tensors[gr].producer];
  CHECK(acc.type == "Add");
  CHECK(acc.phase == Phase::backward);
  // Contributions arrive in reverse forward order: Tanh's first, then Sigmoid's.
  CHECK(g.ops[g.tensors[acc.inputs[0]].producer].type == "TanhGrad");
  CHECK(g.ops[g.tensors[acc.inputs[1]].producer].type == "SigmoidGrad");
  const Op& relu_grad = *backward_of(g, "Relu1").at(0);
  CHECK(relu_grad.inputs.at(0) == gr);
  CHECK(g.tensors[gr].producer < g.tensors[relu_grad.outputs[0]].producer);
  // Mul(x, w): only w trains, so the backward reads x and not w.
  CHECK(forward_reads(g, backward_of(g, "Mul0")) == std::set<std::string>{"x"});
}

TEST_CASE("gradients of broadcast inputs are summed back to the input's shape") {
  GraphBuilder b;
  auto x = b.input("x", {2, 3, 4});
  auto bias = b.weight("bias", {4});
  auto scale = b.weight("scale", {3, 1});
  auto a = b.op1("Add", {x, bias}, "a", {2, 3, 4});
  auto m = b.op1("Mul", {a, scale}, "m", {2, 3, 4});
  auto y = b.op1("Sub", {m, bias}, "y", {2, 3, 4});
  b.output(y);
  TrainingGraph tg = build_training_graph(b.g, {});
  const Graph& g = tg.graph;
  int reductions = 0;
  for (const Op& op : g.ops)
    if (op.type == "ReduceSumTo") {
      ++reductions;
      CHECK(g.tensors[op.inputs[0]].shape() == std::vector<std::int64_t>{2, 3, 4});
    }
  CHECK(reductions == 3);  // Sub's bias (scale -1), Mul's scale, Add's bias
  const auto sub = backward_of(g, "Sub2");
  REQUIRE(sub.size() == 1);
  CHECK(sub[0]->attr_float("scale", 1.0) == -1.0);
  // bias is read twice: its gradient is the sum of two contributions, and is the final "grad/bias".
  const Tensor& gb = named(g, "grad/bias");
  CHECK(gb.role == TensorRole::gradient);
  CHECK(gb.shape() == std::vector<std::int64_t>{4});
  CHECK(g.ops[gb.producer].type == "Add");
  CHECK(named(g, "grad/scale").shape() == std::vector<std::int64_t>{3, 1});
}

TEST_CASE("a weight whose gradient passes straight through gets its own copy") {
  GraphBuilder b;
  auto x = b.input("x", {2, 3});
  auto w = b.weight("w", {2, 3});
  auto a = b.op1("Add", {x, w}, "a", {2, 3});
  auto y = b.op1("Relu", {a}, "y", {2, 3});
  b.output(y);
  TrainingGraph tg = build_training_graph(b.g, {});
  const Graph& g = tg.graph;
  const Tensor& gw = named(g, "grad/w");
  CHECK(gw.role == TensorRole::gradient);
  CHECK(g.ops[gw.producer].type == "Identity");
  CHECK(named(g, "grad/a").role == TensorRole::activation);
}
