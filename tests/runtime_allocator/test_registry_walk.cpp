// Walks the op registry: every backward rule against finite differences, every CPU kernel on an example.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "analysis/ops.hpp"
#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "runtime_allocator/executor.hpp"
#include "tests/runtime_allocator/registry_examples.hpp"

using namespace memplan;
using namespace memplan::runtime;
using namespace memplan::runtime::testing;
using analysis::Graph;
using analysis::TensorData;
using analysis::TensorId;

namespace {

constexpr std::uint32_t kSeed = 20261124;  // printed with every failure
constexpr double kStep = 1e-3;  // central-difference step (values lie on a grid 100 steps apart)
// Ops with a backward rule whose forward has no CPU kernel yet: their gradients cannot be checked on the
// CPU. An op listed here that gains a kernel fails the walk, so the list only shrinks.
const std::set<std::string> kNoCpuKernelYet = {};

std::string key(std::string_view domain, std::string_view type) {
  return (domain.empty() || domain == "ai.onnx" ? std::string() : std::string(domain) + "::") + std::string(type);
}

TensorData draw(const ExampleInput& in, std::mt19937& rng) {
  if (in.value) return TensorData::from_double(in.dtype, in.dims, *in.value);
  std::size_t n = 1;
  for (auto d : in.dims) n *= static_cast<std::size_t>(d);
  std::vector<double> v(n);
  for (std::size_t k = 0; k < n; ++k) v[k] = static_cast<double>(k) / static_cast<double>(n);  // 0 .. 1, distinct
  std::shuffle(v.begin(), v.end(), rng);
  std::bernoulli_distribution coin(0.5);
  for (auto& e : v) {
    if (in.fill == Fill::distinct) e = (coin(rng) ? 1.0 : -1.0) * (0.2 + 0.8 * e);
    else if (in.fill == Fill::positive) e = 0.5 + e;
    else if (in.fill == Fill::above_one) e = 1.2 + e;
    else e = coin(rng) ? 1.0 : 0.0;
  }
  return TensorData::from_double(in.dtype, in.dims, v);
}

// A one-op graph of `e`: constants carry their value; inputs that train are weights (their values in
// `weights`, attached after the training graph is built); the rest are graph inputs fed with `feeds`.
struct OneOp {
  Graph g;
  std::map<std::string, TensorData> weights, feeds;
};

OneOp one_op(const Example& e, std::mt19937& rng, bool trained_as_weights, bool all_outputs) {
  OneOp r;
  r.g.opset = 17;
  analysis::Op op;
  op.name = "op";
  op.type = e.type;
  op.domain = e.domain;
  op.attrs = e.attrs;
  for (std::size_t k = 0; k < e.in.size(); ++k) {
    const auto& in = e.in[k];
    analysis::Tensor t;
    t.name = "in" + std::to_string(k);
    t.dtype = in.dtype;
    t.rank_known = true;
    for (auto d : in.dims) t.dims.push_back(analysis::Dim::of(d));
    TensorData value = draw(in, rng);
    const bool weight = in.value || (in.trains && trained_as_weights);
    t.role = weight ? analysis::TensorRole::weight : analysis::TensorRole::input;
    if (in.value) t.data = std::make_shared<TensorData>(value);
    else (weight ? r.weights : r.feeds)[t.name] = value;
    TensorId id = r.g.add_tensor(t);
    if (!weight) r.g.inputs.push_back(id);
    if (weight && !in.value && e.through_mul) {  // op input = ones * weight, an activation
      analysis::Tensor one = t, act = t;
      one.name = t.name + "/one";
      one.role = analysis::TensorRole::input;
      r.feeds[one.name] = TensorData::from_double(in.dtype, in.dims, std::vector<double>(value.bytes.size() / 4, 1.0));
      act.name = t.name + "/act";
      act.role = analysis::TensorRole::activation;
      const TensorId o = r.g.add_tensor(std::move(one)), a = r.g.add_tensor(std::move(act));
      r.g.inputs.push_back(o);
      analysis::Op mul;
      mul.name = t.name + "/mul";
      mul.type = "Mul";
      mul.inputs = {o, id};
      mul.outputs = {a};
      r.g.add_op(std::move(mul));
      id = a;
    }
    op.inputs.push_back(id);
  }
  for (std::size_t k = 0; k < e.out.size(); ++k) {
    analysis::Tensor t;
    t.name = "out" + std::to_string(k);
    t.role = analysis::TensorRole::activation;
    if (!e.domain.empty()) {  // memplan's own ops declare their shapes
      t.dtype = e.out[k].dtype;
      t.rank_known = true;
      for (auto d : e.out[k].dims) t.dims.push_back(analysis::Dim::of(d));
    }
    const TensorId id = r.g.add_tensor(std::move(t));
    op.outputs.push_back(id);
    if (k == 0 || all_outputs) {
      r.g.outputs.push_back(id);
      r.g.tensors[id].is_graph_output = true;
    }
  }
  r.g.add_op(std::move(op));
  analysis::ShapeOptions so;
  so.fold_max_elements = 0;  // keep the op even when all its inputs are constants
  r.g = analysis::infer_shapes(r.g, so);
  return r;
}

TensorId by_name(const Graph& g, const std::string& name) {
  for (TensorId t = 0; t < g.tensors.size(); ++t)
    if (g.tensors[t].name == name) return t;
  return analysis::kNoTensor;
}

std::vector<TensorData> feeds_of(const Graph& g, const std::map<std::string, TensorData>& feeds, std::mt19937& rng) {
  std::vector<TensorData> v;
  for (TensorId t : g.inputs) {
    const auto& x = g.tensors[t];
    auto it = feeds.find(x.name);
    v.push_back(it != feeds.end() ? it->second : draw({x.shape(), x.dtype, Fill::distinct, false, std::nullopt}, rng));
  }
  return v;
}

std::vector<float> floats(const Executor& ex, const Graph& g, TensorId t) {
  std::vector<float> v(g.tensors[t].element_count());
  std::memcpy(v.data(), ex.address(t), v.size() * sizeof(float));
  return v;
}

// The training step's loss recomputed in double from output 0 and the target (both read back).
double mse(const Executor& ex, const Graph& g, TensorId y, TensorId target) {
  const auto a = floats(ex, g, y), b = floats(ex, g, target);
  double s = 0;
  for (std::size_t k = 0; k < a.size(); ++k) s += (static_cast<double>(a[k]) - b[k]) * (static_cast<double>(a[k]) - b[k]);
  return s / static_cast<double>(a.size());
}

double loss_at(const Graph& g, const std::vector<TensorData>& feeds, TensorId w, std::size_t i, double delta,
               TensorId y, TensorId target) {
  Graph h = g;
  auto data = std::make_shared<TensorData>(*h.tensors[w].data);
  float v;
  std::memcpy(&v, data->bytes.data() + i * 4, 4);
  v = static_cast<float>(v + delta);
  std::memcpy(data->bytes.data() + i * 4, &v, 4);
  h.tensors[w].data = data;
  HostBackend backend;
  Executor ex(h, planner::Plan{}, backend, {.unshared = true});
  ex.run(feeds);
  return mse(ex, h, y, target);
}

bool cpu_registered(const analysis::OpInfo& info) {
  static const auto ids = registered_kernels("cpu");
  return std::find(ids.begin(), ids.end(), info.id) != ids.end();
}

// The examples with a trained input that exercise the op (every variant of it: transposes, broadcasts).
std::vector<const Example*> fd_examples(const analysis::OpInfo& info) {
  const std::string k = key(info.domain, info.type);
  std::vector<const Example*> found;
  for (const auto& e : examples()) {
    bool trains = false;
    for (const auto& in : e.in) trains = trains || in.trains;
    if (!trains) continue;
    bool covers = key(e.domain, e.type) == k;
    for (const auto& c : e.covers) covers = covers || c == k;
    if (covers) found.push_back(&e);
  }
  return found;
}

// Checks every trained input's gradient of `e` against central differences; returns the elements checked.
std::size_t check_gradients(const Example& e, std::uint32_t seed) {
  std::mt19937 rng(seed);
  OneOp fwd = one_op(e, rng, true, false);
  analysis::TrainingOptions to;
  to.optimizer = analysis::Optimizer::none;
  analysis::TrainingGraph tg = analysis::build_training_graph(fwd.g, to);
  Graph& g = tg.graph;
  for (const auto& entry : fwd.weights) {
    const std::string& name = entry.first;
    const auto& value = entry.second;
    const TensorId w = by_name(g, name);
    REQUIRE_MESSAGE(w != analysis::kNoTensor, "trained input " << name << " is missing from the training graph");
    g.tensors[w].data = std::make_shared<TensorData>(value);
  }
  const auto feeds = feeds_of(g, fwd.feeds, rng);
  const TensorId y = by_name(g, "out0"), target = by_name(g, "target");
  REQUIRE((y != analysis::kNoTensor && target != analysis::kNoTensor));
  HostBackend backend;
  Executor ex(g, planner::Plan{}, backend, {.unshared = true});
  ex.run(feeds);
  std::size_t checked = 0;
  for (std::size_t k = 0; k < e.in.size(); ++k) {
    if (!e.in[k].trains) continue;
    const std::string name = "in" + std::to_string(k);
    const TensorId w = by_name(g, name);
    TensorId grad = analysis::kNoTensor;
    for (const auto& [pw, pg] : tg.param_grads)
      if (pw == w) grad = pg;
    CHECK_MESSAGE(grad != analysis::kNoTensor, "input " << k << " of " << e.type << " trains but got no gradient");
    if (grad == analysis::kNoTensor) continue;
    const auto analytic = floats(ex, g, grad);
    const std::size_t n = analytic.size();
    for (std::size_t i : std::set<std::size_t>{0, n / 3, (2 * n) / 3, n - 1}) {
      const double fd = (loss_at(g, feeds, w, i, kStep, y, target) - loss_at(g, feeds, w, i, -kStep, y, target)) / (2 * kStep);
      const double an = analytic[i];
      INFO(e.type << " input " << k << "[" << i << "]: gradient " << an << ", finite difference " << fd);
      CHECK(std::fabs(fd - an) <= 2e-2 * std::max(std::fabs(fd), std::fabs(an)) + 1e-3);
      ++checked;
    }
  }
  return checked;
}

// Runs graph `g` unshared on the CPU; every graph output has its declared size, float ones are finite.
void run_and_check(const Graph& g, const std::vector<TensorData>& feeds, const std::string& what) {
  HostBackend backend;
  Executor ex(g, planner::Plan{}, backend, {.unshared = true});
  const auto outs = ex.run(feeds);
  REQUIRE(outs.size() == g.outputs.size());
  for (std::size_t k = 0; k < outs.size(); ++k) {
    const auto& t = g.tensors[g.outputs[k]];
    INFO(what << ": output " << t.name);
    CHECK(outs[k].dims == t.shape());
    CHECK(outs[k].bytes.size() == t.bytes());
    if (t.dtype == DType::f32)
      for (std::size_t i = 0; i < outs[k].bytes.size() / 4; ++i) {
        float v;
        std::memcpy(&v, outs[k].bytes.data() + i * 4, 4);
        if (!std::isfinite(v)) {
          FAIL_CHECK(what << ": output " << t.name << "[" << i << "] is " << v);
          break;
        }
      }
  }
}

void note_ops(const Graph& g, std::set<analysis::OpTypeId>& seen) {
  for (const auto& op : g.ops)
    if (const auto* info = analysis::op_registry().find(op)) seen.insert(info->id);
}

}  // namespace

