// Shape inference driver: dim binding, error kinds, folding of constant subgraphs and the graph it returns.
#include "test_shapes_util.hpp"

using namespace shapes_test;

namespace {

ShapeOptions dims(DimBindings d) {
  ShapeOptions o;
  o.dims = std::move(d);
  return o;
}

// x[batch, seq, 64] -> Shape -> Gather(0) and Gather(1) -> Unsqueeze -> Concat with [-1, 16] -> Reshape(x).
Builder transformer_head_split() {
  Builder b;
  b.input("x", DType::f32, std::vector<Dim>{Dim::sym("batch"), Dim::sym("seq"), Dim::of(64)});
  b.ints("i0", {0}, {});
  b.ints("i1", {1}, {});
  b.ints("ax0", {0});
  b.ints("tail", {-1, 16});
  b.op("Shape", {"x"}, {"s"});
  b.op("Gather", {"s", "i0"}, {"n"}, {{"axis", ai(0)}});
  b.op("Gather", {"s", "i1"}, {"l"}, {{"axis", ai(0)}});
  b.op("Unsqueeze", {"n", "ax0"}, {"n1"});
  b.op("Unsqueeze", {"l", "ax0"}, {"l1"});
  b.op("Concat", {"n1", "l1", "tail"}, {"target"}, {{"axis", ai(0)}});
  b.op("Reshape", {"x", "target"}, {"y"});
  b.op("Relu", {"y"}, {"z"});
  b.output("z");
  return b;
}

}  // namespace

TEST_CASE("Shape->Gather->Unsqueeze->Concat->Reshape resolves and the shape ops fold away") {
  Builder b = transformer_head_split();
  const Graph g = infer_shapes(b.g, dims({{"batch", 3}, {"seq", 5}}));
  CHECK(shape_of(g, "y") == Shape{3, 5, 4, 16});
  CHECK(shape_of(g, "z") == Shape{3, 5, 4, 16});
  REQUIRE(g.ops.size() == 2);  // only Reshape and Relu remain, in their original order
  CHECK(g.ops[0].type == "Reshape");
  CHECK(g.ops[1].type == "Relu");
  const Tensor& target = g.tensors[g.at("target")];
  CHECK(target.role == TensorRole::weight);
  CHECK(target.producer == kNoOp);
  REQUIRE(target.data);
  CHECK(target.data->as_int64() == std::vector<std::int64_t>{3, 5, -1, 16});
  // Intermediates only the folded ops touched are gone; the input stays.
  CHECK(g.find("s") == kNoTensor);
  CHECK(g.find("n1") == kNoTensor);
  CHECK(g.find("i0") == kNoTensor);
  CHECK(g.find("x") != kNoTensor);
  CHECK_NOTHROW(g.validate());
}

TEST_CASE("the input graph is left untouched and a different binding gives different shapes") {
  Builder b = transformer_head_split();
  const std::string before = b.g.fingerprint();
  const Graph g1 = infer_shapes(b.g, dims({{"batch", 2}, {"seq", 7}}));
  const Graph g2 = infer_shapes(b.g, dims({{"batch", 8}, {"seq", 1}}));
  CHECK(b.g.fingerprint() == before);
  CHECK(b.g.ops.size() == 8);
  CHECK(shape_of(g1, "z") == Shape{2, 7, 4, 16});
  CHECK(shape_of(g2, "z") == Shape{8, 1, 4, 16});
}

TEST_CASE("fold_max_elements = 0 keeps every op but still resolves the shape arithmetic") {
  Builder b = transformer_head_split();
  ShapeOptions o = dims({{"batch", 3}, {"seq", 5}});
  o.fold_max_elements = 0;
  const Graph g = infer_shapes(b.g, o);
  CHECK(g.ops.size() == b.g.ops.size());
  CHECK(shape_of(g, "z") == Shape{3, 5, 4, 16});
  CHECK(g.tensors[g.at("target")].role == TensorRole::activation);
}

