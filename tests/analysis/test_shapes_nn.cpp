// Shape rules of neural-network ops, checked against the ONNX spec's formulas worked out by hand.
#include "test_shapes_util.hpp"

using namespace shapes_test;

namespace {

Shape conv(Shape x, Shape w, std::map<std::string, Attribute> attrs, const char* type = "Conv") {
  Builder b;
  b.input("x", DType::f32, x);
  b.weight("w", DType::f32, w);
  b.op(type, {"x", "w"}, {"y"}, std::move(attrs));
  b.output("y");
  return shape_of(infer_shapes(b.g, {}), "y");
}

Graph pool(const char* type, Shape x, std::map<std::string, Attribute> attrs, bool indices = false) {
  Builder b;
  b.input("x", DType::f32, x);
  b.op(type, {"x"}, indices ? std::vector<std::string>{"y", "i"} : std::vector<std::string>{"y"}, std::move(attrs));
  b.output("y");
  return infer_shapes(b.g, {});
}

Shape matmul(Shape a, Shape b_shape) {
  Builder b;
  b.input("a", DType::f32, a);
  b.input("b", DType::f32, b_shape);
  b.op("MatMul", {"a", "b"}, {"y"});
  b.output("y");
  return shape_of(infer_shapes(b.g, {}), "y");
}

}  // namespace

TEST_CASE("Conv: pads, strides, dilations, auto_pad and groups follow the ONNX output formula") {
  CHECK(conv({1, 3, 224, 224}, {64, 3, 7, 7}, {{"strides", ais({2, 2})}, {"pads", ais({3, 3, 3, 3})}}) ==
        Shape{1, 64, 112, 112});
  CHECK(conv({2, 3, 225, 10}, {8, 3, 3, 3}, {{"strides", ais({2, 2})}, {"auto_pad", as("SAME_UPPER")}}) ==
        Shape{2, 8, 113, 5});
  CHECK(conv({2, 3, 225, 10}, {8, 3, 3, 3}, {{"strides", ais({2, 2})}, {"auto_pad", as("SAME_LOWER")}}) ==
        Shape{2, 8, 113, 5});
  CHECK(conv({1, 3, 10, 10}, {4, 3, 3, 3}, {{"auto_pad", as("VALID")}, {"dilations", ais({2, 1})}}) == Shape{1, 4, 6, 8});
  CHECK(conv({1, 32, 8, 8}, {32, 1, 3, 3}, {{"group", ai(32)}, {"pads", ais({1, 1, 1, 1})}}) == Shape{1, 32, 8, 8});
  CHECK(conv({4, 6, 50}, {12, 6, 5}, {{"pads", ais({0, 1})}}) == Shape{4, 12, 47});  // Conv1D, asymmetric pads
  std::string msg;
  CHECK(kind_of([] { conv({1, 32, 8, 8}, {32, 2, 3, 3}, {{"group", ai(32)}}); }, &msg) == ErrorKind::shape);
  CHECK(msg.find("[32,2,3,3]") != std::string::npos);
  CHECK(kind_of([] { conv({1, 3, 2, 2}, {4, 3, 5, 5}, {}); }) == ErrorKind::shape);  // kernel larger than input
}

TEST_CASE("ConvTranspose: stride*(in-1) + output_padding + kernel extent - pads - output_shape wins") {
  CHECK(conv({1, 16, 7, 7}, {16, 8, 3, 3},
             {{"strides", ais({2, 2})}, {"pads", ais({1, 1, 1, 1})}, {"output_padding", ais({1, 1})}},
             "ConvTranspose") == Shape{1, 8, 14, 14});
  CHECK(conv({1, 16, 7, 7}, {16, 4, 3, 3}, {{"group", ai(2)}}, "ConvTranspose") == Shape{1, 8, 9, 9});
  CHECK(conv({1, 16, 7, 7}, {16, 8, 3, 3}, {{"strides", ais({2, 2})}, {"auto_pad", as("SAME_UPPER")}},
             "ConvTranspose") == Shape{1, 8, 14, 14});
  CHECK(conv({1, 16, 7, 7}, {16, 8, 3, 3}, {{"strides", ais({2, 2})}, {"output_shape", ais({15, 13})}},
             "ConvTranspose") == Shape{1, 8, 15, 13});
}

