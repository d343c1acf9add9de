// Shape rules of elementwise, data-movement and reducing ops, checked against the ONNX spec by hand.
#include "test_shapes_util.hpp"

using namespace shapes_test;

namespace {

// One op over inputs x (f32, shape given) plus constant int64 inputs; returns the inferred graph.
Graph one(const char* type, Shape x, std::vector<std::vector<std::int64_t>> consts,
          std::map<std::string, Attribute> attrs = {}, std::size_t outputs = 1) {
  Builder b;
  b.input("x", DType::f32, x);
  std::vector<std::string> ins{"x"};
  for (std::size_t k = 0; k < consts.size(); ++k) {
    ins.push_back("c" + std::to_string(k));
    b.ints(ins.back(), consts[k]);
  }
  std::vector<std::string> outs;
  for (std::size_t k = 0; k < outputs; ++k) outs.push_back("y" + std::to_string(k));
  b.op(type, ins, outs, std::move(attrs));
  b.output("y0");
  return infer_shapes(b.g, {});
}

Shape y(const Graph& g, int k = 0) { return shape_of(g, "y" + std::to_string(k)); }

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();

}  // namespace

TEST_CASE("broadcasting ops: numpy rules, dtypes of compare/Where/Cast, mismatches show both shapes") {
  Builder b;
  b.input("a", DType::f32, Shape{3, 1});
  b.input("c", DType::f32, Shape{1, 4});
  b.input("s", DType::f32, Shape{});
  b.input("i", DType::i32, Shape{4});
  b.op("Add", {"a", "c"}, {"sum"});
  b.op("Equal", {"a", "c"}, {"eq"});
  b.op("Where", {"eq", "s", "a"}, {"w"});
  b.op("Cast", {"w"}, {"w64"}, {{"to", ai(7)}});
  b.op("Pow", {"a", "i"}, {"p"});
  b.op("Max", {"a", "c", "s"}, {"m"});
  b.op("IsNaN", {"a"}, {"nan"});
  b.op("Not", {"eq"}, {"neq"});
  b.output("w64");
  const Graph g = infer_shapes(b.g, {});
  CHECK(shape_of(g, "sum") == Shape{3, 4});
  CHECK(dtype_of(g, "eq") == DType::boolean);
  CHECK(shape_of(g, "w") == Shape{3, 4});
  CHECK(dtype_of(g, "w") == DType::f32);
  CHECK(dtype_of(g, "w64") == DType::i64);
  CHECK(shape_of(g, "p") == Shape{3, 4});
  CHECK(dtype_of(g, "p") == DType::f32);
  CHECK(shape_of(g, "m") == Shape{3, 4});
  CHECK(dtype_of(g, "nan") == DType::boolean);
  CHECK(dtype_of(g, "neq") == DType::boolean);

  Builder bad;
  bad.input("a", DType::f32, Shape{2, 3});
  bad.input("b", DType::f32, Shape{4});
  bad.op("Add", {"a", "b"}, {"y"});
  bad.output("y");
  std::string msg;
  CHECK(kind_of([&] { infer_shapes(bad.g, {}); }, &msg) == ErrorKind::shape);
  CHECK(msg.find("[2,3]") != std::string::npos);
  CHECK(msg.find("[4]") != std::string::npos);
}

TEST_CASE("Slice: negative starts, INT64 sentinels, negative steps, attribute form") {
  CHECK(y(one("Slice", {10, 20}, {{-3}, {kMax}, {1}})) == Shape{10, 3});
  CHECK(y(one("Slice", {10, 20}, {{-1}, {kMin}, {0}, {-2}})) == Shape{5, 20});
  CHECK(y(one("Slice", {10, 20}, {{4, 2}, {2, 100}})) == Shape{0, 18});  // empty range
  CHECK(y(one("Slice", {0, 4}, {{-1}, {kMin}, {0}, {-1}})) == Shape{0, 4});  // empty axis, reversed
  CHECK(y(one("Slice", {10, 20}, {}, {{"starts", ais({1})}, {"ends", ais({-1})}, {"axes", ais({1})}})) == Shape{10, 18});
  CHECK(kind_of([] { one("Slice", {10}, {{0}, {5}, {0}, {0}}); }) == ErrorKind::shape);  // step 0
}

