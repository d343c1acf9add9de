// Tests of Einsum's lowering at import (analysis/einsum_lower.cpp): the ops each equation becomes, their inferred
// output shape, the opset-12 attribute forms, and the equations left as Einsum.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "analysis/einsum_lower.hpp"
#include "analysis/shapes.hpp"

using namespace memplan;
using namespace memplan::analysis;

namespace {

struct Lowered {
  bool lowered = false;
  std::vector<std::string> types;  // the ops in order
  std::vector<std::int64_t> out;   // the Einsum output's inferred shape
  Graph g;
};

Lowered lower(const std::string& eq, const std::vector<std::vector<std::int64_t>>& shapes, std::int64_t opset = 17) {
  Lowered r;
  r.g.opset = opset;
  Op op;
  op.name = "e";
  op.type = "Einsum";
  op.attrs["equation"] = Attribute{.kind = Attribute::Kind::s, .s = eq};
  for (std::size_t k = 0; k < shapes.size(); ++k) {
    Tensor t;
    t.name = "x" + std::to_string(k);
    t.dtype = DType::f32;
    t.rank_known = true;
    for (auto d : shapes[k]) t.dims.push_back(Dim::of(d));
    t.role = TensorRole::input;
    op.inputs.push_back(r.g.add_tensor(std::move(t)));
    r.g.inputs.push_back(op.inputs.back());
  }
  Tensor y;
  y.name = "y";
  const TensorId yid = r.g.add_tensor(std::move(y));
  r.g.tensors[yid].is_graph_output = true;
  r.g.outputs.push_back(yid);
  op.outputs = {yid};
  r.lowered = lower_einsum(r.g, op, opset);
  if (!r.lowered) return r;
  for (const auto& o : r.g.ops) r.types.push_back(o.type);
  const Graph shaped = infer_shapes(r.g, {});
  r.out = shaped.tensors[shaped.find("y")].shape();
  return r;
}

using Types = std::vector<std::string>;
using Dims = std::vector<std::int64_t>;

}  // namespace

TEST_CASE("Einsum of one contracted letter lowers to a batched MatMul with transposes and size-1 axes") {
  auto r = lower("bhqd,bhkd->bhqk", {{2, 3, 4, 5}, {2, 3, 6, 5}});
  CHECK(r.types == Types{"Transpose", "MatMul"});
  CHECK(r.out == Dims{2, 3, 4, 6});
  r = lower("i,j->ij", {{4}, {5}});
  CHECK(r.types == Types{"Unsqueeze", "Unsqueeze", "MatMul"});
  CHECK(r.out == Dims{4, 5});
  r = lower("bnd,dk->kbn", {{2, 3, 4}, {4, 5}});   // a's two free letters: one rides as a batch axis
  CHECK(r.types == Types{"MatMul", "Transpose"});  // b's missing batch axis broadcast by MatMul
  CHECK(r.out == Dims{5, 2, 3});
  r = lower("bhd,h->bd", {{2, 3, 4}, {3}});  // a vector contracted: n is a size-1 axis squeezed away
  CHECK(r.out == Dims{2, 4});
  CHECK(r.types.back() == "Squeeze");
}

TEST_CASE("Einsum of several contracted letters merges them into one MatMul axis, never the broadcast product") {
  auto r = lower("ij,ij->", {{3, 4}, {3, 4}});
  CHECK(r.types == Types{"Reshape", "Reshape", "Unsqueeze", "Unsqueeze", "MatMul", "Squeeze"});
  CHECK(r.out == Dims{});
  r = lower("aij,ijb->ab", {{2, 3, 4}, {3, 4, 5}});
  CHECK(r.types == Types{"Reshape", "Transpose", "Reshape", "Transpose", "MatMul"});
  CHECK(r.out == Dims{2, 5});
  // An attention output projection (XLNet's ibnd,hnd->ibh): no tensor of i*b*h*n*d elements, only views of the
  // operands, the weight transposed for the MatMul (a stride read in PyTorch) and the product.
  r = lower("ibnd,hnd->ibh", {{16, 2, 4, 8}, {32, 4, 8}});
  CHECK(r.types == Types{"Reshape", "Reshape", "Transpose", "MatMul"});
  CHECK(r.out == Dims{16, 2, 32});
  std::uint64_t largest = 0;
  const Graph shaped = infer_shapes(r.g, {});
  for (const auto& t : shaped.tensors) largest = std::max<std::uint64_t>(largest, t.element_count());
  CHECK(largest == 16 * 2 * 32);
  r = lower("bkj,jbk->b", {{2, 3, 4}, {4, 2, 3}});  // the contracted letters in another order in each operand
  CHECK(r.out == Dims{2});
}

TEST_CASE("Einsum of one operand transposes and sums") {
  auto r = lower("ijk->kij", {{3, 4, 5}});
  CHECK(r.types == Types{"Transpose"});
  CHECK(r.out == Dims{5, 3, 4});
  r = lower("ij", {{3, 4}});  // implicit output: the letters seen once, sorted
  CHECK(r.types == Types{"Identity"});
  CHECK(r.out == Dims{3, 4});
  r = lower("ij->j", {{3, 4}}, 12);  // opset 12: ReduceSum's axes an attribute
  CHECK(r.types == Types{"ReduceSum"});
  CHECK(r.g.ops[0].attr_ints("axes") == Dims{0});
  CHECK(r.out == Dims{4});
}

TEST_CASE("Einsum with an ellipsis, a diagonal or three operands is left as it is") {
  CHECK_FALSE(lower("...ij,jk->...ik", {{2, 3, 4}, {4, 5}}).lowered);
  CHECK_FALSE(lower("ii->i", {{3, 3}}).lowered);
  CHECK_FALSE(lower("i,i,i->i", {{3}, {3}, {3}}).lowered);
  CHECK_FALSE(lower("ij,jk->iz", {{2, 3}, {3, 4}}).lowered);  // an output letter no operand has
}