TEST_CASE("pooling: floor and ceil modes, the last-window rule, SAME padding, int64 Indices") {
  Graph g = pool("MaxPool", {1, 64, 112, 112},
                 {{"kernel_shape", ais({3, 3})}, {"strides", ais({2, 2})}, {"pads", ais({1, 1, 1, 1})}}, true);
  CHECK(shape_of(g, "y") == Shape{1, 64, 56, 56});
  CHECK(shape_of(g, "i") == Shape{1, 64, 56, 56});
  CHECK(dtype_of(g, "i") == DType::i64);
  // in 6, k 3, s 2: floor gives 2, ceil gives 3.
  CHECK(shape_of(pool("MaxPool", {1, 1, 6}, {{"kernel_shape", ais({3})}, {"strides", ais({2})}}), "y") == Shape{1, 1, 2});
  CHECK(shape_of(pool("MaxPool", {1, 1, 6}, {{"kernel_shape", ais({3})}, {"strides", ais({2})}, {"ceil_mode", ai(1)}}),
                 "y") == Shape{1, 1, 3});
  // in 5, k 2, s 3, end pad 1, ceil: 3 windows by the formula, but the third would start in the end padding.
  CHECK(shape_of(pool("AveragePool", {1, 1, 5},
                      {{"kernel_shape", ais({2})}, {"strides", ais({3})}, {"pads", ais({0, 1})}, {"ceil_mode", ai(1)}}),
                 "y") == Shape{1, 1, 2});
  CHECK(shape_of(pool("AveragePool", {1, 2, 7, 7},
                      {{"kernel_shape", ais({3, 3})}, {"strides", ais({2, 2})}, {"auto_pad", as("SAME_LOWER")}}),
                 "y") == Shape{1, 2, 4, 4});
  CHECK(shape_of(pool("GlobalAveragePool", {2, 8, 5, 5}, {}), "y") == Shape{2, 8, 1, 1});
  CHECK(shape_of(pool("GlobalMaxPool", {2, 8, 5}, {}), "y") == Shape{2, 8, 1});
  CHECK(kind_of([] { pool("MaxPool", {1, 1, 6}, {}); }) == ErrorKind::shape);  // kernel_shape is required
}

TEST_CASE("MatMul: numpy broadcasting of batch dims and the 1-D promotions") {
  CHECK(matmul({2, 1, 3, 4}, {5, 4, 6}) == Shape{2, 5, 3, 6});
  CHECK(matmul({4}, {4}) == Shape{});
  CHECK(matmul({3, 4}, {4}) == Shape{3});
  CHECK(matmul({4}, {2, 4, 5}) == Shape{2, 5});
  std::string msg;
  CHECK(kind_of([] { matmul({2, 3}, {4, 5}); }, &msg) == ErrorKind::shape);
  CHECK(msg.find("[2,3]") != std::string::npos);
  CHECK(msg.find("[4,5]") != std::string::npos);
  CHECK(kind_of([] { matmul({2, 3, 4}, {5, 4, 6}); }) == ErrorKind::shape);  // batch 2 vs 5
}

TEST_CASE("Gemm honours transA/transB and checks C broadcasts to the result") {
  Builder b;
  b.input("a", DType::f32, Shape{4, 3});
  b.weight("w", DType::f32, Shape{5, 4});
  b.weight("c", DType::f32, Shape{5});
  b.op("Gemm", {"a", "w", "c"}, {"y"}, {{"transA", ai(1)}, {"transB", ai(1)}});
  b.output("y");
  CHECK(shape_of(infer_shapes(b.g, {}), "y") == Shape{3, 5});
  b.g.ops[0].attrs.erase("transA");
  CHECK(kind_of([&] { infer_shapes(b.g, {}); }) == ErrorKind::shape);
}

