// GPU tests of 1-D and 3-D convolutions, ConvTranspose and N-d pools on the CUDA backend (cuDNN N-d descriptors)
// against the CPU kernels; exit 77 (skipped) without a device.
#include <doctest/doctest.h>

#ifdef MEMPLAN_HAVE_CUDA
#include <cstdlib>
#include <random>

#include "runtime_allocator/cuda/cuda_backend.hpp"
#include "tests/runtime_allocator/cuda_compare.hpp"
#include "tests/runtime_allocator/op_graph.hpp"

using namespace memplan;
using namespace memplan::runtime::testing;
using analysis::DType;
using analysis::TensorId;

TEST_CASE("Conv, ConvTranspose and the Conv gradients over 1-D, 2-D and 3-D windows on the GPU equal the CPU kernels") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  std::mt19937 rng(16);
  OpGraph b;
  // 3-D: groups, strides, dilations, symmetric pads and a bias.
  const std::map<std::string, analysis::Attribute> conv3{{"group", int_attr(2)},
                                                         {"strides", ints_attr({1, 2, 2})},
                                                         {"dilations", ints_attr({2, 1, 1})},
                                                         {"pads", ints_attr({2, 1, 1, 2, 1, 1})}};
  const TensorId x3 = b.input("x3", random_f32({2, 4, 5, 6, 7}, rng));
  const TensorId w3 = b.input("w3", random_f32({6, 2, 3, 3, 3}, rng));
  const TensorId b3 = b.input("b3", random_f32({6}, rng));
  const TensorId y3 = b.result("y3", DType::f32, {2, 6, 5, 3, 4});
  b.op("Conv", "", {x3, w3, b3}, {y3}, conv3);
  const TensorId dy3 = b.input("dy3", random_f32({2, 6, 5, 3, 4}, rng));
  const TensorId dx3 = b.result("dx3", DType::f32, {2, 4, 5, 6, 7});
  b.op("ConvGradInput", "memplan", {dy3, w3}, {dx3}, conv3);
  const TensorId dw3 = b.result("dw3", DType::f32, {6, 2, 3, 3, 3});
  b.op("ConvGradWeight", "memplan", {dy3, x3}, {dw3}, conv3);
  // 1-D: stride 2, dilation 2.
  const TensorId x1 = b.input("x1", random_f32({2, 3, 9}, rng));
  const TensorId w1 = b.input("w1", random_f32({4, 3, 3}, rng));
  const TensorId y1 = b.result("y1", DType::f32, {2, 4, 4});
  b.op("Conv", "", {x1, w1}, {y1}, {{"strides", ints_attr({2})}, {"pads", ints_attr({1, 1})}, {"dilations", ints_attr({2})}});
  // ConvTranspose (cuDNN's backward data): 2-D with groups, output_padding and a bias; 3-D; 1-D dilated.
  const TensorId tx2 = b.input("tx2", random_f32({2, 4, 3, 3}, rng));
  const TensorId tw2 = b.input("tw2", random_f32({4, 3, 3, 3}, rng));
  const TensorId tb2 = b.input("tb2", random_f32({6}, rng));
  const TensorId ty2 = b.result("ty2", DType::f32, {2, 6, 6, 6});
  b.op("ConvTranspose", "", {tx2, tw2, tb2}, {ty2},
       {{"group", int_attr(2)}, {"strides", ints_attr({2, 2})}, {"pads", ints_attr({1, 1, 1, 1})}, {"output_padding", ints_attr({1, 1})}});
  const TensorId tx3 = b.input("tx3", random_f32({1, 2, 2, 3, 2}, rng));
  const TensorId tw3 = b.input("tw3", random_f32({2, 3, 2, 2, 3}, rng));
  const TensorId ty3 = b.result("ty3", DType::f32, {1, 3, 4, 4, 5});
  b.op("ConvTranspose", "", {tx3, tw3}, {ty3}, {{"strides", ints_attr({2, 1, 2})}});
  const TensorId tx1 = b.input("tx1", random_f32({2, 3, 4}, rng));
  const TensorId tw1 = b.input("tw1", random_f32({3, 2, 3}, rng));
  const TensorId tb1 = b.input("tb1", random_f32({2}, rng));
  const TensorId ty1 = b.result("ty1", DType::f32, {2, 2, 12});
  b.op("ConvTranspose", "", {tx1, tw1, tb1}, {ty1}, {{"strides", ints_attr({3})}, {"pads", ints_attr({1, 1})}, {"dilations", ints_attr({2})}});
  check_against_cpu(b, {y3, dx3, dw3, y1, ty2, ty3, ty1}, 1e-4);
}