TEST_CASE("Gather, GatherElements, Unsqueeze, Squeeze, Concat, Reshape, Expand, Tile, Pad, Transpose") {
  Builder b;
  b.input("x", DType::f32, Shape{5, 6, 7});
  b.input("idx", DType::i64, Shape{2, 3});
  b.op("Gather", {"x", "idx"}, {"g"}, {{"axis", ai(1)}});
  b.input("e", DType::i64, Shape{5, 2, 7});
  b.op("GatherElements", {"x", "e"}, {"ge"}, {{"axis", ai(1)}});
  b.ints("ax", {0, -1});
  b.op("Unsqueeze", {"x", "ax"}, {"u"});
  b.op("Unsqueeze", {"x"}, {"u_attr"}, {{"axes", ais({1})}});
  b.ints("sq", {0, 4});
  b.op("Squeeze", {"u", "sq"}, {"s"});
  b.op("Squeeze", {"u"}, {"s_all"});
  b.op("Concat", {"x", "x", "ge"}, {"cat"}, {{"axis", ai(-2)}});
  b.ints("t", {0, -1, 2, 0});
  b.op("Reshape", {"u", "t"}, {"r"});
  b.ints("shape", {2, 1, 6, 1});
  b.op("Expand", {"x", "shape"}, {"ex"});
  b.ints("reps", {2, 1, 3});
  b.op("Tile", {"x", "reps"}, {"tile"});
  b.ints("pads", {0, 1, 0, 0, 2, 3});
  b.op("Pad", {"x", "pads"}, {"pad"});
  b.op("Transpose", {"x"}, {"tr"}, {{"perm", ais({2, 0, 1})}});
  b.op("Transpose", {"x"}, {"rev"});
  b.output("g");
  const Graph g = infer_shapes(b.g, {});
  CHECK(shape_of(g, "g") == Shape{5, 2, 3, 7});
  CHECK(shape_of(g, "ge") == Shape{5, 2, 7});
  CHECK(shape_of(g, "cat") == Shape{5, 14, 7});
  CHECK(shape_of(g, "u") == Shape{1, 5, 6, 7, 1});
  CHECK(shape_of(g, "u_attr") == Shape{5, 1, 6, 7});
  CHECK(shape_of(g, "s") == Shape{5, 6, 7});
  CHECK(shape_of(g, "s_all") == Shape{5, 6, 7});
  CHECK(kind_of([&] {
          Builder c = b;
          c.g.ops.back().attrs["perm"] = ais({0, 0, 1});
          infer_shapes(c.g, {});
        }) == ErrorKind::shape);
  CHECK(shape_of(g, "r") == Shape{1, 15, 2, 7});  // 0 copies the input dim at that place, -1 takes the rest
  CHECK(shape_of(g, "ex") == Shape{2, 5, 6, 7});
  CHECK(shape_of(g, "tile") == Shape{10, 6, 21});
  CHECK(shape_of(g, "pad") == Shape{5, 9, 10});
  CHECK(shape_of(g, "tr") == Shape{7, 5, 6});
  CHECK(shape_of(g, "rev") == Shape{7, 6, 5});
}

TEST_CASE("Reshape edge cases: allowzero, two -1, element count mismatch shows shapes") {
  CHECK(y(one("Reshape", {0, 4}, {{0, 4}}, {{"allowzero", ai(1)}})) == Shape{0, 4});
  CHECK(kind_of([] { one("Reshape", {2, 6}, {{-1, -1}}); }) == ErrorKind::shape);
  std::string msg;
  CHECK(kind_of([] { one("Reshape", {2, 6}, {{5, 2}}); }, &msg) == ErrorKind::shape);
  CHECK(msg.find("[2,6]") != std::string::npos);
  CHECK(msg.find("[5,2]") != std::string::npos);
}

TEST_CASE("Concat of different ranks is a shape error naming both shapes") {
  Builder b;
  b.input("a", DType::f32, Shape{2, 3});
  b.input("c", DType::f32, Shape{2, 3, 1});
  b.op("Concat", {"a", "c"}, {"y"}, {{"axis", ai(0)}});
  b.output("y");
  std::string msg;
  CHECK(kind_of([&] { infer_shapes(b.g, {}); }, &msg) == ErrorKind::shape);
  CHECK(msg.find("[2,3,1]") != std::string::npos);
  CHECK(msg.find("[2,3]") != std::string::npos);
}

TEST_CASE("Split: by the split input, by num_outputs (last chunk smaller), evenly by output count") {
  Graph a = one("Split", {6, 10}, {{3, 7}}, {{"axis", ai(1)}}, 2);
  CHECK(y(a, 0) == Shape{6, 3});
  CHECK(y(a, 1) == Shape{6, 7});
  Graph n = one("Split", {6, 10}, {}, {{"axis", ai(1)}, {"num_outputs", ai(3)}}, 3);
  CHECK(y(n, 0) == Shape{6, 4});
  CHECK(y(n, 2) == Shape{6, 2});
  Graph e = one("Split", {6, 10}, {}, {}, 2);
  CHECK(y(e, 1) == Shape{3, 10});
  CHECK(kind_of([] { one("Split", {6, 10}, {{3, 3}}, {{"axis", ai(1)}}, 2); }) == ErrorKind::shape);
}

