// Tests of the CPU kernels of runtime_allocator/kernels/kernels_indexing.cpp against hand-computed values: Pad in every mode
// with crops, GatherElements and its gradient, Range, and RandomUniformLike's reproducible draws.
#include <doctest/doctest.h>

#include <cstring>
#include <map>

#include "runtime_allocator/executor.hpp"
#include "runtime_allocator/kernels/random_uniform.hpp"
#include "tests/runtime_allocator/op_graph.hpp"

using namespace memplan;
using namespace memplan::runtime;
using namespace memplan::runtime::testing;
using analysis::DType;
using analysis::TensorData;
using analysis::TensorId;

namespace {

std::vector<double> iota(std::size_t n) {
  std::vector<double> v(n);
  for (std::size_t k = 0; k < n; ++k) v[k] = static_cast<double>(k);
  return v;
}

// Runs b on the CPU executor and returns tensor t's values as doubles (float32, float64 or int64).
std::vector<double> run_values(const OpGraph& b, TensorId t) {
  HostBackend backend;
  Executor ex(b.g, planner::Plan{}, backend, {.unshared = true});
  ex.run(b.feeds);
  const auto& x = b.g.tensors[t];
  TensorData d{x.dtype, x.shape(), std::vector<std::byte>(ex.address(t), ex.address(t) + x.bytes())};
  return d.as_double();
}

// Pad of [[0 1 2] [3 4 5]] by pads (begin0, begin1, end0, end1) in `mode`.
std::vector<double> pad2x3(const std::string& mode, std::vector<std::int64_t> pads, std::vector<std::int64_t> out) {
  OpGraph b;
  const TensorId x = b.input("x", TensorData::from_double(DType::f32, {2, 3}, iota(6)));
  const TensorId p = b.constant("pads", ints(DType::i64, {4}, pads));
  const TensorId y = b.result("y", DType::f32, out);
  b.op("Pad", "", {x, p}, {y}, {{"mode", string_attr(mode)}});
  return run_values(b, y);
}

}  // namespace

TEST_CASE("Pad on the CPU pads and crops in constant, reflect, edge and wrap modes as ONNX defines them") {
  // Rows: one before; columns: one cropped at the start, two added at the end.
  CHECK(pad2x3("constant", {1, -1, 0, 2}, {3, 4}) == std::vector<double>{0, 0, 0, 0, 1, 2, 0, 0, 4, 5, 0, 0});
  CHECK(pad2x3("reflect", {1, -1, 0, 2}, {3, 4}) == std::vector<double>{4, 5, 4, 5, 1, 2, 1, 2, 4, 5, 4, 5});
  CHECK(pad2x3("edge", {1, -1, 0, 2}, {3, 4}) == std::vector<double>{1, 2, 2, 2, 1, 2, 2, 2, 4, 5, 5, 5});
  CHECK(pad2x3("wrap", {1, -1, 0, 2}, {3, 4}) == std::vector<double>{4, 5, 4, 5, 1, 2, 1, 2, 4, 5, 4, 5});
  CHECK(pad2x3("reflect", {0, 2, 0, 2}, {2, 7}) == std::vector<double>{2, 1, 0, 1, 2, 1, 0, 5, 4, 3, 4, 5, 4, 3});
  CHECK(pad2x3("wrap", {0, 2, 0, 1}, {2, 6}) == std::vector<double>{1, 2, 0, 1, 2, 0, 4, 5, 3, 4, 5, 3});

  // A pad value and axes (opset 18): only the last axis, both sides.
  OpGraph b;
  const TensorId x = b.input("x", TensorData::from_double(DType::f32, {2, 2}, {1, 2, 3, 4}));
  const TensorId p = b.constant("pads", ints(DType::i64, {2}, {1, -1}));
  const TensorId v = b.constant("value", TensorData::from_double(DType::f32, {}, {9}));
  const TensorId axes = b.constant("axes", ints(DType::i64, {1}, {-1}));
  const TensorId y = b.result("y", DType::f32, {2, 2});
  b.op("Pad", "", {x, p, v, axes}, {y});
  CHECK(run_values(b, y) == std::vector<double>{9, 1, 9, 3});
}

