// Tests of the CPU windowed kernels over 1 to 3 spatial axes (kernels_conv_nd.cpp, kernels_pool_nd.cpp) against
// hand-computed values: Conv, ConvTranspose (pads, output_padding, output_shape, auto_pad, groups), MaxPool with
// Indices in both storage orders, AveragePool's count_include_pad and ceil_mode, LpPool and the MaxPool gradient.
#include <doctest/doctest.h>

#include "runtime_allocator/executor.hpp"
#include "tests/runtime_allocator/op_graph.hpp"

using namespace memplan;
using namespace memplan::runtime;
using namespace memplan::runtime::testing;
using analysis::Attribute;
using analysis::DType;
using analysis::TensorData;
using analysis::TensorId;
using Dims = std::vector<std::int64_t>;
using Values = std::vector<double>;
using Attrs = std::map<std::string, Attribute>;

namespace {

Values iota(std::size_t n) {
  Values v(n);
  for (std::size_t k = 0; k < n; ++k) v[k] = static_cast<double>(k);
  return v;
}

// One op of `type` on float32 inputs (dims, values), its outputs' dims given (output 1 int64: MaxPool's Indices);
// the values of every output as doubles.
std::vector<Values> run_op(const std::string& type, const std::vector<std::pair<Dims, Values>>& inputs,
                           const std::vector<Dims>& outputs, Attrs attrs, const std::string& domain = "") {
  OpGraph b;
  std::vector<TensorId> in, out;
  for (std::size_t k = 0; k < inputs.size(); ++k)
    in.push_back(b.input("x" + std::to_string(k), TensorData::from_double(DType::f32, inputs[k].first, inputs[k].second)));
  for (std::size_t k = 0; k < outputs.size(); ++k)
    out.push_back(b.result("y" + std::to_string(k), k == 1 && type == "MaxPool" ? DType::i64 : DType::f32, outputs[k]));
  b.op(type, domain, in, out, std::move(attrs));
  HostBackend backend;
  Executor ex(b.g, planner::Plan{}, backend, {.unshared = true});
  ex.run(b.feeds);
  std::vector<Values> values;
  for (TensorId t : out) {
    const auto& x = b.g.tensors[t];
    values.push_back(TensorData{x.dtype, x.shape(), std::vector<std::byte>(ex.address(t), ex.address(t) + x.bytes())}.as_double());
  }
  return values;
}

bool near(const Values& got, const Values& want) {
  if (got.size() != want.size()) return false;
  for (std::size_t k = 0; k < got.size(); ++k)
    if (std::abs(got[k] - want[k]) > 1e-5 * (1.0 + std::abs(want[k]))) return false;
  return true;
}

}  // namespace

TEST_CASE("Conv over 1 and 3 spatial axes: pads, strides, dilations and groups") {
  // 1-D: [1 2 3 4 5] * [1 0 -1], pads 1+1, stride 2.
  CHECK(near(run_op("Conv", {{{1, 1, 5}, {1, 2, 3, 4, 5}}, {{1, 1, 3}, {1, 0, -1}}}, {{1, 1, 3}},
                    {{"pads", ints_attr({1, 1})}, {"strides", ints_attr({2})}})[0],
             {-2, -2, 4}));
  // 3-D, dilation 2 over a 3x3x3 cube: the eight corners 0+2+6+8+18+20+24+26, plus a bias of 1.
  CHECK(near(run_op("Conv", {{{1, 1, 3, 3, 3}, iota(27)}, {{1, 1, 2, 2, 2}, Values(8, 1.0)}, {{1}, {1}}}, {{1, 1, 1, 1, 1}},
                    {{"dilations", ints_attr({2, 2, 2})}})[0],
             {105}));
  // 3-D depthwise (group 2): each channel scaled by its own weight.
  CHECK(near(run_op("Conv", {{{1, 2, 1, 1, 2}, {1, 2, 3, 4}}, {{2, 1, 1, 1, 1}, {10, 100}}}, {{1, 2, 1, 1, 2}},
                    {{"group", int_attr(2)}})[0],
             {10, 20, 300, 400}));
}

