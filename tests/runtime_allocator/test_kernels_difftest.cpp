// Regressions found by differential testing against ONNX Runtime (bench/difftest.py): each case is a graph whose
// CPU result differed from ORT's or that memplan refused though ONNX defines it, reduced to a few ops.
#include <doctest/doctest.h>

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