TEST_CASE("Reduce ops: axes as attribute or input, keepdims, noop_with_empty_axes") {
  CHECK(y(one("ReduceMean", {2, 3, 4}, {}, {{"axes", ais({1})}, {"keepdims", ai(0)}})) == Shape{2, 4});
  CHECK(y(one("ReduceMean", {2, 3, 4}, {{-1, 0}})) == Shape{1, 3, 1});  // opset 18 input form
  CHECK(y(one("ReduceSum", {2, 3, 4}, {{-1}})) == Shape{2, 3, 1});
  CHECK(y(one("ReduceSum", {2, 3, 4}, {}, {{"noop_with_empty_axes", ai(1)}})) == Shape{2, 3, 4});
  CHECK(y(one("ReduceSum", {2, 3, 4}, {})) == Shape{1, 1, 1});
  CHECK(y(one("ReduceMax", {2, 3, 4}, {}, {{"keepdims", ai(0)}})) == Shape{});
  Builder b;  // axes computed at run time: the output rank is not derivable
  b.input("x", DType::f32, Shape{2, 3});
  b.input("axes", DType::i64, Shape{1});
  b.op("ReduceSum", {"x", "axes"}, {"y"});
  b.output("y");
  CHECK(kind_of([&] { infer_shapes(b.g, {}); }) == ErrorKind::shape);
}

TEST_CASE("ArgMax, TopK and Einsum") {
  Graph a = one("ArgMax", {3, 10, 2}, {}, {{"axis", ai(1)}, {"keepdims", ai(0)}});
  CHECK(y(a) == Shape{3, 2});
  CHECK(dtype_of(a, "y0") == DType::i64);
  Graph t = one("TopK", {3, 10}, {{5}}, {}, 2);
  CHECK(y(t, 0) == Shape{3, 5});
  CHECK(y(t, 1) == Shape{3, 5});
  CHECK(dtype_of(t, "y0") == DType::f32);
  CHECK(dtype_of(t, "y1") == DType::i64);
  CHECK(kind_of([] { one("TopK", {3, 10}, {{11}}, {}, 2); }) == ErrorKind::shape);

  auto einsum = [](const char* eq, Shape p, Shape q) {
    Builder b;
    b.input("p", DType::f32, p);
    b.input("q", DType::f32, q);
    b.op("Einsum", {"p", "q"}, {"y"}, {{"equation", as(eq)}});
    b.output("y");
    return shape_of(infer_shapes(b.g, {}), "y");
  };
  CHECK(einsum("bij,bjk->bik", {2, 3, 4}, {2, 4, 5}) == Shape{2, 3, 5});
  CHECK(einsum("ij,jk", {3, 4}, {4, 5}) == Shape{3, 5});
  CHECK(einsum("...ij,...jk->...ik", {7, 3, 4}, {4, 5}) == Shape{7, 3, 5});
  CHECK(kind_of([&] { einsum("ij,jk->ik", {3, 4}, {6, 5}); }) == ErrorKind::shape);
}

TEST_CASE("Range, ConstantOfShape and Constant take shapes from constant values") {
  Builder b;
  b.ints("start", {0}, {});
  b.ints("limit", {10}, {});
  b.ints("delta", {3}, {});
  b.op("Range", {"start", "limit", "delta"}, {"r"});
  b.floats("fs", {1.0}, {});
  b.floats("fl", {2.0}, {});
  b.floats("fd", {0.25}, {});
  b.op("Range", {"fs", "fl", "fd"}, {"rf"});
  b.ints("shape", {2, 3});
  Attribute value;
  value.kind = Attribute::Kind::tensor;
  value.t = std::make_shared<TensorData>(TensorData::from_int64(DType::i64, {1}, {7}));
  b.op("ConstantOfShape", {"shape"}, {"cs"}, {{"value", value}});
  b.op("Constant", {}, {"k"}, {{"value_ints", ais({4, 5, 6})}});
  for (const char* out : {"r", "rf", "cs", "k"}) b.output(out);  // folded outputs nobody reads are dropped
  const Graph g = infer_shapes(b.g, {});
  CHECK(shape_of(g, "r") == Shape{4});
  CHECK(shape_of(g, "rf") == Shape{4});
  CHECK(dtype_of(g, "rf") == DType::f32);
  CHECK(shape_of(g, "cs") == Shape{2, 3});
  CHECK(dtype_of(g, "cs") == DType::i64);
  CHECK(shape_of(g, "k") == Shape{3});
}