TEST_CASE("LayerNormalization: Mean and InvStdDev are float with the normalized axes set to 1") {
  Builder b;
  b.input("x", DType::f16, Shape{2, 3, 4});
  b.weight("s", DType::f16, Shape{3, 4});
  b.op("LayerNormalization", {"x", "s"}, {"y", "mean", "inv"}, {{"axis", ai(1)}});
  b.output("y");
  const Graph g = infer_shapes(b.g, {});
  CHECK(shape_of(g, "y") == Shape{2, 3, 4});
  CHECK(dtype_of(g, "y") == DType::f16);
  CHECK(shape_of(g, "mean") == Shape{2, 1, 1});
  CHECK(dtype_of(g, "mean") == DType::f32);
  CHECK(shape_of(g, "inv") == Shape{2, 1, 1});
}

TEST_CASE("BatchNormalization in training mode outputs running statistics of shape [C] - Dropout a bool mask") {
  Builder b;
  b.input("x", DType::f32, Shape{8, 16, 4, 4});
  for (const char* n : {"scale", "bias", "mean", "var"}) b.weight(n, DType::f32, Shape{16});
  b.op("BatchNormalization", {"x", "scale", "bias", "mean", "var"}, {"y", "rm", "rv"}, {{"training_mode", ai(1)}});
  b.op("Dropout", {"y"}, {"d", "mask"});
  b.output("d");
  const Graph g = infer_shapes(b.g, {});
  CHECK(shape_of(g, "y") == Shape{8, 16, 4, 4});
  CHECK(shape_of(g, "rm") == Shape{16});
  CHECK(shape_of(g, "rv") == Shape{16});
  CHECK(shape_of(g, "mask") == Shape{8, 16, 4, 4});
  CHECK(dtype_of(g, "mask") == DType::boolean);
  b.g.tensors[b.g.at("var")].dims = {Dim::of(8)};
  CHECK(kind_of([&] { infer_shapes(b.g, {}); }) == ErrorKind::shape);
}

TEST_CASE("Resize and Flatten") {
  Builder b;
  b.input("x", DType::f32, Shape{1, 3, 10, 10});
  b.floats("scales", {1, 1, 2, 1.5});
  b.ints("sizes", {1, 3, 7, 9});
  b.op("Resize", {"x", "", "scales"}, {"up"});
  b.op("Resize", {"x", "", "", "sizes"}, {"sized"});
  b.op("Flatten", {"x"}, {"f1"});
  b.op("Flatten", {"x"}, {"f0"}, {{"axis", ai(0)}});
  b.op("Flatten", {"x"}, {"fl"}, {{"axis", ai(-1)}});
  b.output("up");
  const Graph g = infer_shapes(b.g, {});
  CHECK(shape_of(g, "up") == Shape{1, 3, 20, 15});
  CHECK(shape_of(g, "sized") == Shape{1, 3, 7, 9});
  CHECK(shape_of(g, "f1") == Shape{1, 300});
  CHECK(shape_of(g, "f0") == Shape{1, 300});
  CHECK(shape_of(g, "fl") == Shape{30, 10});
}

TEST_CASE("MaxPool refuses pads as wide as the kernel, as ONNX Runtime and PyTorch do") {
  // A window over padding alone holds no input element: its maximum would be -inf.
  std::string msg;
  CHECK(kind_of([] { pool("MaxPool", {1, 1, 6}, {{"kernel_shape", ais({2})}, {"pads", ais({2, 0})}}); }, &msg) == ErrorKind::shape);
  CHECK(msg.find("kernel_shape") != std::string::npos);
  CHECK(kind_of([] { pool("MaxPool", {1, 1, 6, 6}, {{"kernel_shape", ais({3, 3})}, {"pads", ais({0, 0, 0, 3})}}); }) == ErrorKind::shape);
  CHECK(shape_of(pool("MaxPool", {1, 1, 6}, {{"kernel_shape", ais({3})}, {"pads", ais({2, 2})}}), "y") == Shape{1, 1, 8});
}

