// Tests of Dropout on the CPU executor: training mode draws a deterministic
// mask (dropout_mask.hpp) that DropoutGrad reuses; inference mode is the
// identity.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <optional>

#include "analysis/training.hpp"
#include "planner/training_plan.hpp"
#include "runtime_allocator/kernels/dropout_mask.hpp"
#include "runtime_allocator/executor.hpp"
#include "tests/runtime_allocator/op_graph.hpp"

using namespace memplan;
using namespace memplan::runtime;
using namespace memplan::runtime::testing;
using analysis::DType;
using analysis::TensorId;

namespace {

struct DropoutRun {
  std::vector<float> x, y, dx, dy;
  std::vector<std::uint8_t> mask;
};

// Dropout(x, ratio, training) -> y, mask; DropoutGrad(dy, mask, ratio) -> dx;
// on the CPU executor.
DropoutRun run_dropout(float ratio, bool training, std::optional<std::int64_t> seed, const std::vector<std::int64_t> &dims) {
  OpGraph b;
  std::mt19937 rng(5);
  const auto xv = random_f32(dims, rng), dyv = random_f32(dims, rng);
  const TensorId x = b.input("x", xv), dy = b.input("dy", dyv);
  const TensorId r = b.constant("ratio", analysis::TensorData::from_double(DType::f32, {}, {ratio}));
  const TensorId t = b.constant("training", ints(DType::boolean, {}, {training ? 1 : 0}));
  const TensorId y = b.result("y", DType::f32, dims), m = b.result("mask", DType::boolean, dims);
  const TensorId dx = b.result("dx", DType::f32, dims);
  std::map<std::string, analysis::Attribute> attrs;
  if (seed) attrs["seed"] = int_attr(*seed);
  b.op("Dropout", "", {x, r, t}, {y, m}, attrs);
  b.op("DropoutGrad", "memplan", {dy, m, r}, {dx});
  HostBackend backend;
  Executor ex(b.g, planner::Plan{}, backend, {.unshared = true});
  ex.run(b.feeds);
  DropoutRun out;
  out.x = as_floats(xv.bytes.data(), xv.bytes.size());
  out.dy = as_floats(dyv.bytes.data(), dyv.bytes.size());
  out.y = as_floats(ex.address(y), b.g.tensors[y].bytes());
  out.dx = as_floats(ex.address(dx), b.g.tensors[dx].bytes());
  out.mask.resize(b.g.tensors[m].bytes());
  std::memcpy(out.mask.data(), ex.address(m), out.mask.size());
  return out;
}

// One training step (optimizer none) of relu(Dropout(x W, ratio 0, training)): planned with strategy none
// and run on the CPU through the plan's arena. With `mask_out` the mask is a graph output, so the Dropout
// stays a Dropout (mask, DropoutGrad); without, training turns it into an Identity (a view).
struct ZeroDropoutStep {
  std::vector<std::string> forward_types;
  bool valid = false;
  std::vector<std::vector<float>> outputs;  // the loss, then the weight's gradient
};

ZeroDropoutStep zero_dropout_step(bool mask_out) {
  OpGraph b;
  std::mt19937 rng(11);
  const TensorId x = b.input("x", random_f32({4, 8}, rng));
  const TensorId w = b.constant("W", random_f32({8, 6}, rng));
  b.g.tensors[w].role = analysis::TensorRole::weight;
  const TensorId r = b.constant("ratio", analysis::TensorData::from_double(DType::f32, {}, {0.0}));
  const TensorId t = b.constant("training", ints(DType::boolean, {}, {1}));
  const TensorId h = b.tensor("h", DType::f32, {4, 6}, analysis::TensorRole::activation);
  const TensorId d = b.tensor("d", DType::f32, {4, 6}, analysis::TensorRole::activation);
  const TensorId m = mask_out ? b.result("mask", DType::boolean, {4, 6})
                              : b.tensor("mask", DType::boolean, {4, 6}, analysis::TensorRole::activation);
  const TensorId y = b.result("y", DType::f32, {4, 6});
  b.op("MatMul", "", {x, w}, {h});
  b.op("Dropout", "", {h, r, t}, {d, m}, {{"seed", int_attr(3)}});
  b.op("Relu", "", {d}, {y});
  b.g.relink();
  analysis::TrainingOptions to;
  to.optimizer = analysis::Optimizer::none;
  const analysis::TrainingGraph tg = analysis::build_training_graph(b.g, to);
  const planner::TrainingPlanResult plan = planner::plan_training(tg, {});
  ZeroDropoutStep out;
  for (const auto &op : plan.graph.ops)
    if (op.phase == analysis::Phase::forward) out.forward_types.push_back(op.type);
  out.valid = plan.report.valid;
  std::vector<analysis::TensorData> feeds;
  std::mt19937 frng(5);
  for (const TensorId in : plan.graph.inputs) feeds.push_back(random_f32(plan.graph.tensors[in].shape(), frng));
  HostBackend backend;
  Executor ex(plan.graph, plan.plan, backend);
  const auto got = ex.run(feeds);
  for (std::size_t k = 0; k < plan.graph.outputs.size(); ++k) {
    const std::string &name = plan.graph.tensors[plan.graph.outputs[k]].name;
    if (name == plan.graph.tensors[tg.loss].name || name == plan.graph.tensors[tg.param_grads.at(0).second].name)
      out.outputs.push_back(as_floats(got[k].bytes.data(), got[k].bytes.size()));
  }
  return out;
}

double kept_fraction(const DropoutRun &r) {
  std::size_t kept = 0;
  for (auto v : r.mask) kept += v != 0;
  return static_cast<double>(kept) / static_cast<double>(r.mask.size());
}

}  // namespace

