// Tests of the kernel tables keyed by the op registry: registered ids, unknown keys, constraint reasons.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "analysis/error.hpp"
#include "runtime_allocator/backend.hpp"
#include "tests/runtime_allocator/op_graph.hpp"

using namespace memplan;
using namespace memplan::runtime;
using analysis::DType;
using analysis::TensorRole;

namespace {

// An ONNX op type the CPU backend has no kernel for (yet): the registry's first such, as kernels keep being added.
std::string first_without_cpu_kernel() {
  const auto cpu = registered_kernels("cpu");
  for (const auto& info : analysis::op_registry().all())
    if (info.domain.empty() && !std::binary_search(cpu.begin(), cpu.end(), info.id)) return std::string(info.type);
  return {};
}

}  // namespace

TEST_CASE("registered_kernels lists each backend's op ids, sorted, without a device") {
  const auto& reg = analysis::op_registry();
  const auto cpu = registered_kernels("cpu");
  CHECK(std::is_sorted(cpu.begin(), cpu.end()));
  CHECK(std::adjacent_find(cpu.begin(), cpu.end()) == cpu.end());
  for (auto id : cpu) CHECK(id < reg.all().size());
  auto has = [&](const std::vector<analysis::OpTypeId>& ids, std::string_view domain, std::string_view type) {
    return std::binary_search(ids.begin(), ids.end(), reg.find(domain, type)->id);
  };
  CHECK(has(cpu, "", "Conv"));
  CHECK(has(cpu, "memplan", "SwapIn"));
  REQUIRE_FALSE(first_without_cpu_kernel().empty());
  CHECK_FALSE(has(cpu, "", first_without_cpu_kernel()));
  const auto cuda = registered_kernels("cuda");
  CHECK(std::is_sorted(cuda.begin(), cuda.end()));
#ifdef MEMPLAN_HAVE_CUDA
  CHECK(has(cuda, "", "MatMul"));
  CHECK_FALSE(has(cuda, "memplan", "SwapIn"));  // the executor copies swaps itself
#else
  CHECK(cuda.empty());
#endif
  CHECK(registered_kernels("tpu").empty());
}

TEST_CASE("a kernel table key the registry does not know fails, naming it") {
  CHECK(kernel_op_id("Relu") == analysis::op_registry().find("", "Relu")->id);
  CHECK(kernel_op_id("memplan::SwapOut") == analysis::op_registry().find("memplan", "SwapOut")->id);
  try {
    (void)kernel_op_id("memplan::NoSuchOp");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::unsupported);
    CHECK(std::string(e.what()).find("memplan::NoSuchOp") != std::string::npos);
  }
}

TEST_CASE("the CPU kernels name the dtype or rank they do not accept") {
  HostBackend host;
  KernelSet& k = host.kernels();
  testing::OpGraph og;
  const auto xi = og.tensor("xi", DType::i64, {4}, TensorRole::input);
  const auto yi = og.result("yi", DType::i64, {4});
  og.op("Relu", "", {xi}, {yi});
  const auto xf = og.tensor("xf", DType::f32, {4}, TensorRole::input);
  const auto yf = og.result("yf", DType::f32, {4});
  og.op("Relu", "", {xf}, {yf});
  const auto a = og.tensor("a", DType::i64, {2, 2}, TensorRole::input);
  const auto s = og.result("s", DType::i64, {2, 2});
  og.op("Add", "", {a, a}, {s});
  const auto x6 = og.tensor("x6", DType::f32, {1, 1, 2, 2, 2, 2}, TensorRole::input);  // 4 spatial axes: past 3
  const auto w6 = og.tensor("w6", DType::f32, {1, 1, 1, 1, 1, 1}, TensorRole::weight);
  const auto y6 = og.result("y6", DType::f32, {1, 1, 2, 2, 2, 2});
  og.op("Conv", "", {x6, w6}, {y6});
  const auto r = og.result("r", DType::f32, {4});
  og.op(first_without_cpu_kernel(), "", {}, {r});  // an op without a CPU kernel (yet)
  const auto& g = og.g;
  CHECK(k.unsupported_reason(g, g.ops[0]) == std::string("dtype ") + analysis::dtype_name(DType::i64) + " of input 0");
  CHECK(k.unsupported_reason(g, g.ops[1]).empty());
  CHECK(k.unsupported_reason(g, g.ops[2]).empty());
  CHECK(k.unsupported_reason(g, g.ops[3]) == "rank 6 above 5 (input 0)");
  CHECK(k.unsupported_reason(g, g.ops[4]) == "no kernel");
}
