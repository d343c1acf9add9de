// Softmax, LogSoftmax and Hardmax before opset 13 written as the opset-13 op over a 2-D view, once shapes are known.
//
// Opsets 1-12 coerce the input to 2-D at `axis` ([d0 * .. * d(axis-1), d(axis) * .. * d(r-1)]) and normalize each row
// of that matrix: over every trailing axis at once, not along `axis` alone as opset 13 does. Where `axis` is the last
// axis the two agree and the op stays as it is; elsewhere it becomes Flatten(axis) -> op(axis 1) -> Reshape(x's
// shape), two views around an op whose meaning no opset changes, so that kernels (CPU and CUDA), fusion matching
// (the attention and norm patterns see a Flatten and a Reshape, not a softmax over one axis) and backward rules need
// no opset of their own.
#include <algorithm>
#include <string>

#include "analysis/shape_rules.hpp"

namespace memplan::analysis::shape_detail {
namespace {

bool legacy_normalizer(const Graph& g, const Op& op) {
  return g.opset > 0 && g.opset < 13 && (op.domain.empty() || op.domain == "ai.onnx") &&
         (op.type == "Softmax" || op.type == "LogSoftmax" || op.type == "Hardmax") && op.inputs.size() == 1 &&
         op.outputs.size() == 1 && op.inputs[0] != kNoTensor && op.outputs[0] != kNoTensor;
}

std::string fresh_name(const Graph& g, const std::string& base) {
  std::string name = base;
  for (int k = 2; g.find(name) != kNoTensor; ++k) name = base + "#" + std::to_string(k);
  return name;
}

Attribute int_attr(std::int64_t v) {
  Attribute a;
  a.kind = Attribute::Kind::i;
  a.i = v;
  return a;
}

}  // namespace

void lower_legacy_normalizers(Graph& g) {
  std::vector<Op> ops;
  bool changed = false;
  for (Op& op : g.ops) {
    if (!legacy_normalizer(g, op)) {
      ops.push_back(std::move(op));
      continue;
    }
    const Tensor x = g.tensors[op.inputs[0]];
    const Shape dims = x.shape();
    const auto rank = static_cast<std::int64_t>(dims.size());
    const std::int64_t a = op.attr_int("axis", 1);  // the importers spell out opset < 13's default of 1
    if (a < -rank || a >= std::max<std::int64_t>(rank, 1))
      fail(ErrorKind::shape, "op '" + op.name + "' (" + op.type + "): axis " + std::to_string(a) + " is out of range for rank " +
                                 std::to_string(rank) + " (opset " + std::to_string(g.opset) + ")");
    const std::int64_t axis = a < 0 ? a + rank : a;
    if (axis >= rank - 1) {  // the last axis (or a scalar): both semantics agree
      ops.push_back(std::move(op));
      continue;
    }
    changed = true;
    std::int64_t rows = 1, cols = 1;
    for (std::int64_t k = 0; k < rank; ++k) {
      std::int64_t& p = k < axis ? rows : cols;
      if (__builtin_mul_overflow(p, dims[static_cast<std::size_t>(k)], &p))
        fail(ErrorKind::overflow, "op '" + op.name + "' (" + op.type + "): dim arithmetic overflows");
    }
    Tensor flat;
    flat.name = fresh_name(g, x.name + "/" + op.name + "/2d");
    flat.dtype = x.dtype;
    flat.rank_known = true;
    flat.dims = {Dim::of(rows), Dim::of(cols)};
    Tensor normalized = flat;
    normalized.name = fresh_name(g, g.tensors[op.outputs[0]].name + "/2d");
    Tensor shape;
    shape.name = fresh_name(g, g.tensors[op.outputs[0]].name + "/shape");
    shape.dtype = DType::i64;
    shape.rank_known = true;
    shape.dims = {Dim::of(rank)};
    shape.role = TensorRole::weight;
    shape.data = std::make_shared<TensorData>(TensorData::from_int64(DType::i64, {rank}, dims));
    const TensorId flat_id = g.add_tensor(std::move(flat));
    const TensorId normalized_id = g.add_tensor(std::move(normalized));
    const TensorId shape_id = g.add_tensor(std::move(shape));

    Op flatten;
    flatten.name = op.name + "/flatten";
    flatten.type = "Flatten";
    flatten.phase = op.phase;
    flatten.inputs = {op.inputs[0]};
    flatten.outputs = {flat_id};
    flatten.attrs["axis"] = int_attr(axis);
    Op reshape;
    reshape.name = op.name + "/reshape";
    reshape.type = "Reshape";
    reshape.phase = op.phase;
    reshape.inputs = {normalized_id, shape_id};
    reshape.outputs = {op.outputs[0]};
    op.inputs = {flat_id};
    op.outputs = {normalized_id};
    op.attrs["axis"] = int_attr(1);
    ops.push_back(std::move(flatten));
    ops.push_back(std::move(op));
    ops.push_back(std::move(reshape));
  }
  g.ops = std::move(ops);
  if (changed) g.relink();
}

}  // namespace memplan::analysis::shape_detail
