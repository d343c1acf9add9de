// Training through fused elementwise groups: a fused forward graph's training step gives the unfused
// graph's gradients on the CPU executor, and saves only the groups' external inputs for backward.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <set>

#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "planner/fusion.hpp"
#include "planner/training_plan.hpp"
#include "runtime_allocator/executor.hpp"

using namespace memplan;
using namespace memplan::runtime;
using analysis::Graph;
using analysis::TensorData;
using analysis::TensorId;

namespace {

// y = LayerNorm(GELU(x W1 + b1) W2 + b2 + x), GELU spelled out with Div, Erf, Add, Mul (opset 14 exports).
struct Mlp {
  Graph g;

  TensorId tensor(const std::string& name, analysis::TensorRole role, std::vector<std::int64_t> dims) {
    analysis::Tensor t;
    t.name = name;
    t.dtype = analysis::DType::f32;
    t.rank_known = true;
    for (auto d : dims) t.dims.push_back(analysis::Dim::of(d));
    t.role = role;
    return g.add_tensor(std::move(t));
  }
  TensorId scalar(const std::string& name, double v) {
    const TensorId t = tensor(name, analysis::TensorRole::weight, {});
    g.tensors[t].data = std::make_shared<TensorData>(TensorData::from_double(analysis::DType::f32, {}, {v}));
    return t;
  }
  TensorId op(const std::string& type, std::vector<TensorId> in, const std::string& out,
              std::map<std::string, analysis::Attribute> attrs = {}) {
    analysis::Op o;
    o.name = out;
    o.type = type;
    o.inputs = std::move(in);
    o.attrs = std::move(attrs);
    analysis::Tensor t;
    t.name = out;
    t.role = analysis::TensorRole::activation;
    o.outputs = {g.add_tensor(std::move(t))};
    g.add_op(std::move(o));
    return g.ops.back().outputs[0];
  }

  Mlp() {
    g.opset = 17;
    using R = analysis::TensorRole;
    const TensorId x = tensor("x", R::input, {4, 8});
    g.inputs.push_back(x);
    const TensorId w1 = tensor("W1", R::weight, {8, 16}), b1 = tensor("b1", R::weight, {16});
    const TensorId w2 = tensor("W2", R::weight, {16, 8}), b2 = tensor("b2", R::weight, {8});
    const TensorId gamma = tensor("gamma", R::weight, {8}), beta = tensor("beta", R::weight, {8});
    const TensorId a = op("Add", {op("MatMul", {x, w1}, "h"), b1}, "a");
    const TensorId e = op("Erf", {op("Div", {a, scalar("sqrt2", std::sqrt(2.0))}, "d")}, "e");
    const TensorId f = op("Add", {e, scalar("one", 1.0)}, "f");
    const TensorId gl = op("Mul", {op("Mul", {a, scalar("half", 0.5)}, "g1"), f}, "gelu");
    const TensorId r = op("Add", {op("Add", {op("MatMul", {gl, w2}, "m"), b2}, "m2"), x}, "r");
    analysis::Attribute axis;
    axis.kind = analysis::Attribute::Kind::i;
    axis.i = -1;
    const TensorId y = op("LayerNormalization", {r, gamma, beta}, "y", {{"axis", axis}});
    g.outputs.push_back(y);
    g.tensors[y].is_graph_output = true;
    g.relink();
    g = analysis::infer_shapes(g, {});
  }
};

TensorId by_name(const Graph& g, const std::string& name) {
  for (TensorId t = 0; t < g.tensors.size(); ++t)
    if (g.tensors[t].name == name) return t;
  return analysis::kNoTensor;
}

std::vector<float> read(const Executor& ex, const Graph& g, TensorId t) {
  std::vector<float> v(g.tensors[t].element_count());
  std::memcpy(v.data(), ex.address(t), v.size() * sizeof(float));
  return v;
}

// The training step of `fwd` with deterministic weights (by name) and inputs, run unshared on the CPU.
struct Step {
  analysis::TrainingGraph tg;
  HostBackend backend;
  std::unique_ptr<Executor> ex;

