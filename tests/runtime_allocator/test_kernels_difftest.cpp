// Regressions found by differential testing against ONNX Runtime (bench/difftest.py): each case is a graph whose
// CPU result differed from ORT's or that memplan refused though ONNX defines it, reduced to a few ops.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "planner/inference.hpp"
#include "planner/verify.hpp"
#include "runtime_allocator/executor.hpp"
#include "tests/runtime_allocator/op_graph.hpp"

using namespace memplan;
using namespace memplan::runtime;
using namespace memplan::runtime::testing;
using analysis::DType;
using analysis::TensorData;
using analysis::TensorId;

namespace {

// Tensor t's values after running b on the CPU, unshared or with a verified arena plan.
std::vector<double> run_values(const OpGraph& b, TensorId t, bool planned) {
  HostBackend backend;
  planner::Plan plan;
  if (planned) {
    plan = planner::plan_inference(b.g, {}).plan;
    planner::require_valid(b.g, plan);
  }
  Executor ex(b.g, plan, backend, {.unshared = !planned});
  ex.run(b.feeds);
  const auto& x = b.g.tensors[t];
  TensorData d{x.dtype, x.shape(), std::vector<std::byte>(ex.address(t), ex.address(t) + x.bytes())};
  return d.as_double();
}

}  // namespace

TEST_CASE("Max and Min of three or more broadcast inputs fold every input (difftest: refused 'only two inputs')") {
  for (bool planned : {false, true}) {
    for (const char* type : {"Max", "Min"}) {
      OpGraph b;
      const TensorId x = b.input("x", TensorData::from_double(DType::f32, {2, 3}, {0, 5, -1, 2, -3, 4}));
      const TensorId y = b.input("y", TensorData::from_double(DType::f32, {3}, {1, 1, 1}));
      const TensorId z = b.input("z", TensorData::from_double(DType::f32, {2, 1}, {3, -2}));
      // z's consumer reads a full-shaped input too: an output that shares z's bytes must not clobber it.
      const TensorId w = b.input("w", TensorData::from_double(DType::f32, {2, 3}, {-4, 0, 2, 6, 1, -1}));
      const TensorId out = b.result("out", DType::f32, {2, 3});
      b.op(type, "", {x, y, z, w}, {out});
      const std::vector<double> want = std::string(type) == "Max" ? std::vector<double>{3, 5, 3, 6, 1, 4}
                                                                   : std::vector<double>{-4, 0, -1, -2, -3, -2};
      INFO(type << (planned ? " planned" : " unshared"));
      CHECK(run_values(b, out, planned) == want);
    }
  }
}