TEST_CASE(
    "training-mode Dropout: the same seed gives the same mask, the kept "
    "fraction is near 1 - ratio, y = x*mask/(1-ratio)") {
  const std::vector<std::int64_t> dims{64, 1000};
  for (const float ratio : {0.1f, 0.3f, 0.5f, 0.9f}) {
    CAPTURE(ratio);
    const auto a = run_dropout(ratio, true, 1234, dims), b = run_dropout(ratio, true, 1234, dims);
    CHECK(a.mask == b.mask);
    CHECK(a.y == b.y);
    // 64000 draws: the kept fraction's standard deviation is at most 0.002.
    CHECK(std::fabs(kept_fraction(a) - (1.0 - ratio)) < 0.01);
    bool exact = true, grad_exact = true;
    for (std::size_t i = 0; i < a.y.size(); ++i) {
      const float m = a.mask[i] ? 1.0f : 0.0f;
      exact = exact && a.y[i] == a.x[i] * m / (1.0f - ratio);
      grad_exact = grad_exact && a.dx[i] == a.dy[i] * m / (1.0f - ratio);
    }
    CHECK(exact);
    CHECK(grad_exact);
    // Another seed draws another mask, about as far from this one as
    // independent draws are.
    const auto c = run_dropout(ratio, true, 99, dims);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < a.mask.size(); ++i) differ += a.mask[i] != c.mask[i];
    const double expected = 2.0 * ratio * (1.0 - ratio);
    CHECK(std::fabs(static_cast<double>(differ) / static_cast<double>(a.mask.size()) - expected) < 0.015);
  }
}

TEST_CASE(
    "training-mode Dropout without a seed uses the fixed default seed; "
    "the mask is the documented hash") {
  const std::vector<std::int64_t> dims{7, 301};
  const auto a = run_dropout(0.25f, true, std::nullopt, dims);
  const auto b = run_dropout(0.25f, true, static_cast<std::int64_t>(kDefaultDropoutSeed), dims);
  CHECK(a.mask == b.mask);
  const std::uint64_t key = dropout_key(kDefaultDropoutSeed), threshold = dropout_threshold(0.25f);
  bool same = true;
  for (std::size_t i = 0; i < a.mask.size(); ++i) same = same && (a.mask[i] != 0) == dropout_keep(key, i, threshold);
  CHECK(same);
}