TEST_CASE("an unbound symbol is a shape error naming the symbol and the input") {
  Builder b = transformer_head_split();
  std::string msg;
  CHECK(kind_of([&] { infer_shapes(b.g, dims({{"batch", 3}})); }, &msg) == ErrorKind::shape);
  CHECK(msg.find("'seq'") != std::string::npos);
  CHECK(msg.find("'x'") != std::string::npos);
}

TEST_CASE("bound values below 1 or above 2^40 are usage errors") {
  Builder b = transformer_head_split();
  CHECK(kind_of([&] { infer_shapes(b.g, dims({{"batch", 0}, {"seq", 5}})); }) == ErrorKind::usage);
  CHECK(kind_of([&] { infer_shapes(b.g, dims({{"batch", -4}, {"seq", 5}})); }) == ErrorKind::usage);
  CHECK(kind_of([&] { infer_shapes(b.g, dims({{"batch", (std::int64_t{1} << 40) + 1}, {"seq", 5}})); }) ==
        ErrorKind::usage);
  CHECK_NOTHROW(infer_shapes(b.g, dims({{"batch", std::int64_t{1} << 20}, {"seq", 5}})));
}

TEST_CASE("dims whose product exceeds 2^63 bytes are an overflow error, never a crash") {
  Builder b;
  b.input("a", DType::f32, std::vector<Dim>{Dim::sym("n"), Dim::sym("n")});
  b.op("Relu", {"a"}, {"r"});
  b.output("r");
  CHECK(kind_of([&] { infer_shapes(b.g, dims({{"n", std::int64_t{1} << 40}})); }) == ErrorKind::overflow);

  Builder m;  // each input fits, the MatMul output does not
  m.input("p", DType::f32, std::vector<Dim>{Dim::sym("n"), Dim::of(1)});
  m.input("q", DType::f32, std::vector<Dim>{Dim::of(1), Dim::sym("n")});
  m.op("MatMul", {"p", "q"}, {"pq"});
  m.output("pq");
  CHECK(kind_of([&] { infer_shapes(m.g, dims({{"n", std::int64_t{1} << 32}})); }) == ErrorKind::overflow);

  Builder t;  // a Tile whose repeats multiply past int64
  t.input("v", DType::f32, Shape{1 << 20});
  t.ints("reps", {std::numeric_limits<std::int64_t>::max() / 2});
  t.op("Tile", {"v", "reps"}, {"w"});
  t.output("w");
  CHECK(kind_of([&] { infer_shapes(t.g, {}); }) == ErrorKind::overflow);
}

TEST_CASE("an If without branches is an invalid graph and unknown op types are unsupported, naming node and type") {
  Builder b;
  b.input("a", DType::f32, Shape{2});
  b.op("If", {"a"}, {"r"});
  b.output("r");
  std::string msg;
  CHECK(kind_of([&] { infer_shapes(b.g, {}); }, &msg) == ErrorKind::invalid_graph);
  CHECK(msg.find("If_0") != std::string::npos);
  CHECK(msg.find("then_branch") != std::string::npos);

  Builder u;
  u.input("a", DType::f32, Shape{2});
  u.op("FancyOp", {"a"}, {"r"});
  u.output("r");
  CHECK(kind_of([&] { infer_shapes(u.g, {}); }, &msg) == ErrorKind::unsupported);
  CHECK(msg.find("FancyOp_0") != std::string::npos);
  CHECK(msg.find("(FancyOp)") != std::string::npos);
}

TEST_CASE("a Reshape whose target is computed from activation data is a shape error naming the op") {
  Builder b;
  b.input("a", DType::f32, Shape{4, 6});
  b.input("t", DType::i64, Shape{2});
  b.op("Reshape", {"a", "t"}, {"r"});
  b.output("r");
  std::string msg;
  CHECK(kind_of([&] { infer_shapes(b.g, {}); }, &msg) == ErrorKind::shape);
  CHECK(msg.find("Reshape_0") != std::string::npos);
  CHECK(msg.find("(Reshape)") != std::string::npos);
}