namespace {

// op_type(x) for x of special values, run unshared on the CPU.
std::vector<double> unary(const char* type, const std::vector<double>& x, std::map<std::string, analysis::Attribute> attrs = {}) {
  OpGraph b;
  const auto n = static_cast<std::int64_t>(x.size());
  const TensorId in = b.input("x", TensorData::from_double(DType::f32, {n}, x));
  const TensorId out = b.result("y", DType::f32, {n});
  b.op(type, "", {in}, {out}, std::move(attrs));
  return run_values(b, out, false);
}

// Equal as float32 values, NaN where want has NaN.
bool same(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return false;
  for (std::size_t k = 0; k < got.size(); ++k)
    if (std::isnan(want[k]) ? !std::isnan(got[k]) : static_cast<float>(got[k]) != static_cast<float>(want[k])) return false;
  return true;
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
const double kFloatMax = std::numeric_limits<float>::max();

}  // namespace

TEST_CASE("Relu, Sign, HardSigmoid and Celu propagate NaN as ONNX Runtime does (difftest: they returned 0 or 1)") {
  const std::vector<double> x{kNaN, kInf, -kInf, 2, -1};
  CHECK(same(unary("Relu", x), {kNaN, kInf, 0, 2, 0}));
  CHECK(same(unary("Sign", x), {kNaN, 1, -1, 1, -1}));
  CHECK(same(unary("HardSigmoid", x), {kNaN, 1, 0, 0.9, 0.3}));
  const auto celu = unary("Celu", x);
  CHECK(std::isnan(celu[0]));
  CHECK(celu[1] == kInf);
  CHECK(celu[2] == -1.0);
  CHECK(celu[3] == 2.0);
}

TEST_CASE("Clip without bounds clips infinities to the float range's ends (ONNX's lowest()/max() defaults)") {
  CHECK(same(unary("Clip", {kNaN, kInf, -kInf, 1}), {kNaN, kFloatMax, -kFloatMax, 1}));
}

TEST_CASE("ReduceMax and ReduceMin propagate NaN (difftest: NaN was skipped by the comparison)") {
  for (const char* type : {"ReduceMax", "ReduceMin"}) {
    OpGraph b;
    const TensorId x = b.input("x", TensorData::from_double(DType::f32, {2, 3}, {1, kNaN, 3, -kInf, 5, kInf}));
    const TensorId y = b.result("y", DType::f32, {2});
    b.op(type, "", {x}, {y}, {{"axes", ints_attr({1})}, {"keepdims", int_attr(0)}});
    const auto got = run_values(b, y, false);
    INFO(type);
    REQUIRE(got.size() == 2);
    CHECK(std::isnan(got[0]));
    CHECK(got[1] == (std::string(type) == "ReduceMax" ? kInf : -kInf));
  }
}

TEST_CASE("Max, Min and GlobalMaxPool propagate a NaN wherever it sits (difftest: a NaN in a later operand was dropped)") {
  for (const char* type : {"Max", "Min"}) {
    OpGraph b;
    const TensorId x = b.input("x", TensorData::from_double(DType::f32, {3}, {1, kNaN, 2}));
    const TensorId y = b.input("y", TensorData::from_double(DType::f32, {3}, {kNaN, 0, 3}));
    const TensorId z = b.input("z", TensorData::from_double(DType::f32, {3}, {0, 0, kNaN}));
    const TensorId out = b.result("out", DType::f32, {3});
    b.op(type, "", {x, y, z}, {out});
    const auto got = run_values(b, out, false);
    INFO(type);
    CHECK((std::isnan(got[0]) && std::isnan(got[1]) && std::isnan(got[2])));
  }
  OpGraph b;
  const TensorId x = b.input("x", TensorData::from_double(DType::f32, {1, 2, 3}, {1, kNaN, 2, -kInf, 4, 3}));
  const TensorId y = b.result("y", DType::f32, {1, 2, 1});
  b.op("GlobalMaxPool", "", {x}, {y});
  const auto got = run_values(b, y, false);
  CHECK(std::isnan(got[0]));
  CHECK(got[1] == 4.0);
}

TEST_CASE("a float16 tensor with no elements runs widened (difftest: Flatten refused it as a missing input)") {
  OpGraph b;
  const TensorId x = b.input("x", TensorData::from_double(DType::f16, {2, 3}, {1, 2, 3, 4, 5, 6}));
  const TensorId starts = b.constant("starts", ints(DType::i64, {1}, {2}));
  const TensorId ends = b.constant("ends", ints(DType::i64, {1}, {2}));
  const TensorId axes = b.constant("axes", ints(DType::i64, {1}, {1}));
  const TensorId empty = b.tensor("empty", DType::f16, {2, 0}, analysis::TensorRole::activation);
  b.op("Slice", "", {x, starts, ends, axes}, {empty});
  const TensorId flat = b.result("flat", DType::f16, {0, 1});
  b.op("Flatten", "", {empty}, {flat}, {{"axis", int_attr(2)}});
  const TensorId relu = b.result("relu", DType::f16, {2, 0});
  b.op("Relu", "", {empty}, {relu});
  CHECK(run_values(b, flat, false).empty());
  CHECK(run_values(b, relu, true).empty());
}