TEST_CASE("registry walk: every op with a backward rule matches central finite differences on the CPU") {
  INFO("seed " << kSeed);
  std::size_t ops = 0;
  for (const auto& info : analysis::op_registry().all()) {
    if (info.grad_kind != analysis::GradKind::rule) continue;
    const std::vector<const Example*> found = fd_examples(info);
    if (found.empty()) {
      FAIL_CHECK("op " << key(info.domain, info.type) << " has a backward rule but no finite-difference example "
                       << "(tests/runtime_allocator/registry_examples.hpp)");
      continue;
    }
    if (kNoCpuKernelYet.count(key(info.domain, info.type))) {
      CHECK_MESSAGE(!cpu_registered(info), "op " << key(info.domain, info.type) << " has a CPU kernel now: "
                                                 << "remove it from kNoCpuKernelYet");
      MESSAGE("op " << key(info.domain, info.type) << ": no CPU kernel, gradient not checked");
      continue;
    }
    for (std::size_t n = 0; n < found.size(); ++n) {
      const Example& e = *found[n];
      INFO("op " << key(info.domain, info.type) << " (example " << n << ", " << e.type << ")");
      try {
        CHECK(check_gradients(e, kSeed + static_cast<std::uint32_t>(info.id)) > 0);
      } catch (const Error& err) {
        FAIL_CHECK("op " << key(info.domain, info.type) << ": " << std::string(err.what()));
      }
    }
    ++ops;
  }
  MESSAGE(ops << " backward rules checked against finite differences");
}

