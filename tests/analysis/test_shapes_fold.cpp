// Constant folding: the values folded ops produce, checked against hand-computed ONNX semantics.
#include "test_shapes_util.hpp"

using namespace shapes_test;

namespace {

using Ints = std::vector<std::int64_t>;

// Runs `type` on the named constant inputs and returns the folded output's values as int64.
struct Fold {
  Builder b;
  Ints run(const char* type, const std::vector<std::string>& ins, std::map<std::string, Attribute> attrs = {}) {
    b.op(type, ins, {"out"}, std::move(attrs));
    b.output("out");
    const Graph g = infer_shapes(b.g, {});
    const Tensor& t = g.tensors[g.at("out")];
    REQUIRE(t.data != nullptr);
    CHECK(t.producer == kNoOp);
    CHECK(g.ops.empty());
    return t.data->as_int64();
  }
};

}  // namespace

TEST_CASE("integer Div truncates - Mod follows the divisor's sign unless fmod=1 - division by zero is an error") {
  {
    Fold f;
    f.b.ints("a", {7, -7, 7, -7});
    f.b.ints("d", {2, 2, -2, -2});
    CHECK(f.run("Div", {"a", "d"}) == Ints{3, -3, -3, 3});
  }
  {
    Fold f;
    f.b.ints("a", {7, -7, 7, -7});
    f.b.ints("d", {3, 3, -3, -3});
    CHECK(f.run("Mod", {"a", "d"}) == Ints{1, 2, -2, -1});
  }
  {
    Fold f;
    f.b.ints("a", {7, -7});
    f.b.ints("d", {3, 3});
    CHECK(f.run("Mod", {"a", "d"}, {{"fmod", ai(1)}}) == Ints{1, -1});
  }
  Fold z;
  z.b.ints("a", {7});
  z.b.ints("d", {0});
  CHECK(kind_of([&] { z.run("Div", {"a", "d"}); }) == ErrorKind::shape);
}

TEST_CASE("broadcast arithmetic and comparisons fold elementwise") {
  Fold f;
  f.b.ints("a", {1, 2, 3}, {3, 1});
  f.b.ints("c", {10, 20}, {1, 2});
  CHECK(f.run("Add", {"a", "c"}) == Ints{11, 21, 12, 22, 13, 23});
  Fold m;
  m.b.ints("a", {1, 5, 3});
  m.b.ints("c", {4, 4, 4});
  m.b.ints("e", {2}, {});
  CHECK(m.run("Max", {"a", "c", "e"}) == Ints{4, 5, 4});
  Fold l;
  l.b.ints("a", {1, 5, 3});
  l.b.ints("c", {3}, {});
  CHECK(l.run("Less", {"a", "c"}) == Ints{1, 0, 0});
}

TEST_CASE("Where, Equal, Not and Cast fold - Cast from float truncates toward zero") {
  Fold w;
  w.b.ints("x", {10, 20, 30});
  w.b.ints("y", {-1}, {});
  w.b.ints("k", {10, 0, 30});
  w.b.op("Equal", {"x", "k"}, {"cond"});
  CHECK(w.run("Where", {"cond", "x", "y"}) == Ints{10, -1, 30});
  Fold n;
  n.b.ints("x", {0, 3});
  n.b.op("Cast", {"x"}, {"bx"}, {{"to", ai(9)}});
  CHECK(n.run("Not", {"bx"}) == Ints{1, 0});
  Fold c;
  c.b.floats("x", {2.7, -2.7, 0.0});
  CHECK(c.run("Cast", {"x"}, {{"to", ai(7)}}) == Ints{2, -2, 0});
}

TEST_CASE("Range folds with integer and float steps") {
  Fold f;
  f.b.ints("s", {0}, {});
  f.b.ints("l", {10}, {});
  f.b.ints("d", {3}, {});
  CHECK(f.run("Range", {"s", "l", "d"}) == Ints{0, 3, 6, 9});
  Fold down;
  down.b.ints("s", {5}, {});
  down.b.ints("l", {0}, {});
  down.b.ints("d", {-2}, {});
  CHECK(down.run("Range", {"s", "l", "d"}) == Ints{5, 3, 1});
}

TEST_CASE("OneHot folds: depth inserted at the axis, negative indices from the end, out-of-range ones all off") {
  Fold f;
  f.b.ints("i", {1, -1, 7}, {3});
  f.b.ints("d", {3}, {});
  f.b.ints("v", {0, 5}, {2});
  CHECK(f.run("OneHot", {"i", "d", "v"}) == Ints{0, 5, 0, 0, 0, 5, 0, 0, 0});
  Fold first;
  first.b.ints("i", {1, -1, 7}, {3});
  first.b.ints("d", {3}, {});
  first.b.ints("v", {0, 5}, {2});
  CHECK(first.run("OneHot", {"i", "d", "v"}, {{"axis", ai(0)}}) == Ints{0, 0, 0, 5, 0, 0, 0, 5, 0});
}