TEST_CASE("declared dims of intermediates are hints: inference overrides a wrong one") {
  Builder b;
  b.input("a", DType::f32, Shape{2, 3});
  b.op("Transpose", {"a"}, {"t"});
  b.output("t");
  b.g.tensors[b.g.at("t")].rank_known = true;
  b.g.tensors[b.g.at("t")].dims = {Dim::of(9), Dim::sym("junk")};
  const Graph g = infer_shapes(b.g, {});
  CHECK(shape_of(g, "t") == Shape{3, 2});
}

TEST_CASE("ops are visited in topological order even when the file lists them out of order") {
  Builder b;
  b.input("a", DType::f32, Shape{2, 3});
  Tensor mid;
  mid.name = "mid";
  b.g.add_tensor(mid);
  b.op("Relu", {"mid"}, {"out"});      // consumer first
  b.op("Transpose", {"a"}, {"mid"});   // producer second
  b.output("out");
  const Graph g = infer_shapes(b.g, {});
  CHECK(shape_of(g, "out") == Shape{3, 2});
  REQUIRE(g.ops.size() == 2);
  CHECK(g.ops[0].type == "Relu");  // file order kept in the result
}

TEST_CASE("Shape of an activation with a known shape is a constant - its data-bearing source is not needed") {
  Builder b;
  b.input("a", DType::f32, Shape{4, 5});
  b.op("Relu", {"a"}, {"r"});
  b.op("Shape", {"r"}, {"s"});
  b.output("s");
  b.output("r");
  const Graph g = infer_shapes(b.g, {});
  const Tensor& s = g.tensors[g.at("s")];
  REQUIRE(s.data);
  CHECK(s.data->as_int64() == std::vector<std::int64_t>{4, 5});
  CHECK(s.role == TensorRole::weight);
  CHECK(s.is_graph_output);
  CHECK(g.ops.size() == 1);
}

TEST_CASE("large constant results are computed at run time, not folded") {
  Builder b;
  b.ints("shape", {300, 300});
  b.op("ConstantOfShape", {"shape"}, {"zeros"});
  b.output("zeros");
  ShapeOptions o;
  o.fold_max_elements = 1000;
  const Graph g = infer_shapes(b.g, o);
  CHECK(g.ops.size() == 1);
  CHECK(shape_of(g, "zeros") == Shape{300, 300});
  CHECK(dtype_of(g, "zeros") == DType::f32);
  CHECK(g.tensors[g.at("zeros")].data == nullptr);
}

TEST_CASE("elementwise ops whose inputs share one type refuse two dtypes at shape inference, naming both") {
  // Found only when the kernel ran before: Add(float32, int64) passed import and planning.
  for (const char* type : {"Add", "Sum", "Max", "PRelu", "Equal"}) {
    CAPTURE(type);
    Builder b;
    b.input("x", DType::f32, Shape{2, 3});
    b.input("k", DType::i64, Shape{2, 3});
    b.op(type, {"x", "k"}, {"y"});
    b.output("y");
    std::string msg;
    CHECK(kind_of([&] { (void)infer_shapes(b.g, {}); }, &msg) == ErrorKind::shape);
    CHECK(msg.find("'k' (int64)") != std::string::npos);
  }
  Builder pow;  // Pow's exponent has a type of its own
  pow.input("x", DType::f32, Shape{2});
  pow.input("e", DType::i64, Shape{2});
  pow.op("Pow", {"x", "e"}, {"y"});
  pow.output("y");
  CHECK(dtype_of(infer_shapes(pow.g, {}), "y") == DType::f32);
}

TEST_CASE("Gather and GatherElements refuse indices that are not int32 or int64 at shape inference") {
  for (const char* type : {"Gather", "GatherElements"}) {
    CAPTURE(type);
    Builder b;
    b.input("data", DType::f32, Shape{4, 3});
    b.input("idx", DType::f32, Shape{4, 3});
    b.op(type, {"data", "idx"}, {"y"});
    b.output("y");
    std::string msg;
    CHECK(kind_of([&] { (void)infer_shapes(b.g, {}); }, &msg) == ErrorKind::shape);
    CHECK(msg.find("'idx' are float32") != std::string::npos);
  }
}