TEST_CASE("GatherElements and GatherElementsGrad on the CPU pick and scatter-add along the axis") {
  OpGraph b;
  const TensorId x = b.input("x", TensorData::from_double(DType::f32, {2, 3}, iota(6)));
  const TensorId idx = b.constant("idx", ints(DType::i64, {2, 2}, {2, 0, -1, 1}));
  const TensorId y = b.result("y", DType::f32, {2, 2});
  b.op("GatherElements", "", {x, idx}, {y}, {{"axis", int_attr(1)}});
  const TensorId dy = b.input("dy", TensorData::from_double(DType::f32, {2, 2}, {1, 2, 3, 4}));
  const TensorId same = b.constant("same", ints(DType::i64, {2, 2}, {0, 0, 1, 0}));
  const TensorId dx = b.result("dx", DType::f32, {2, 3});
  b.op("GatherElementsGrad", "memplan", {dy, same}, {dx}, {{"axis", int_attr(0)}});
  CHECK(run_values(b, y) == std::vector<double>{2, 0, 5, 4});
  CHECK(run_values(b, dx) == std::vector<double>{1, 2 + 4, 0, 3, 0, 0});
}

TEST_CASE("Range on the CPU counts from start by delta below limit in int64 and float32") {
  OpGraph b;
  const TensorId s = b.constant("s", ints(DType::i64, {}, {7})), l = b.constant("l", ints(DType::i64, {}, {-2}));
  const TensorId d = b.constant("d", ints(DType::i64, {}, {-3}));
  const TensorId y = b.result("y", DType::i64, {3});
  b.op("Range", "", {s, l, d}, {y});
  CHECK(run_values(b, y) == std::vector<double>{7, 4, 1});
  OpGraph f;
  const TensorId fs = f.constant("s", TensorData::from_double(DType::f32, {}, {0.5}));
  const TensorId fl = f.constant("l", TensorData::from_double(DType::f32, {}, {1.5}));
  const TensorId fd = f.constant("d", TensorData::from_double(DType::f32, {}, {0.25}));
  const TensorId fy = f.result("y", DType::f32, {4});
  f.op("Range", "", {fs, fl, fd}, {fy});
  CHECK(run_values(f, fy) == std::vector<double>{0.5, 0.75, 1.0, 1.25});
}

TEST_CASE("RandomUniformLike on the CPU draws reproducible values in low to high from the seed and element index") {
  const std::vector<std::int64_t> dims{64, 129};
  auto draw = [&](std::map<std::string, analysis::Attribute> attrs, DType dt) {
    OpGraph b;
    const TensorId x = b.input("x", TensorData::from_double(DType::f32, dims, std::vector<double>(64 * 129, 0.0)));
    const TensorId y = b.result("y", dt, dims);
    b.op("RandomUniformLike", "", {x}, {y}, attrs);
    return run_values(b, y);
  };
  const auto a = draw({{"seed", int_attr(3)}, {"low", float_attr(-2.0)}, {"high", float_attr(3.0)}}, DType::f32);
  CHECK(a == draw({{"seed", int_attr(3)}, {"low", float_attr(-2.0)}, {"high", float_attr(3.0)}}, DType::f32));
  CHECK(a != draw({{"seed", int_attr(4)}, {"low", float_attr(-2.0)}, {"high", float_attr(3.0)}}, DType::f32));
  double mean = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i] >= -2.0);
    CHECK(a[i] < 3.0);
    CHECK(a[i] == static_cast<double>(uniform_f32(dropout_key(3), i, -2.0f, 3.0f)));
    mean += a[i] / static_cast<double>(a.size());
  }
  CHECK(mean == doctest::Approx(0.5).epsilon(0.05));
  // Defaults: the fixed seed, [0, 1); float64 through the dtype attribute.
  const auto u = draw({}, DType::f32);
  CHECK(u[0] == static_cast<double>(uniform_f32(dropout_key(kDefaultRandomSeed), 0, 0.0f, 1.0f)));
  const auto w = draw({{"dtype", int_attr(static_cast<std::int64_t>(DType::f64))}}, DType::f64);
  CHECK(w[5] == uniform_f64(dropout_key(kDefaultRandomSeed), 5, 0.0, 1.0));
  for (double e : w) CHECK((e >= 0.0 && e < 1.0));
}