TEST_CASE(
    "Dropout at ratio 0 or in inference mode is the identity with an "
    "all-true mask, and ratio 1 drops everything") {
  const std::vector<std::int64_t> dims{3, 50};
  const auto zero_ratio = run_dropout(0.0f, true, 7, dims), inference = run_dropout(0.6f, false, 7, dims);
  for (const auto *r : {&zero_ratio, &inference}) {
    CHECK(r->y == r->x);
    CHECK(kept_fraction(*r) == 1.0);
  }
  CHECK(zero_ratio.dx == zero_ratio.dy);
  const auto all = run_dropout(1.0f, true, 7, dims);
  CHECK(kept_fraction(all) == 0.0);
  bool zeros = true;
  for (std::size_t i = 0; i < all.y.size(); ++i) zeros = zeros && all.y[i] == 0.0f && all.dx[i] == 0.0f;
  CHECK(zeros);
}

TEST_CASE("a training step through Dropout of ratio 0 made an Identity gives the masked Dropout's loss and gradient") {
  const auto view = zero_dropout_step(false), masked = zero_dropout_step(true);
  CHECK(view.valid);
  CHECK(masked.valid);
  CHECK(std::count(view.forward_types.begin(), view.forward_types.end(), "Identity") == 1);
  CHECK(std::count(view.forward_types.begin(), view.forward_types.end(), "Dropout") == 0);
  CHECK(std::count(masked.forward_types.begin(), masked.forward_types.end(), "Dropout") == 1);
  REQUIRE(view.outputs.size() == 2);
  REQUIRE(masked.outputs.size() == 2);
  CHECK(view.outputs == masked.outputs);  // mask all true and scale 1: bit for bit
}

TEST_CASE("each run of an executor draws a new Dropout mask (step_key), DropoutGrad replays its own run's, and run 0 is the seed's") {
  const std::vector<std::int64_t> dims{5, 203};
  OpGraph b;
  std::mt19937 rng(11);
  const auto xv = random_f32(dims, rng), dyv = random_f32(dims, rng);
  const TensorId x = b.input("x", xv), dy = b.input("dy", dyv);
  const TensorId r = b.constant("ratio", analysis::TensorData::from_double(DType::f32, {}, {0.5}));
  const TensorId t = b.constant("training", ints(DType::boolean, {}, {1}));
  const TensorId y = b.result("y", DType::f32, dims), m = b.result("mask", DType::boolean, dims);
  const TensorId dx = b.result("dx", DType::f32, dims);
  b.op("Dropout", "", {x, r, t}, {y, m}, {{"seed", int_attr(3)}});
  b.op("DropoutGrad", "memplan", {dy, m, r}, {dx});
  HostBackend backend;
  Executor ex(b.g, planner::Plan{}, backend, {.unshared = true});
  const auto mask_of = [&] {
    const auto* p = reinterpret_cast<const std::uint8_t*>(ex.address(m));
    return std::vector<std::uint8_t>(p, p + b.g.tensors[m].bytes());
  };
  std::vector<std::vector<std::uint8_t>> masks;
  for (int run = 0; run < 3; ++run) {
    ex.run(b.feeds);
    masks.push_back(mask_of());
    const auto dxv = as_floats(ex.address(dx), b.g.tensors[dx].bytes());
    const auto dys = as_floats(dyv.bytes.data(), dyv.bytes.size());
    bool replayed = true;  // dx = dy * mask / (1 - ratio) with this run's mask
    for (std::size_t i = 0; i < dxv.size(); ++i) replayed = replayed && dxv[i] == (masks.back()[i] ? dys[i] * 2.0f : 0.0f);
    CHECK(replayed);
  }
  CHECK(masks[0] != masks[1]);
  CHECK(masks[1] != masks[2]);
  const std::uint64_t key = dropout_key(3), threshold = dropout_threshold(0.5f);
  bool first = true;
  for (std::size_t i = 0; i < masks[0].size(); ++i) first = first && (masks[0][i] != 0) == dropout_keep(key, i, threshold);
  CHECK(first);
  Executor again(b.g, planner::Plan{}, backend, {.unshared = true});  // a new executor starts at run 0
  again.run(b.feeds);
  const auto* p = reinterpret_cast<const std::uint8_t*>(again.address(m));
  CHECK(std::vector<std::uint8_t>(p, p + b.g.tensors[m].bytes()) == masks[0]);
  CHECK(random_step() == 0);  // the scope restored this thread's step
}
