// GPU tests of the norm kernels (RMSNormalization, LayerNormalization and their gradients) against the CPU
// kernels; exit 77 (skipped) without a CUDA device.
#include <doctest/doctest.h>

#ifdef MEMPLAN_HAVE_CUDA

#include <cstdlib>
#include <random>

#include "runtime_allocator/cuda/cuda_context.hpp"
#include "tests/runtime_allocator/cuda_compare.hpp"
#include "tests/runtime_allocator/op_graph.hpp"

using namespace memplan;
using namespace memplan::runtime::testing;
using analysis::DType;
using analysis::TensorId;

namespace {

void require_device() {
  if (!runtime::cuda::cuda_available()) std::exit(77);
}

// Row lengths: below a warp, odd (no float4 path), a multiple of 4, and above one block of threads.
const std::int64_t kWidths[] = {7, 33, 256, 1536};

}  // namespace

TEST_CASE("RMSNormalization and RMSNormGrad on the GPU equal the CPU kernels, with and without a scale") {
  require_device();
  std::mt19937 rng(11);
  for (const std::int64_t n : kWidths)
    for (const bool scaled : {true, false}) {
      CAPTURE(n);
      CAPTURE(scaled);
      OpGraph b;
      const std::vector<std::int64_t> shape{3, 5, n};
      const TensorId x = b.input("x", random_f32(shape, rng, -2.0, 2.0));
      const TensorId s = scaled ? b.input("scale", random_f32({n}, rng, 0.5, 1.5)) : analysis::kNoTensor;
      const TensorId dy = b.input("dy", random_f32(shape, rng));
      const TensorId y = b.result("y", DType::f32, shape), inv = b.result("inv", DType::f32, {3, 5, 1});
      b.op("RMSNormalization", "memplan", {x, s}, {y, inv}, {{"axis", int_attr(-1)}, {"epsilon", float_attr(1e-6)}});
      const TensorId dx = b.result("dx", DType::f32, shape);
      const TensorId ds = scaled ? b.result("dscale", DType::f32, {n}) : analysis::kNoTensor;
      b.op("RMSNormGrad", "memplan", {dy, x, s, inv}, {dx, ds}, {{"axis", int_attr(2)}});
      std::vector<TensorId> checked{y, inv, dx};
      if (scaled) checked.push_back(ds);
      check_against_cpu(b, checked, 1e-4);
    }
}

TEST_CASE("RMSNormalization over two trailing axes on the GPU equals the CPU kernel") {
  require_device();
  std::mt19937 rng(12);
  OpGraph b;
  const TensorId x = b.input("x", random_f32({4, 6, 10}, rng, -2.0, 2.0));
  const TensorId s = b.input("scale", random_f32({6, 10}, rng, 0.5, 1.5));
  const TensorId y = b.result("y", DType::f32, {4, 6, 10}), inv = b.result("inv", DType::f32, {4, 1, 1});
  b.op("RMSNormalization", "memplan", {x, s}, {y, inv}, {{"axis", int_attr(1)}, {"epsilon", float_attr(1e-5)}});
  check_against_cpu(b, {y, inv}, 1e-4);
}

TEST_CASE("LayerNormalization and LayerNormGrad on the GPU equal the CPU kernels") {
  require_device();
  std::mt19937 rng(13);
  for (const std::int64_t n : kWidths) {
    CAPTURE(n);
    OpGraph b;
    // Enough rows that the scale and bias sums span several row chunks of the column reduction.
    const std::vector<std::int64_t> shape{4, 150, n};
    const TensorId x = b.input("x", random_f32(shape, rng, -2.0, 2.0));
    const TensorId s = b.input("scale", random_f32({n}, rng, 0.5, 1.5)), bias = b.input("bias", random_f32({n}, rng));
    const TensorId dy = b.input("dy", random_f32(shape, rng));
    const TensorId y = b.result("y", DType::f32, shape);
    const TensorId mean = b.result("mean", DType::f32, {4, 150, 1}), inv = b.result("inv", DType::f32, {4, 150, 1});
    b.op("LayerNormalization", "", {x, s, bias}, {y, mean, inv}, {{"axis", int_attr(-1)}, {"epsilon", float_attr(1e-5)}});
    const TensorId dx = b.result("dx", DType::f32, shape);
    const TensorId ds = b.result("dscale", DType::f32, {n}), db = b.result("dbias", DType::f32, {n});
    b.op("LayerNormGrad", "memplan", {dy, x, s, mean, inv}, {dx, ds, db}, {{"axis", int_attr(2)}});
    check_against_cpu(b, {y, mean, inv, dx, ds, db}, 1e-4);
  }
}

#endif  // MEMPLAN_HAVE_CUDA
