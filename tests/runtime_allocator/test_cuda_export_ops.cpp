// GPU tests of the ops ONNX training exports needed (issue 31): InstanceNormalization, GroupNormalization and their
// gradient GroupNormGrad (float32 and bf16 data), PadGrad in every mode with crops, cubic Resize and its gradient, and
// NonZero, each against the CPU kernels; exit 77 (skipped) without a device.
#include <doctest/doctest.h>

#ifdef MEMPLAN_HAVE_CUDA
#include <cstdlib>
#include <random>

#include "analysis/shapes.hpp"
#include "runtime_allocator/cuda/cuda_backend.hpp"
#include "tests/runtime_allocator/cuda_compare.hpp"
#include "tests/runtime_allocator/op_graph.hpp"

using namespace memplan;
using namespace memplan::runtime::testing;
using analysis::DType;
using analysis::TensorId;

TEST_CASE("InstanceNormalization, GroupNormalization and GroupNormGrad on the GPU equal the CPU kernels, float32 and bf16 data") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  std::mt19937 rng(31);
  OpGraph b;
  b.g.opset = 21;
  const std::vector<std::int64_t> d{4, 8, 5, 7};
  const TensorId x = b.input("x", random_f32(d, rng, -3.0, 3.0));
  const TensorId dy = b.input("dy", random_f32(d, rng));
  const TensorId s8 = b.input("s8", random_f32({8}, rng)), b8 = b.input("b8", random_f32({8}, rng));
  const TensorId s2 = b.input("s2", random_f32({2}, rng)), b2 = b.input("b2", random_f32({2}, rng));
  const auto groups = [](std::int64_t g) { return std::map<std::string, analysis::Attribute>{{"num_groups", int_attr(g)}}; };
  std::vector<TensorId> checked{b.result("y_in", DType::f32, d), b.result("mean_in", DType::f32, {4, 8, 1, 1}),
                                b.result("invstd_in", DType::f32, {4, 8, 1, 1})};
  b.op("InstanceNormalization", "", {x, s8, b8}, {checked[0], checked[1], checked[2]});
  const TensorId y = b.result("y_gn", DType::f32, d), mean = b.result("mean_gn", DType::f32, {4, 2});
  const TensorId invstd = b.result("invstd_gn", DType::f32, {4, 2});
  b.op("GroupNormalization", "", {x, s8, b8}, {y, mean, invstd}, groups(2));
  checked.insert(checked.end(), {y, mean, invstd, b.result("y_gn18", DType::f32, d)});
  b.op("GroupNormalization", "", {x, s2, b2}, {checked.back()}, groups(2));
  const TensorId dx = b.result("dx", DType::f32, d), ds = b.result("ds", DType::f32, {8}), db = b.result("db", DType::f32, {8});
  b.op("GroupNormGrad", "memplan", {dy, x, s8, mean, invstd}, {dx, ds, db}, groups(2));
  const TensorId dx_in = b.result("dx_in", DType::f32, d);
  b.op("GroupNormGrad", "memplan", {dy, x, s8, checked[1], checked[2]}, {dx_in}, groups(8));
  checked.insert(checked.end(), {dx, ds, db, dx_in});
  // bf16 data beside float32 parameters and statistics, compared after a Cast back to float32.
  const TensorId xb = b.tensor("xb", DType::bf16, d, analysis::TensorRole::activation);
  const TensorId yb = b.tensor("yb", DType::bf16, d, analysis::TensorRole::activation);
  b.op("Cast", "", {x}, {xb}, {{"to", int_attr(16)}});
  b.op("GroupNormalization", "", {xb, s8, b8}, {yb}, groups(4));
  const TensorId y16 = b.result("y_bf16", DType::f32, d);
  b.op("Cast", "", {yb}, {y16}, {{"to", int_attr(1)}});
  check_against_cpu(shaped(b), checked, 1e-4);
  check_against_cpu(shaped(b), {y16}, 1e-2);
}

TEST_CASE("PadGrad in every mode with crops, cubic Resize and its gradient, and NonZero on the GPU equal the CPU kernels") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  std::mt19937 rng(32);
  OpGraph b;
  b.g.opset = 18;
  const TensorId dy = b.input("dy", random_f32({3, 11, 10}, rng));
  std::vector<TensorId> checked;
  for (const char* mode : {"constant", "reflect", "edge", "wrap"}) {
    checked.push_back(b.result(std::string("dx_") + mode, DType::f32, {3, 6, 7}));
    b.op("PadGrad", "memplan", {dy}, {checked.back()}, {{"mode", string_attr(mode)}, {"pads", ints_attr({0, 2, -1, 0, 3, 4})}});
  }
  const TensorId x = b.input("x", random_f32({2, 3, 9, 11}, rng));
  const TensorId roi = b.constant("roi", analysis::TensorData{DType::f32, {0}, {}});
  const TensorId scales = b.constant("scales", analysis::TensorData{DType::f32, {0}, {}});
  const TensorId sizes = b.constant("sizes", ints(DType::i64, {4}, {2, 3, 14, 6}));
  const std::map<std::string, analysis::Attribute> cubic{{"mode", string_attr("cubic")}, {"cubic_coeff_a", float_attr(-0.75)}};
  checked.push_back(b.result("resized", DType::f32, {2, 3, 14, 6}));
  b.op("Resize", "", {x, roi, scales, sizes}, {checked.back()}, cubic);
  const TensorId g = b.input("g", random_f32({2, 3, 14, 6}, rng));
  checked.push_back(b.result("resize_dx", DType::f32, {2, 3, 9, 11}));
  auto grad_attrs = cubic;
  grad_attrs["legacy"] = int_attr(0);
  b.op("ResizeGrad", "memplan", {g, roi, scales, sizes}, {checked.back()}, grad_attrs);
  const TensorId m = b.input("m", ints(DType::i64, {3, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
  checked.push_back(b.result("nonzero", DType::i64, {2, 12}));
  b.op("NonZero", "", {m}, {checked.back()});
  check_against_cpu(shaped(b), checked, 1e-5);
}

#endif
