// Tests of Dropout on the CPU executor: training mode draws a deterministic
// mask (dropout_mask.hpp) that DropoutGrad reuses; inference mode is the
// identity.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <optional>

#include "runtime_allocator/dropout_mask.hpp"
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
