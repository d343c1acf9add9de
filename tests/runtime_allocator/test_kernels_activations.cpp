// Tests of the CPU kernels evaluated through fused expressions (Softsign, ThresholdedRelu, Shrink, Sum, Mean,
// Max/Min of three inputs), Softplus at large |x|, embedding Gather with negative indices and Expand whose shape is
// computed from Shape ops.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "analysis/shapes.hpp"
#include "runtime_allocator/executor.hpp"
#include "tests/runtime_allocator/op_graph.hpp"

using namespace memplan;
using namespace memplan::runtime;
using namespace memplan::runtime::testing;
using analysis::DType;
using analysis::TensorData;

namespace {

std::vector<TensorData> run(const OpGraph& b) {
  const analysis::Graph g = analysis::infer_shapes(b.g, {});
  HostBackend backend;
  Executor ex(g, planner::Plan{}, backend, {.unshared = true});
  return ex.run(b.feeds);
}

std::vector<float> f32(const TensorData& t) {
  std::vector<float> v(t.bytes.size() / 4);
  std::memcpy(v.data(), t.bytes.data(), v.size() * 4);
  return v;
}

}  // namespace

TEST_CASE("expression kernels match their definitions with broadcasting") {
  std::mt19937 rng(1);
  OpGraph b;
  b.g.opset = 17;
  const auto x = b.input("x", random_f32({2, 3}, rng, -2.0, 2.0));
  const auto r = b.input("r", random_f32({3}, rng, -2.0, 2.0));
  const auto c = b.input("c", random_f32({2, 1}, rng, -2.0, 2.0));
  const auto big = b.input("big", TensorData::from_double(DType::f32, {4}, {-500.0, -20.0, 20.0, 500.0}));
  std::vector<analysis::TensorId> ys;
  auto unary = [&](const char* type, std::map<std::string, analysis::Attribute> attrs, analysis::TensorId in) {
    ys.push_back(b.result(std::string(type) + std::to_string(ys.size()), DType::f32, in == big ? std::vector<std::int64_t>{4} : std::vector<std::int64_t>{2, 3}));
    b.op(type, "", {in}, {ys.back()}, std::move(attrs));
  };
  unary("Softsign", {}, x);
  unary("ThresholdedRelu", {{"alpha", float_attr(0.3)}}, x);
  unary("Shrink", {{"lambd", float_attr(0.5)}, {"bias", float_attr(0.25)}}, x);
  unary("Softplus", {}, big);
  for (const char* v : {"Sum", "Mean", "Max", "Min"}) {
    ys.push_back(b.result(std::string(v) + "3", DType::f32, {2, 3}));
    b.op(v, "", {x, r, c}, {ys.back()});
  }
  const auto out = run(b);
  const auto xs = f32(b.feeds[0]), rs = f32(b.feeds[1]), cs = f32(b.feeds[2]);
  for (std::size_t i = 0; i < 6; ++i) {
    const float v = xs[i], w = rs[i % 3], u = cs[i / 3];
    INFO("element " << i);
    CHECK(f32(out[0])[i] == doctest::Approx(v / (1 + std::fabs(v))));
    CHECK(f32(out[1])[i] == (v > 0.3f ? v : 0.0f));
    CHECK(f32(out[2])[i] == doctest::Approx(v < -0.5f ? v + 0.25f : v > 0.5f ? v - 0.25f : 0.0f));
    CHECK(f32(out[4])[i] == doctest::Approx(v + w + u));
    CHECK(f32(out[5])[i] == doctest::Approx((v + w + u) / 3));
    CHECK(f32(out[6])[i] == std::max({v, w, u}));
    CHECK(f32(out[7])[i] == std::min({v, w, u}));
  }
  const auto sp = f32(out[3]);
  CHECK(sp[0] == doctest::Approx(0.0));
  CHECK(sp[1] == doctest::Approx(std::log1p(std::exp(-20.0))));
  CHECK(sp[2] == doctest::Approx(20.0));
  CHECK(sp[3] == doctest::Approx(500.0));  // log1p(exp(500)) overflowed before
}

TEST_CASE("embedding Gather of int64 ids with negative indices picks rows from the end") {
  OpGraph b;
  b.g.opset = 17;
  std::vector<double> table(5 * 3);
  for (std::size_t i = 0; i < table.size(); ++i) table[i] = static_cast<double>(i);
  const auto w = b.constant("embedding", TensorData::from_double(DType::f32, {5, 3}, table));
  const auto ids = b.input("ids", ints(DType::i64, {2, 2}, {0, -1, 4, -5}));
  const auto y = b.result("y", DType::f32, {2, 2, 3});
  b.op("Gather", "", {w, ids}, {y});
  const auto v = f32(run(b)[0]);
  const std::vector<float> want{0, 1, 2, 12, 13, 14, 12, 13, 14, 0, 1, 2};
  CHECK(v == want);
}

TEST_CASE("Expand to a shape computed from Shape ops is inferred, and the kernel reads it") {
  std::mt19937 rng(2);
  OpGraph b;
  b.g.opset = 17;
  const auto x = b.input("x", random_f32({3, 1}, rng));
  const auto like = b.input("like", random_f32({2, 3, 4}, rng));
  const auto shape = b.tensor("shape", DType::i64, {3}, analysis::TensorRole::activation);
  b.op("Shape", "", {like}, {shape});
  const auto y = b.result("y", DType::f32, {});
  b.op("Expand", "", {x, shape}, {y});
  const auto g = analysis::infer_shapes(b.g, {});
  CHECK(g.tensors[y].shape() == std::vector<std::int64_t>{2, 3, 4});
  const auto out = run(b);
  const auto xs = f32(b.feeds[0]), v = f32(out[0]);
  REQUIRE(v.size() == 24);
  for (std::size_t i = 0; i < 24; ++i) CHECK(v[i] == xs[(i / 4) % 3]);
}