TEST_CASE("MaxPool and AveragePool over 1-D, 2-D and 3-D windows on the GPU equal the CPU kernels") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  std::mt19937 rng(17);
  OpGraph b;
  // 3-D through cuDNN's N-d pooling: symmetric pads, both counts of the average.
  const std::map<std::string, analysis::Attribute> win3{{"kernel_shape", ints_attr({3, 2, 3})},
                                                        {"strides", ints_attr({2, 2, 2})},
                                                        {"pads", ints_attr({1, 0, 1, 1, 0, 1})}};
  const TensorId x3 = b.input("x3", random_f32({2, 3, 6, 5, 7}, rng));
  const TensorId m3 = b.result("m3", DType::f32, {2, 3, 3, 2, 4});
  b.op("MaxPool", "", {x3}, {m3}, win3);
  std::vector<TensorId> checked{m3};
  for (const std::int64_t include : {0, 1}) {
    auto a = win3;
    a["count_include_pad"] = int_attr(include);
    const TensorId y = b.result("a3_" + std::to_string(include), DType::f32, {2, 3, 3, 2, 4});
    b.op("AveragePool", "", {x3}, {y}, a);
    checked.push_back(y);
  }
  // 2-D ceil_mode (the own kernel: cuDNN floors), 1-D dilated MaxPool with Indices.
  const TensorId x2 = b.input("x2", random_f32({2, 3, 8, 8}, rng));
  const TensorId a2 = b.result("a2", DType::f32, {2, 3, 4, 4});
  b.op("AveragePool", "", {x2}, {a2}, {{"kernel_shape", ints_attr({3, 3})}, {"strides", ints_attr({2, 2})}, {"ceil_mode", int_attr(1)}});
  const TensorId x1 = b.input("x1", random_f32({2, 3, 11}, rng));
  const TensorId m1 = b.result("m1", DType::f32, {2, 3, 6});
  const TensorId i1 = b.result("i1", DType::i64, {2, 3, 6});
  b.op("MaxPool", "", {x1}, {m1, i1},
       {{"kernel_shape", ints_attr({3})}, {"strides", ints_attr({2})}, {"dilations", ints_attr({2})}, {"pads", ints_attr({2, 2})}});
  checked.insert(checked.end(), {a2, m1, i1});
  // 3-D through the own kernels: a dilated MaxPool with Indices, a ceil_mode AveragePool with asymmetric pads.
  const TensorId x3d = b.input("x3d", random_f32({2, 2, 7, 6, 5}, rng));
  const TensorId m3d = b.result("m3d", DType::f32, {2, 2, 3, 3, 2});
  const TensorId i3d = b.result("i3d", DType::i64, {2, 2, 3, 3, 2});
  b.op("MaxPool", "", {x3d}, {m3d, i3d},
       {{"kernel_shape", ints_attr({2, 2, 2})}, {"strides", ints_attr({2, 2, 2})}, {"dilations", ints_attr({2, 1, 2})},
        {"pads", ints_attr({1, 0, 1, 0, 1, 0})}});
  const TensorId a3d = b.result("a3d", DType::f32, {2, 2, 4, 3, 3});
  b.op("AveragePool", "", {x3d}, {a3d},
       {{"kernel_shape", ints_attr({2, 3, 2})}, {"strides", ints_attr({2, 2, 2})}, {"pads", ints_attr({1, 1, 0, 0, 0, 1})},
        {"ceil_mode", int_attr(1)}, {"count_include_pad", int_attr(1)}});
  checked.insert(checked.end(), {m3d, i3d, a3d});
  check_against_cpu(b, checked, 1e-5);
}

TEST_CASE("AveragePoolGrad and MaxPoolGrad over 3-D windows on the GPU equal the CPU kernels") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  std::mt19937 rng(18);
  OpGraph b;
  const std::map<std::string, analysis::Attribute> win{{"kernel_shape", ints_attr({3, 2, 3})},
                                                       {"strides", ints_attr({2, 1, 2})},
                                                       {"pads", ints_attr({1, 0, 1, 1, 1, 0})},
                                                       {"count_include_pad", int_attr(1)}};
  const TensorId dy = b.input("dy", random_f32({2, 3, 3, 5, 3}, rng));
  const TensorId dx = b.result("dx", DType::f32, {2, 3, 5, 5, 6});
  b.op("AveragePoolGrad", "memplan", {dy}, {dx}, win);
  // MaxPoolGrad from the Indices of a 3-D MaxPool computed in the same graph.
  const TensorId x = b.input("x", random_f32({2, 3, 5, 5, 6}, rng));
  const TensorId y = b.result("y", DType::f32, {2, 3, 3, 5, 3});
  const TensorId idx = b.result("idx", DType::i64, {2, 3, 3, 5, 3});
  auto max_win = win;
  max_win.erase("count_include_pad");
  b.op("MaxPool", "", {x}, {y, idx}, max_win);
  const TensorId dxm = b.result("dxm", DType::f32, {2, 3, 5, 5, 6});
  b.op("MaxPoolGrad", "memplan", {dy, x, idx}, {dxm}, max_win);
  check_against_cpu(b, {dx, y, idx, dxm}, 1e-5);
}
#endif