TEST_CASE("integer ReduceSum, ReduceMax, ReduceMin and ReduceProd on the CPU are exact, per axis and over everything") {
  for (DType dt : {DType::i64, DType::i32}) {
    INFO(analysis::dtype_name(dt));
    OpGraph b;
    const TensorId x = b.input("x", ints(dt, {2, 3}, {4, -1, 7, 2, 5, -3}));
    const TensorId sum = b.result("sum", dt, {2, 1}), mx = b.result("max", dt, {1, 3}), mn = b.result("min", dt, {}),
                   prod = b.result("prod", dt, {2});
    b.op("ReduceSum", "", {x, b.input("axes", ints(DType::i64, {1}, {1}))}, {sum});
    b.op("ReduceMax", "", {x}, {mx}, {{"axes", ints_attr({0})}});
    b.op("ReduceMin", "", {x}, {mn}, {{"keepdims", int_attr(0)}});
    b.op("ReduceProd", "", {x}, {prod}, {{"axes", ints_attr({1})}, {"keepdims", int_attr(0)}});
    CHECK(run_values(b, sum) == std::vector<double>{10, 4});
    CHECK(run_values(b, mx) == std::vector<double>{4, 5, 7});
    CHECK(run_values(b, mn) == std::vector<double>{-3});
    CHECK(run_values(b, prod) == std::vector<double>{-28, -30});
  }
}

TEST_CASE("integer Clip on the CPU takes bounds of the input's dtype, an absent one the dtype's range") {
  OpGraph b;
  const TensorId x = b.input("x", ints(DType::i64, {5}, {-9, -1, 0, 3, 12}));
  const TensorId lo = b.input("lo", ints(DType::i64, {}, {-2}));
  const TensorId both = b.result("both", DType::i64, {5}), low_only = b.result("low_only", DType::i64, {5});
  b.op("Clip", "", {x, lo, b.input("hi", ints(DType::i64, {}, {4}))}, {both});
  b.op("Clip", "", {x, lo}, {low_only});
  CHECK(run_values(b, both) == std::vector<double>{-2, -1, 0, 3, 4});
  CHECK(run_values(b, low_only) == std::vector<double>{-2, -1, 0, 3, 12});
}

TEST_CASE("ConstantOfShape on the CPU converts a value of another dtype than its output's (a graph retyped after it)") {
  OpGraph b;
  const TensorId dims = b.input("dims", ints(DType::i64, {1}, {3}));
  const TensorId y = b.result("y", DType::bf16, {3});
  analysis::Attribute v;
  v.kind = analysis::Attribute::Kind::tensor;
  v.t = std::make_shared<TensorData>(TensorData::from_double(DType::f32, {1}, {1.5}));
  b.op("ConstantOfShape", "", {dims}, {y}, {{"value", v}});
  CHECK(run_values(b, y) == std::vector<double>{1.5, 1.5, 1.5});
}

TEST_CASE("OneHot on the CPU: depth inserted at the axis, negative indices from the end, out-of-range ones all off") {
  OpGraph b;
  const TensorId idx = b.input("idx", ints(DType::i64, {2, 2}, {0, 2, -1, 5}));
  const TensorId depth = b.constant("depth", ints(DType::i64, {}, {3}));  // a known depth: the output's shape
  const TensorId values = b.input("values", TensorData::from_double(DType::f32, {2}, {-1.0, 7.0}));
  const TensorId last = b.result("last", DType::f32, {2, 2, 3}), first = b.result("first", DType::f32, {3, 2, 2});
  b.op("OneHot", "", {idx, depth, values}, {last});
  b.op("OneHot", "", {idx, depth, values}, {first}, {{"axis", int_attr(0)}});
  const OpGraph s = shaped(b);
  CHECK(s.g.tensors[last].shape() == std::vector<std::int64_t>{2, 2, 3});
  CHECK(s.g.tensors[first].shape() == std::vector<std::int64_t>{3, 2, 2});
  CHECK(run_values(s, last) == std::vector<double>{7, -1, -1, -1, -1, 7, -1, -1, 7, -1, -1, -1});
  CHECK(run_values(s, first) == std::vector<double>{7, -1, -1, -1, -1, -1, -1, -1, -1, 7, 7, -1});
}
