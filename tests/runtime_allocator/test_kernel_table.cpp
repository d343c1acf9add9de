// Tests of the kernel tables keyed by the op registry: registered ids, unknown keys, constraint reasons.
#include <doctest/doctest.h>

#include <algorithm>

#include "analysis/error.hpp"
#include "runtime_allocator/backend.hpp"
#include "tests/runtime_allocator/op_graph.hpp"

using namespace memplan;
using namespace memplan::runtime;
using analysis::DType;
using analysis::TensorRole;

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
  CHECK_FALSE(has(cpu, "", "BitShift"));
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
  const auto x5 = og.tensor("x5", DType::f32, {1, 1, 2, 2, 2}, TensorRole::input);
  const auto w5 = og.tensor("w5", DType::f32, {1, 1, 1, 1, 1}, TensorRole::weight);
  const auto y5 = og.result("y5", DType::f32, {1, 1, 2, 2, 2});
  og.op("Conv", "", {x5, w5}, {y5});
  const auto r = og.result("r", DType::f32, {4});
  og.op("BitShift", "", {}, {r});  // an op without a CPU kernel (yet)
  const auto& g = og.g;
  CHECK(k.unsupported_reason(g, g.ops[0]) == std::string("dtype ") + analysis::dtype_name(DType::i64) + " of input 0");
  CHECK(k.unsupported_reason(g, g.ops[1]).empty());
  CHECK(k.unsupported_reason(g, g.ops[2]).empty());
  CHECK(k.unsupported_reason(g, g.ops[3]) == "rank 5 above 4 (input 0)");
  CHECK(k.unsupported_reason(g, g.ops[4]) == "no kernel");
}