TEST_CASE("every pool of every rank refuses pads as wide as the kernel and dilated windows over padding alone") {
  std::string msg;
  CHECK(kind_of([] { pool("MaxPool", {1, 1, 4, 4, 4}, {{"kernel_shape", ais({2, 2, 2})}, {"pads", ais({0, 2, 0, 0, 0, 0})}}); }, &msg) ==
        ErrorKind::shape);
  CHECK(msg.find("kernel_shape") != std::string::npos);
  CHECK(kind_of([] { pool("AveragePool", {1, 1, 6}, {{"kernel_shape", ais({2})}, {"pads", ais({0, 2})}}); }) == ErrorKind::shape);
  CHECK(kind_of([] { pool("LpPool", {1, 1, 6, 6}, {{"kernel_shape", ais({1, 1})}, {"pads", ais({1, 0, 0, 0})}}); }) == ErrorKind::shape);
  // Pads 1 < kernel 2, but with dilation 2 the first window's taps are -1 and 1 over an input of 1: padding alone.
  const auto dilated = [](const char* type, std::int64_t include_pad) {
    pool(type, {1, 1, 1}, {{"kernel_shape", ais({2})}, {"dilations", ais({2})}, {"pads", ais({1, 1})}, {"count_include_pad", ai(include_pad)}});
  };
  CHECK(kind_of([&] { dilated("MaxPool", 0); }, &msg) == ErrorKind::shape);
  CHECK(msg.find("padding only") != std::string::npos);
  CHECK(kind_of([&] { dilated("AveragePool", 0); }) == ErrorKind::shape);
  CHECK_NOTHROW(dilated("AveragePool", 1));  // counted padding: 0 / 2, defined
  CHECK(kind_of([] { pool("MaxPool", {1, 1, 6}, {{"kernel_shape", ais({2})}, {"storage_order", ai(2)}}); }) == ErrorKind::shape);
}

TEST_CASE("ConvTranspose refuses output_padding at the stride and dilation, and a SAME output its kernel cannot reach") {
  CHECK(kind_of([] { conv({1, 2, 3}, {2, 1, 3}, {{"strides", ais({2})}, {"output_padding", ais({2})}}, "ConvTranspose"); }) ==
        ErrorKind::shape);
  CHECK(conv({1, 2, 3}, {2, 1, 3}, {{"strides", ais({1})}, {"dilations", ais({2})}, {"output_padding", ais({1})}}, "ConvTranspose") ==
        Shape{1, 1, 8});
  // kernel 1, stride 2: the transposed convolution reaches 2 * (3 - 1) + 1 = 5 outputs, SAME asks for 6.
  CHECK(kind_of([] { conv({1, 2, 3}, {2, 1, 1}, {{"strides", ais({2})}, {"auto_pad", as("SAME_UPPER")}}, "ConvTranspose"); }) ==
        ErrorKind::shape);
  CHECK(conv({1, 2, 3, 3, 3}, {2, 4, 3, 3, 3}, {{"strides", ais({2, 2, 2})}, {"auto_pad", as("SAME_LOWER")}}, "ConvTranspose") ==
        Shape{1, 4, 6, 6, 6});
}

TEST_CASE("MatMul, Gemm and Conv refuse inputs of two dtypes at shape inference, not when the kernel runs") {
  Builder b;
  b.input("a", DType::f32, Shape{2, 3});
  b.input("b", DType::f64, Shape{3, 4});
  b.op("MatMul", {"a", "b"}, {"y"});
  b.output("y");
  std::string msg;
  CHECK(kind_of([&] { (void)infer_shapes(b.g, {}); }, &msg) == ErrorKind::shape);
  CHECK(msg.find("float64") != std::string::npos);
  Builder c;
  c.input("x", DType::f32, Shape{1, 3, 8, 8});
  c.weight("w", DType::f16, Shape{4, 3, 3, 3});
  c.op("Conv", {"x", "w"}, {"y"});
  c.output("y");
  CHECK(kind_of([&] { (void)infer_shapes(c.g, {}); }) == ErrorKind::shape);
}
