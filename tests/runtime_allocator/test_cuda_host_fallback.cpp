// GPU tests of the CUDA backend's host fallback (CudaOptions::host_fallback): an op no CUDA kernel takes runs on the
// CPU kernels between the device's ops, with the CPU executor's results; exit 77 (skipped) without a device.
#include <doctest/doctest.h>

#ifdef MEMPLAN_HAVE_CUDA
#include <cstdlib>
#include <random>

#include "analysis/error.hpp"
#include "runtime_allocator/cuda/cuda_kernels.hpp"
#include "tests/runtime_allocator/cuda_compare.hpp"
#include "tests/runtime_allocator/op_graph.hpp"

using namespace memplan;
using namespace memplan::runtime::testing;
using analysis::DType;
using analysis::TensorId;

namespace {

// x -> Relu (a CUDA kernel) -> ReduceL2 over everything (none) -> Mul by itself (CUDA again); integer a / b (none).
struct Fallback {
  OpGraph b;
  TensorId norm2 = 0, quotient = 0, relu = 0;
  Fallback() {
    std::mt19937 rng(3);
    const TensorId x = b.input("x", random_f32({64, 33}, rng, -1.0, 1.0));
    const TensorId a = b.input("a", ints(DType::i64, {6}, {7, -7, 100, 3, 0, 9}));
    const TensorId d = b.input("d", ints(DType::i64, {6}, {2, 2, 7, -3, 5, 9}));
    relu = b.result("relu", DType::f32, {64, 33});
    const TensorId norm = b.result("norm", DType::f32, {1, 1});
    norm2 = b.result("norm2", DType::f32, {1, 1});
    quotient = b.result("quotient", DType::i64, {6});
    b.op("Relu", "", {x}, {relu});
    b.op("ReduceL2", "", {relu}, {norm});
    b.op("Mul", "", {norm, norm}, {norm2});
    b.op("Div", "", {a, d}, {quotient});
    b = shaped(std::move(b));
  }
};

}  // namespace

TEST_CASE("host fallback: ops no CUDA kernel takes run on the CPU kernels between the GPU's, reported, refused without it") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  Fallback f;
  // The premise: CUDA has no kernel for these two (one day it may: then pick other ops here).
  REQUIRE_FALSE(runtime::cuda::cuda_unsupported_reason(f.b.g, f.b.g.ops[1]).empty());
  REQUIRE_FALSE(runtime::cuda::cuda_unsupported_reason(f.b.g, f.b.g.ops[3]).empty());
  REQUIRE(runtime::cuda::cuda_unsupported_reason(f.b.g, f.b.g.ops[0]).empty());

  runtime::HostBackend host;
  runtime::Executor cpu(f.b.g, planner::Plan{}, host, runtime::ExecOptions{.unshared = true});
  cpu.run(f.b.feeds);
  const auto ip = planner::plan_inference(f.b.g);
  std::map<std::string, analysis::TensorData> feed;
  for (std::size_t k = 0; k < f.b.feeds.size(); ++k) feed[f.b.g.tensors[f.b.g.inputs[k]].name] = f.b.feeds[k];

  SUBCASE("with host_fallback the plan runs and equals the CPU executor") {
    runtime::cuda::CudaBackend gpu_backend(runtime::cuda::CudaOptions{.host_fallback = true});
    runtime::Executor gpu(f.b.g, ip.plan, gpu_backend);
    gpu.run(feed);
    for (TensorId t : {f.relu, f.norm2}) {
      const auto got = gpu.read(t);
      CHECK(max_rel_diff(floats(got.bytes.data(), got.bytes.size()), floats(cpu.address(t), f.b.g.tensors[t].bytes())) <= 1e-5);
    }
    const auto q = gpu.read(f.quotient);
    CHECK(q.bytes == std::vector<std::byte>(cpu.address(f.quotient), cpu.address(f.quotient) + f.b.g.tensors[f.quotient].bytes()));
    const auto& fb = gpu_backend.host_fallbacks();
    REQUIRE(fb.size() == 2);
    CHECK(fb[0].type == "ReduceL2");
    CHECK(fb[1].type == "Div");
    CHECK_FALSE(fb[0].why.empty());
    // A second run takes the same path (the ops stay on the host, reported once).
    gpu.run(feed);
    CHECK(gpu_backend.host_fallbacks().size() == 2);
    const auto again = gpu.read(f.norm2);
    CHECK(max_rel_diff(floats(again.bytes.data(), again.bytes.size()), floats(cpu.address(f.norm2), 4)) <= 1e-5);
  }
  SUBCASE("without it the executor refuses the plan, naming the op") {
    runtime::cuda::CudaBackend gpu_backend;
    try {
      runtime::Executor gpu(f.b.g, ip.plan, gpu_backend);
      FAIL("the executor took a plan with ops no CUDA kernel runs");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::unsupported);
      CHECK(std::string(e.what()).find("ReduceL2") != std::string::npos);
    }
  }
}

#endif  // MEMPLAN_HAVE_CUDA