TEST_CASE("Slice, Gather and Concat move the right elements") {
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  Fold s;
  s.b.ints("x", {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  s.b.ints("st", {-1});
  s.b.ints("en", {kMin});
  s.b.ints("ax", {0});
  s.b.ints("sp", {-2});
  CHECK(s.run("Slice", {"x", "st", "en", "ax", "sp"}) == Ints{9, 7, 5, 3, 1});
  Fold s2;
  s2.b.ints("x", {0, 1, 2, 3, 4, 5}, {2, 3});
  s2.b.ints("st", {1});
  s2.b.ints("en", {3});
  s2.b.ints("ax", {1});
  CHECK(s2.run("Slice", {"x", "st", "en", "ax"}) == Ints{1, 2, 4, 5});
  Fold g;
  g.b.ints("x", {10, 20, 30, 40, 50, 60}, {2, 3});
  g.b.ints("i", {-1, 0});
  CHECK(g.run("Gather", {"x", "i"}, {{"axis", ai(1)}}) == Ints{30, 10, 60, 40});
  Fold oob;
  oob.b.ints("x", {10, 20});
  oob.b.ints("i", {2});
  CHECK(kind_of([&] { oob.run("Gather", {"x", "i"}); }) == ErrorKind::shape);
  Fold c;
  c.b.ints("a", {1, 2}, {2, 1});
  c.b.ints("d", {3, 4, 5, 6}, {2, 2});
  CHECK(c.run("Concat", {"a", "d"}, {{"axis", ai(1)}}) == Ints{1, 3, 4, 2, 5, 6});
}

TEST_CASE("Transpose, Expand, Tile, Unsqueeze and GatherElements fold") {
  Fold t;
  t.b.ints("x", {1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(t.run("Transpose", {"x"}) == Ints{1, 4, 2, 5, 3, 6});
  Fold e;
  e.b.ints("x", {1, 2}, {1, 2});
  e.b.ints("sh", {2, 1});
  CHECK(e.run("Expand", {"x", "sh"}) == Ints{1, 2, 1, 2});
  Fold ti;
  ti.b.ints("x", {1, 2}, {1, 2});
  ti.b.ints("r", {2, 2});
  CHECK(ti.run("Tile", {"x", "r"}) == Ints{1, 2, 1, 2, 1, 2, 1, 2});
  Fold u;
  u.b.ints("x", {7}, {});
  u.b.ints("ax", {0});
  CHECK(u.run("Unsqueeze", {"x", "ax"}) == Ints{7});
  Fold ge;
  ge.b.ints("x", {1, 2, 3, 4}, {2, 2});
  ge.b.ints("i", {1, 0, 0, 0}, {2, 2});
  CHECK(ge.run("GatherElements", {"x", "i"}, {{"axis", ai(1)}}) == Ints{2, 1, 3, 3});
}

TEST_CASE("ReduceProd of a Shape folds to the element count - ConstantOfShape fills its value") {
  Builder b;
  b.input("x", DType::f32, Shape{2, 3, 4});
  b.op("Shape", {"x"}, {"s"});
  b.op("ReduceProd", {"s"}, {"n"}, {{"keepdims", ai(0)}});
  b.op("Shape", {"x"}, {"tail"}, {{"start", ai(1)}});
  Attribute value;
  value.kind = Attribute::Kind::tensor;
  value.t = std::make_shared<TensorData>(TensorData::from_int64(DType::i64, {1}, {5}));
  b.op("ConstantOfShape", {"tail"}, {"fives"}, {{"value", value}});
  b.output("n");
  b.output("fives");
  const Graph g = infer_shapes(b.g, {});
  CHECK(g.tensors[g.at("n")].shape() == Shape{});
  CHECK(g.tensors[g.at("n")].data->as_int64() == Ints{24});
  CHECK(g.tensors[g.at("fives")].shape() == Shape{3, 4});
  CHECK(g.tensors[g.at("fives")].data->as_int64() == Ints(12, 5));
  CHECK(g.ops.empty());
}

TEST_CASE("ops without an evaluator keep their constant inputs and stay in the graph") {
  Builder b;
  b.floats("x", {1.0, 2.0});
  b.op("Erf", {"x"}, {"y"});
  b.output("y");
  const Graph g = infer_shapes(b.g, {});
  CHECK(g.ops.size() == 1);
  CHECK(g.tensors[g.at("y")].data == nullptr);
  CHECK(g.tensors[g.at("y")].shape() == Shape{2});
}
