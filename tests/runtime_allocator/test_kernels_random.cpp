// Tests of the random ops' CPU kernels: the portable log, normal and Bernoulli draws' statistics, the ops'
// values as functions of (seed, step, index), shapes from attributes.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "analysis/shapes.hpp"
#include "runtime_allocator/executor.hpp"
#include "runtime_allocator/kernels/random_normal.hpp"
#include "tests/runtime_allocator/op_graph.hpp"

using namespace memplan;
using namespace memplan::runtime;
using namespace memplan::runtime::testing;
using analysis::DType;
using analysis::TensorData;

namespace {

std::vector<float> f32(const TensorData& t) {
  std::vector<float> v(t.bytes.size() / 4);
  std::memcpy(v.data(), t.bytes.data(), v.size() * 4);
  return v;
}

}  // namespace

TEST_CASE("portable_log is within 2 ulp of the platform's log over many magnitudes") {
  std::mt19937_64 rng(5);
  for (int k = 0; k < 20000; ++k) {
    const double x = std::ldexp(std::uniform_real_distribution<double>(0.5, 1.0)(rng), static_cast<int>(rng() % 128) - 100);
    const double want = std::log(x), got = portable_log(x);
    INFO("x = " << x);
    CHECK(std::fabs(got - want) <= 2.5 * std::fabs(std::nextafter(want, 0.0) - want) + 1e-300);
  }
  CHECK(portable_log(1.0) == 0.0);
}

TEST_CASE("normal draws have mean 0 and variance 1, and differ by key and index") {
  const std::uint64_t key = dropout_key(42);
  double sum = 0, sq = 0, tails = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double z = standard_normal(key, static_cast<std::uint64_t>(i));
    sum += z;
    sq += z * z;
    tails += std::fabs(z) > 1.96 ? 1 : 0;
  }
  CHECK(std::fabs(sum / n) < 0.01);
  CHECK(std::fabs(sq / n - 1.0) < 0.02);
  CHECK(std::fabs(tails / n - 0.05) < 0.004);
  CHECK(standard_normal(key, 7) == standard_normal(key, 7));
  CHECK(standard_normal(key, 7) != standard_normal(dropout_key(43), 7));
  double bern = 0;
  for (int i = 0; i < n; ++i) bern += bernoulli_draw(key, static_cast<std::uint64_t>(i), 0.3) ? 1 : 0;
  CHECK(std::fabs(bern / n - 0.3) < 0.005);
  CHECK_FALSE(bernoulli_draw(key, 3, 0.0));
  CHECK(bernoulli_draw(key, 3, 1.0));
}

TEST_CASE("RandomNormal(Like), RandomUniform and Bernoulli give their (seed, step, index) draws") {
  std::mt19937 rng(3);
  OpGraph b;
  b.g.opset = 17;
  const auto x = b.input("x", random_f32({3, 5}, rng));
  const auto nl = b.result("normal_like", DType::f32, {3, 5}), nn = b.result("normal", DType::f64, {2, 7});
  const auto ru = b.result("uniform", DType::f32, {4, 4}), be = b.result("bernoulli", DType::f32, {3, 5});
  const auto bb = b.result("bernoulli_bool", DType::boolean, {3, 5});
  b.op("RandomNormalLike", "", {x}, {nl}, {{"seed", int_attr(9)}, {"mean", float_attr(2.0)}, {"scale", float_attr(0.5)}});
  b.op("RandomNormal", "", {}, {nn}, {{"shape", ints_attr({2, 7})}, {"dtype", int_attr(11)}, {"seed", int_attr(10)}});
  b.op("RandomUniform", "", {}, {ru}, {{"shape", ints_attr({4, 4})}, {"low", float_attr(-3.0)}, {"high", float_attr(-1.0)}});
  const auto p = b.constant("p", TensorData::from_double(DType::f32, {3, 5}, {0, 1, 0.5, 0.5, 0.5, 0, 1, 0.2, 0.8, 0.5, 0, 1, 0.5, 0.5, 0.5}));
  b.op("Bernoulli", "", {p}, {be}, {{"seed", int_attr(11)}});
  b.op("Bernoulli", "", {p}, {bb}, {{"seed", int_attr(11)}, {"dtype", int_attr(9)}});
  const auto inferred = analysis::infer_shapes(b.g, {});
  CHECK(inferred.tensors[nn].dtype == DType::f64);
  CHECK(inferred.tensors[ru].shape() == std::vector<std::int64_t>{4, 4});
  HostBackend backend;
  Executor ex(inferred, planner::Plan{}, backend, {.unshared = true});
  for (std::uint64_t step : {0u, 1u}) {  // the executor's run count is the random step
    const auto out = ex.run(b.feeds);
    RandomStepScope scope(step);  // the expected draws' step
    const auto normal_like = f32(out[0]), uniform = f32(out[2]), bern = f32(out[3]);
    for (std::size_t i = 0; i < normal_like.size(); ++i) CHECK(normal_like[i] == normal_f32(step_key(9), i, 2.0, 0.5));
    for (std::size_t i = 0; i < 14; ++i) {
      double v;
      std::memcpy(&v, out[1].bytes.data() + 8 * i, 8);
      CHECK(v == normal_f64(step_key(10), i, 0.0, 1.0));
    }
    for (std::size_t i = 0; i < uniform.size(); ++i) {
      CHECK(uniform[i] == uniform_f32(step_key(kDefaultRandomSeed), i, -3.0f, -1.0f));
      CHECK((uniform[i] >= -3.0f && uniform[i] < -1.0f));
    }
    for (std::size_t i = 0; i < bern.size(); ++i) {
      CHECK(bern[i] == (bernoulli_draw(step_key(11), i, static_cast<double>(f32(*inferred.tensors[p].data)[i])) ? 1.0f : 0.0f));
      CHECK(static_cast<float>(static_cast<unsigned char>(out[4].bytes[i])) == bern[i]);
    }
    CHECK(bern[0] == 0.0f);
    CHECK(bern[1] == 1.0f);
  }
}

TEST_CASE("RandomNormal refuses a missing shape, a negative dim and a non-float dtype") {
  for (const auto& attrs : std::vector<std::map<std::string, analysis::Attribute>>{
           {}, {{"shape", ints_attr({2, -1})}}, {{"shape", ints_attr({2})}, {"dtype", int_attr(7)}}}) {
    OpGraph b;
    b.g.opset = 17;
    const auto y = b.result("y", DType::f32, {2});
    b.op("RandomNormal", "", {}, {y}, attrs);
    CHECK_THROWS_AS(analysis::infer_shapes(b.g, {}), Error);
  }
}