TEST_CASE("ConvTranspose scatters each input through the kernel: strides, pads, output_padding, auto_pad, groups") {
  const std::vector<std::pair<Dims, Values>> in{{{1, 1, 2}, {1, 2}}, {{1, 1, 3}, {1, 1, 1}}};
  CHECK(near(run_op("ConvTranspose", in, {{1, 1, 5}}, {{"strides", ints_attr({2})}})[0], {1, 1, 3, 2, 2}));
  CHECK(near(run_op("ConvTranspose", in, {{1, 1, 3}}, {{"strides", ints_attr({2})}, {"pads", ints_attr({1, 1})}})[0], {1, 3, 2}));
  CHECK(near(run_op("ConvTranspose", in, {{1, 1, 6}}, {{"strides", ints_attr({2})}, {"output_padding", ints_attr({1})}})[0],
             {1, 1, 3, 2, 2, 0}));
  auto bias = in;
  bias.push_back({{1}, {0.5}});
  CHECK(near(run_op("ConvTranspose", bias, {{1, 1, 5}}, {{"strides", ints_attr({2})}})[0], {1.5, 1.5, 3.5, 2.5, 2.5}));
  // SAME: output in * stride = 6 of the full 7 ([1 1 3 2 5 3 3]); SAME_UPPER drops the end, SAME_LOWER the start.
  const std::vector<std::pair<Dims, Values>> three{{{1, 1, 3}, {1, 2, 3}}, {{1, 1, 3}, {1, 1, 1}}};
  CHECK(near(run_op("ConvTranspose", three, {{1, 1, 6}}, {{"strides", ints_attr({2})}, {"auto_pad", string_attr("SAME_UPPER")}})[0],
             {1, 1, 3, 2, 5, 3}));
  CHECK(near(run_op("ConvTranspose", three, {{1, 1, 6}}, {{"strides", ints_attr({2})}, {"auto_pad", string_attr("SAME_LOWER")}})[0],
             {1, 3, 2, 5, 3, 3}));
  // output_shape 6 with NOTSET: the odd unit of padding at the beginning (as ONNX Runtime does).
  CHECK(near(run_op("ConvTranspose", three, {{1, 1, 6}}, {{"strides", ints_attr({2})}, {"output_shape", ints_attr({6})}})[0],
             {1, 3, 2, 5, 3, 3}));
  // 2-D, two groups of one channel each.
  CHECK(near(run_op("ConvTranspose", {{{1, 2, 1, 1}, {1, 2}}, {{2, 1, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}}}, {{1, 2, 2, 2}},
                    {{"group", int_attr(2)}})[0],
             {1, 2, 3, 4, 10, 12, 14, 16}));
  // 3-D: one input element times the kernel.
  const Values y3 = run_op("ConvTranspose", {{{1, 1, 1, 1, 1}, {2}}, {{1, 1, 2, 2, 2}, iota(8)}}, {{1, 1, 2, 2, 2}}, {})[0];
  CHECK(near(y3, {0, 2, 4, 6, 8, 10, 12, 14}));
}

TEST_CASE("MaxPool gives the first maximum and its flat index, row- or column-major, in every rank") {
  // 3-D: the maximum 7 sits at (0, 0, 1): row-major 1, column-major (first axis fastest) 1 * 2 * 2 = 4.
  const std::vector<std::pair<Dims, Values>> cube{{{1, 1, 2, 2, 2}, {3, 7, 1, 0, 5, 2, 6, 4}}};
  const Attrs k222{{"kernel_shape", ints_attr({2, 2, 2})}};
  auto row = run_op("MaxPool", cube, {{1, 1, 1, 1, 1}, {1, 1, 1, 1, 1}}, k222);
  CHECK(row[0] == Values{7});
  CHECK(row[1] == Values{1});
  Attrs col = k222;
  col["storage_order"] = int_attr(1);
  CHECK(run_op("MaxPool", cube, {{1, 1, 1, 1, 1}, {1, 1, 1, 1, 1}}, col)[1] == Values{4});
  // 2-D [[1 9 2] [3 4 5]]: 9 at (0, 1) is column-major 0 + 1 * 2.
  const Attrs k23{{"kernel_shape", ints_attr({2, 3})}, {"storage_order", int_attr(1)}};
  CHECK(run_op("MaxPool", {{{1, 1, 2, 3}, {1, 9, 2, 3, 4, 5}}}, {{1, 1, 1, 1}, {1, 1, 1, 1}}, k23)[1] == Values{2});
  // 1-D, dilation 2 with pads 1+1: windows (o-1, o+1).
  const auto d = run_op("MaxPool", {{{1, 1, 5}, {5, 1, 4, 2, 3}}}, {{1, 1, 5}, {1, 1, 5}},
                        {{"kernel_shape", ints_attr({2})}, {"dilations", ints_attr({2})}, {"pads", ints_attr({1, 1})}});
  CHECK(d[0] == Values{1, 5, 2, 4, 2});
  CHECK(d[1] == Values{1, 0, 3, 2, 3});
}