TEST_CASE("registry walk: every op the CPU backend registers runs on an example") {
  INFO("seed " << kSeed);
  std::set<analysis::OpTypeId> seen;
  std::uint32_t n = 0;
  for (const auto& e : examples()) {
    std::mt19937 rng(kSeed + n++);
    INFO("example " << key(e.domain, e.type));
    const auto* info = analysis::op_registry().find(e.domain, e.type);
    CHECK_MESSAGE(info != nullptr, "example of op " << key(e.domain, e.type) << ", which the registry does not know");
    if (!info || !cpu_registered(*info)) continue;  // examples of ops with other backends' kernels only
    try {
      if (e.forward) {
        OneOp r = one_op(e, rng, false, true);
        run_and_check(r.g, feeds_of(r.g, r.feeds, rng), key(e.domain, e.type));
        note_ops(r.g, seen);
      }
      bool has_rule = info->grad_kind == analysis::GradKind::rule, trains = false;
      for (const auto& c : e.covers)
        for (const auto& other : analysis::op_registry().all())
          if (key(other.domain, other.type) == c) has_rule = has_rule || other.grad_kind == analysis::GradKind::rule;
      for (const auto& in : e.in) trains = trains || in.trains;
      if (!has_rule || !trains) continue;
      // Its training steps: backward ops, the loss and every optimizer's updates run too (adamw with weight
      // decay and accumulated gradients).
      for (auto opt : {analysis::Optimizer::sgd, analysis::Optimizer::momentum, analysis::Optimizer::adam, analysis::Optimizer::adamw}) {
        OneOp fwd = one_op(e, rng, true, false);
        analysis::TrainingOptions to;
        to.optimizer = opt;
        if (opt == analysis::Optimizer::adamw) {
          to.weight_decay = 0.01;
          to.microbatches = 2;
        }
        analysis::TrainingGraph tg = analysis::build_training_graph(fwd.g, to);
        for (const auto& [name, value] : fwd.weights)
          if (TensorId w = by_name(tg.graph, name); w != analysis::kNoTensor)
            tg.graph.tensors[w].data = std::make_shared<TensorData>(value);
        run_and_check(tg.graph, feeds_of(tg.graph, fwd.feeds, rng),
                      key(e.domain, e.type) + " training step (" + analysis::optimizer_name(opt) + ")");
        note_ops(tg.graph, seen);
      }
    } catch (const Error& err) {
      FAIL_CHECK(key(e.domain, e.type) << ": " << std::string(err.what()));
    }
  }
  for (analysis::OpTypeId id : registered_kernels("cpu")) {
    const auto& info = analysis::op_registry().info(id);
    CHECK_MESSAGE(seen.count(id) > 0, "op " << key(info.domain, info.type) << " has a CPU kernel but no example "
                                            << "(tests/runtime_allocator/registry_examples.hpp) runs it");
  }
}
