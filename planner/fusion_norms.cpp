// Norm fusion: decomposed LayerNorm -> ONNX LayerNormalization, RMSNorm forms -> memplan RMSNormalization.
#include <optional>

#include "analysis/ops.hpp"
#include "planner/fusion.hpp"
#include "planner/fusion_norms_match.hpp"
#include "planner/graph_rewrite.hpp"

namespace memplan::planner {

using namespace norm_match;

namespace {

struct NormMatch {
  Match m;
  bool rms = false;
  TensorId x = kNoTensor, scale = kNoTensor, bias = kNoTensor;
  std::int64_t axis = -1;
  double eps = 0.0;
};

// The base b of sq = Pow(b, 2) or Mul(b, b).
TensorId squared_base(const Graph& g, TensorId sq, OpId& op) {
  if ((op = made_by(g, sq, "Pow")) != kNoOp && is_scalar_constant(g, g.ops[op].input(1), 2.0)) return g.ops[op].inputs[0];
  if ((op = made_by(g, sq, "Mul")) != kNoOp && g.ops[op].inputs.size() == 2 && g.ops[op].inputs[0] == g.ops[op].inputs[1])
    return g.ops[op].inputs[0];
  op = kNoOp;
  return kNoTensor;
}

// From v = mean + eps to the normalized value: num / Sqrt(v), num * Reciprocal(Sqrt(v)) (either order),
// num * (1 / Sqrt(v)), num * Pow(v, -0.5). Returns the result and adds the ops to `m`.
TensorId normalized(const Graph& g, TensorId v, TensorId num, Match& m) {
  TensorId r = kNoTensor;  // 1 / sqrt(v)
  if (OpId s = sole_reader(g, v, "Sqrt"); s != kNoOp) {
    m.members.insert(s);
    const TensorId sd = g.ops[s].outputs[0];
    if (OpId d = sole_reader(g, sd, "Div"); d != kNoOp) {
      m.members.insert(d);
      if (g.ops[d].inputs[1] != sd) return kNoTensor;
      if (g.ops[d].inputs[0] == num) return g.ops[d].outputs[0];
      if (!is_scalar_constant(g, g.ops[d].inputs[0], 1.0)) return kNoTensor;
      r = g.ops[d].outputs[0];
    } else if (OpId rc = sole_reader(g, sd, "Reciprocal"); rc != kNoOp) {
      m.members.insert(rc);
      r = g.ops[rc].outputs[0];
    }
  } else if (OpId p = sole_reader(g, v, "Pow");
             p != kNoOp && g.ops[p].inputs[0] == v && is_scalar_constant(g, g.ops[p].input(1), -0.5)) {
    m.members.insert(p);
    r = g.ops[p].outputs[0];
  }
  const OpId mul = sole_reader(g, r, "Mul");
  if (mul == kNoOp || other_input(g.ops[mul], r) != num) return kNoTensor;
  m.members.insert(mul);
  return g.ops[mul].outputs[0];
}

// The op reading `t` alone when it is a `type` whose other operand fits the normalized dims of x.
OpId affine(const Graph& g, TensorId t, const char* type, TensorId x, std::int64_t axis, TensorId& w) {
  const OpId o = sole_reader(g, t, type);
  if (o == kNoOp) return kNoOp;
  w = other_input(g.ops[o], t);
  return fits_normalized(g, w, x, axis) ? o : kNoOp;
}

// A norm whose variance (or mean square) is the ReduceMean `r2`.
std::optional<NormMatch> match_norm(const Graph& g, OpId r2) {
  const auto axes2 = reduce_mean_axes(g, r2);
  if (!axes2) return std::nullopt;
  NormMatch n;
  n.m.members.insert(r2);
  OpId sq_op = kNoOp;
  const TensorId b = squared_base(g, g.ops[r2].inputs[0], sq_op);
  if (b == kNoTensor || !g.tensors[b].shape_known()) return std::nullopt;
  n.m.members.insert(sq_op);
  const auto axis = trailing_axis(*axes2, g.tensors[b].dims.size());
  if (!axis) return std::nullopt;
  n.axis = *axis;
  // LayerNorm: b = x - mean(x) over the same axes; any other difference of a mean is a near miss.
  n.x = b;
  if (OpId sub = made_by(g, b, "Sub"); sub != kNoOp) {
    const OpId r1 = g.tensors[g.ops[sub].inputs[1]].producer;
    if (is(g, r1, "ReduceMean")) {
      if (g.ops[r1].inputs[0] != g.ops[sub].inputs[0] || reduce_mean_axes(g, r1) != axes2) return std::nullopt;
      n.x = g.ops[sub].inputs[0];
      n.m.members.insert(sub);
      n.m.members.insert(r1);
    }
  }
  n.rms = n.x == b;
  const OpId add = sole_reader(g, g.ops[r2].outputs[0], "Add");
  TensorId mean = kNoTensor;
  if (add == kNoOp) return std::nullopt;  // no epsilon: not a norm these passes know
  for (std::size_t k = 0; k < 2; ++k)
    if (g.ops[add].inputs[k] != g.ops[r2].outputs[0] && scalar_constant(g, g.ops[add].inputs[k])) {
      n.eps = *scalar_constant(g, g.ops[add].inputs[k]);
      mean = g.ops[r2].outputs[0];
    }
  if (mean == kNoTensor || !(n.eps >= 0.0)) return std::nullopt;
  n.m.members.insert(add);
  TensorId cur = normalized(g, g.ops[add].outputs[0], b, n.m);
  if (cur == kNoTensor) return std::nullopt;
  // A Cast to the dtype it already has is a no-op (Llama casts to float32 and back).
  if (OpId c = sole_reader(g, cur, "Cast");
      c != kNoOp && g.ops[c].attr_int("to", 0) == static_cast<std::int64_t>(g.tensors[cur].dtype)) {
    n.m.members.insert(c);
    cur = g.ops[c].outputs[0];
  }
  TensorId w = kNoTensor;
  if (OpId s = affine(g, cur, "Mul", n.x, n.axis, w); s != kNoOp) {
    n.m.members.insert(s);
    n.scale = w;
    cur = g.ops[s].outputs[0];
    if (!n.rms)
      if (OpId a = affine(g, cur, "Add", n.x, n.axis, w); a != kNoOp) {
        n.m.members.insert(a);
        n.bias = w;
        cur = g.ops[a].outputs[0];
      }
  }
  // ONNX LayerNormalization needs a scale: a LayerNorm without one is left as it is (a ones weight would
  // become a trained parameter).
  if (!n.rms && n.scale == kNoTensor) return std::nullopt;
  if (!same_shape(g, n.x, cur)) return std::nullopt;
  n.m.result = cur;
  return n;
}

Op fused_norm(const NormMatch& n) {
  Op op;
  op.type = n.rms ? std::string(analysis::memplan_ops::kRMSNormalization) : "LayerNormalization";
  op.domain = n.rms ? std::string(analysis::kMemplanDomain) : "";
  op.inputs = {n.x};
  if (n.scale != kNoTensor) op.inputs.push_back(n.scale);
  if (n.bias != kNoTensor) op.inputs.push_back(n.bias);
  analysis::Attribute axis, eps;
  axis.kind = analysis::Attribute::Kind::i;
  axis.i = n.axis;
  eps.kind = analysis::Attribute::Kind::f;
  eps.f = n.eps;
  op.attrs["axis"] = axis;
  op.attrs["epsilon"] = eps;
  return op;
}

std::optional<Found> norm_at(const Graph& g, OpId o, bool rms) {
  if (!is(g, o, "ReduceMean")) return std::nullopt;
  const auto n = match_norm(g, o);
  if (!n || (n->rms && !rms)) return std::nullopt;
  return Found{n->m, fused_norm(*n), n->rms ? "rms_norm" : "layer_norm"};
}

std::optional<Found> found_norm(const Graph& g, OpId o) { return norm_at(g, o, true); }
std::optional<Found> found_layer_norm(const Graph& g, OpId o) { return norm_at(g, o, false); }

}  // namespace

FusionResult fuse_norms(const Graph& g, bool rms) { return fuse_matches(g, rms ? &found_norm : &found_layer_norm); }

}  // namespace memplan::planner