  explicit Step(const Graph& fwd) {
    analysis::TrainingOptions to;
    to.optimizer = analysis::Optimizer::none;
    tg = analysis::build_training_graph(fwd, to);
    for (const auto& [w, grad] : tg.param_grads) {
      auto& t = tg.graph.tensors[w];
      std::mt19937 rng(static_cast<std::uint32_t>(std::hash<std::string>{}(t.name) % 100000));
      std::vector<double> v(t.element_count());
      for (auto& e : v) e = std::uniform_real_distribution<double>(-0.5, 0.5)(rng) + (t.name == "gamma" ? 1.0 : 0.0);
      t.data = std::make_shared<TensorData>(TensorData::from_double(t.dtype, t.shape(), v));
    }
    std::vector<TensorData> feeds;
    std::mt19937 rng(3);
    for (TensorId t : tg.graph.inputs) {
      std::vector<double> v(tg.graph.tensors[t].element_count());
      for (auto& e : v) e = std::uniform_real_distribution<double>(-1.5, 1.5)(rng);
      feeds.push_back(TensorData::from_double(tg.graph.tensors[t].dtype, tg.graph.tensors[t].shape(), v));
    }
    ex = std::make_unique<Executor>(tg.graph, planner::Plan{}, backend, ExecOptions{.unshared = true});
    ex->run(feeds);
  }
  std::vector<float> grad_of(const std::string& weight) const {
    for (const auto& [w, grad] : tg.param_grads)
      if (tg.graph.tensors[w].name == weight) return read(*ex, tg.graph, grad);
    return {};
  }
  std::uint64_t saved_bytes() const {
    std::uint64_t b = 0;
    for (TensorId t : tg.saved_for_backward) b += tg.graph.tensors[t].bytes();
    return b;
  }
};

}  // namespace

TEST_CASE("a fused forward graph trains: the unfused graph's gradients, only the groups' inputs saved") {
  const Mlp plain;
  const auto fr = planner::fuse_elementwise(plain.g);
  REQUIRE(fr.groups.size() == 2);  // x W1 + b1 through GELU; + b2 + x
  CHECK(fr.groups[0].members.size() == 6);
  CHECK(fr.groups[1].members.size() == 2);

  const Step unfused(plain.g), fused(fr.graph);
  CHECK(read(*fused.ex, fused.tg.graph, fused.tg.loss)[0] ==
        doctest::Approx(read(*unfused.ex, unfused.tg.graph, unfused.tg.loss)[0]).epsilon(1e-5));
  REQUIRE(fused.tg.param_grads.size() == 6);
  for (const char* w : {"W1", "b1", "W2", "b2", "gamma", "beta"}) {
    const auto a = fused.grad_of(w), b = unfused.grad_of(w);
    INFO("weight " << w);
    REQUIRE(a.size() == b.size());
    REQUIRE(!a.empty());
    float worst = 0.0f;
    for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]) / std::max(1.0f, std::fabs(b[i])));
    CHECK(worst <= 1e-4f);
  }

  // The groups' intermediates do not exist in the fused step, so backward cannot save them; it saves the
  // groups' external inputs (h, and what MatMul and LayerNorm save) instead.
  std::set<std::string> saved;
  for (TensorId t : fused.tg.saved_for_backward) saved.insert(fused.tg.graph.tensors[t].name);
  for (const char* inside : {"a", "d", "e", "f", "g1", "m2"}) {
    INFO("intermediate " << inside);
    CHECK(by_name(fused.tg.graph, inside) == analysis::kNoTensor);
    CHECK(saved.count(inside) == 0);
  }
  CHECK(saved.count("h") == 1);
  CHECK(fused.saved_bytes() < unfused.saved_bytes());
  // The backward kernels are fused too: one per wanted input of each group.
  std::size_t backward_fused = 0;
  for (const auto& op : fused.tg.graph.ops)
    if (op.type == planner::kFusedOpType && op.phase == analysis::Phase::backward) ++backward_fused;
  CHECK(backward_fused == 2);  // dh and db1 of the GELU group; the residual group's gradients are dy itself

  planner::TrainingPlanOptions po;
  const auto plan_plain = planner::plan_training(unfused.tg, po), plan_fused = planner::plan_training(fused.tg, po);
  MESSAGE("activation arena: unfused " << plan_plain.activation_arena_bytes << " B, fused " << plan_fused.activation_arena_bytes
                                       << " B; saved " << unfused.saved_bytes() << " B -> " << fused.saved_bytes() << " B");
  CHECK(plan_fused.activation_arena_bytes < plan_plain.activation_arena_bytes);
}