TEST_CASE("MaxPoolGrad scatters dY back through column-major Indices to the row-major element") {
  // The 2-D pool above: Indices 2 (column-major) is element (0, 1), row-major 1.
  OpGraph b;
  const TensorId dy = b.input("dy", TensorData::from_double(DType::f32, {1, 1, 1, 1}, {7}));
  const TensorId x = b.input("x", TensorData::from_double(DType::f32, {1, 1, 2, 3}, iota(6)));
  const TensorId idx = b.input("i", ints(DType::i64, {1, 1, 1, 1}, {2}));
  const TensorId dx = b.result("dx", DType::f32, {1, 1, 2, 3});
  b.op("MaxPoolGrad", "memplan", {dy, x, idx}, {dx}, {{"kernel_shape", ints_attr({2, 3})}, {"storage_order", int_attr(1)}});
  HostBackend backend;
  Executor ex(b.g, planner::Plan{}, backend, {.unshared = true});
  ex.run(b.feeds);
  CHECK(as_floats(ex.address(dx), 24) == std::vector<float>{0, 7, 0, 0, 0, 0});
}

TEST_CASE("AveragePool counts padding only with count_include_pad, and ceil_mode's last window counts what it covers") {
  // 3-D with pads of 1 on both sides of H and W, stride 2: each window holds one element of [[1 2] [3 4]].
  const std::vector<std::pair<Dims, Values>> x{{{1, 1, 1, 2, 2}, {1, 2, 3, 4}}};
  Attrs a{{"kernel_shape", ints_attr({1, 2, 2})}, {"strides", ints_attr({1, 2, 2})}, {"pads", ints_attr({0, 1, 1, 0, 1, 1})}};
  CHECK(near(run_op("AveragePool", x, {{1, 1, 1, 2, 2}}, a)[0], {1, 2, 3, 4}));
  a["count_include_pad"] = int_attr(1);
  CHECK(near(run_op("AveragePool", x, {{1, 1, 1, 2, 2}}, a)[0], {0.25, 0.5, 0.75, 1}));
  // 1-D ceil_mode: windows [1 2], [3 4], [5 (past the end)].
  for (int include : {0, 1})
    CHECK(near(run_op("AveragePool", {{{1, 1, 5}, {1, 2, 3, 4, 5}}}, {{1, 1, 3}},
                      {{"kernel_shape", ints_attr({2})}, {"strides", ints_attr({2})}, {"ceil_mode", int_attr(1)},
                       {"count_include_pad", int_attr(include)}})[0],
               {1.5, 3.5, 5}));
}

TEST_CASE("LpPool and GlobalLpPool take the p-norm of each window") {
  const std::vector<std::pair<Dims, Values>> x{{{1, 1, 2, 2}, {3, -4, 0, 0}}};
  CHECK(near(run_op("LpPool", x, {{1, 1, 2, 1}}, {{"kernel_shape", ints_attr({1, 2})}, {"p", int_attr(2)}})[0], {5, 0}));
  CHECK(near(run_op("LpPool", x, {{1, 1, 2, 1}}, {{"kernel_shape", ints_attr({1, 2})}, {"p", int_attr(1)}})[0], {7, 0}));
  CHECK(near(run_op("GlobalLpPool", {{{1, 1, 1, 2, 1}, {3, 4}}}, {{1, 1, 1, 1, 1}}, {})[0], {5}));
}
