// GELU fusion: the erf form x * 0.5 * (1 + Erf(x / sqrt 2)) and the tanh form (GPT-2's gelu_new)
// 0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 x^3))), in any operand order, x^3 as Pow(x, 3) or x * x * x -> one
// ONNX Gelu. The association tells who wrote it: the exporters decompose torch's F.gelu as (x * (1 + f)) * 0.5 with
// x^3 = x * (x * x); Python GELUs (Hugging Face's NewGELUActivation, "gelu_python") scale x first, (0.5 * x) * (1 + f),
// and take Pow(x, 3). PyTorch eager runs the first as one kernel and the second op by op (library_form).
#include <algorithm>
#include <cmath>
#include <optional>

#include "planner/fusion.hpp"
#include "planner/fusion_norms_match.hpp"
#include "planner/graph_rewrite.hpp"

namespace memplan::planner {

using namespace norm_match;

namespace {

constexpr double kTol = 1e-4;  // exporters write these constants as float32 (and some round further)
const double kSqrt2 = std::sqrt(2.0), kTanhScale = std::sqrt(2.0 / 3.14159265358979323846), kCubic = 0.044715;

struct GeluMatch {
  Match m;
  TensorId x = kNoTensor;
  bool tanh = false;
  bool pow_cube = false;   // tanh form: x^3 as Pow(x, 3), not x * x * x
  bool half_last = false;  // the last product multiplies by the 0.5 constant itself
  bool library_form() const { return half_last && !pow_cube; }
};

// The x of the erf argument: x / sqrt(2) or x * (1 / sqrt(2)) in either order.
TensorId erf_argument(const Graph& g, TensorId u, Match& m) {
  TensorId x = kNoTensor;
  if (OpId d = made_by(g, u, "Div"); d != kNoOp && is_scalar_constant(g, g.ops[d].input(1), kSqrt2, kTol)) {
    m.members.insert(d);
    return g.ops[d].inputs[0];
  }
  if (OpId p = made_by(g, u, "Mul"); p != kNoOp && split_constant(g, g.ops[p], 1.0 / kSqrt2, kTol, x)) {
    m.members.insert(p);
    return x;
  }
  return kNoTensor;
}

// x^3 of `cube` as x * (x * x) in any grouping and order (the exporters' form of F.gelu's tanh approximation): the
// two Mul ops, or an empty vector.
std::vector<OpId> product_cube(const Graph& g, TensorId cube, TensorId x) {
  const OpId outer = made_by(g, cube, "Mul");
  if (outer == kNoOp || g.ops[outer].inputs.size() != 2) return {};
  for (std::size_t k = 0; k < 2; ++k) {
    if (g.ops[outer].inputs[k] != x) continue;
    const OpId inner = made_by(g, g.ops[outer].inputs[1 - k], "Mul");
    if (inner != kNoOp && g.ops[inner].inputs.size() == 2 && g.ops[inner].inputs[0] == x && g.ops[inner].inputs[1] == x &&
        g.tensors[g.ops[inner].outputs[0]].consumers.size() == 1)
      return {outer, inner};
  }
  return {};
}

// The x of the tanh argument: c * (x + k * x^3), products and sums in either order, x^3 as Pow(x, 3) or x * x * x.
TensorId tanh_argument(const Graph& g, TensorId u, GeluMatch& gm) {
  Match& m = gm.m;
  TensorId inner = kNoTensor, cube_term = kNoTensor, cube = kNoTensor;
  const OpId scale = made_by(g, u, "Mul");
  if (scale == kNoOp || !split_constant(g, g.ops[scale], kTanhScale, kTol, inner)) return kNoTensor;
  const OpId add = made_by(g, inner, "Add");
  if (add == kNoOp || g.ops[add].inputs.size() != 2) return kNoTensor;
  for (std::size_t k = 0; k < 2; ++k) {
    const TensorId x = g.ops[add].inputs[k];
    cube_term = g.ops[add].inputs[1 - k];
    const OpId kmul = made_by(g, cube_term, "Mul");
    if (kmul == kNoOp || !split_constant(g, g.ops[kmul], kCubic, kTol, cube)) continue;
    const OpId pow = made_by(g, cube, "Pow");
    if (pow != kNoOp && g.ops[pow].inputs[0] == x && is_scalar_constant(g, g.ops[pow].input(1), 3.0)) {
      m.members.insert({scale, add, kmul, pow});
      gm.pow_cube = true;
      return x;
    }
    const auto muls = product_cube(g, cube, x);
    if (muls.empty()) continue;
    m.members.insert({scale, add, kmul});
    m.members.insert(muls.begin(), muls.end());
    return x;
  }
  return kNoTensor;
}

// From a = 1 + f(x): the product x * a * 0.5 (any grouping of at most three Mul ops) that ends the GELU.
bool close_product(const Graph& g, TensorId a, GeluMatch& gm) {
  TensorId t = a;
  std::vector<TensorId> chain;  // results of the Mul chain above a, nearest first
  for (int k = 0; k < 3; ++k) {
    const auto& x = g.tensors[t];
    if (x.is_graph_output || x.consumers.size() != 1 || !is(g, x.consumers[0], "Mul")) break;
    t = g.ops[x.consumers[0]].outputs[0];
    chain.push_back(t);
  }
  // The widest product first: a Mul that also takes another factor (a gated GELU's gate) is left out.
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    std::vector<OpId> muls;
    const auto f = product_factors(g, *it, 3, muls);
    if (f.size() != 3 || std::find(f.begin(), f.end(), a) == f.end() || std::find(f.begin(), f.end(), gm.x) == f.end()) continue;
    const bool half =
        std::any_of(f.begin(), f.end(), [&](TensorId v) { return v != a && v != gm.x && is_scalar_constant(g, v, 0.5, kTol); });
    if (!half) continue;
    gm.m.members.insert(muls.begin(), muls.end());
    gm.m.result = *it;
    const Op& last = g.ops[g.tensors[*it].producer];
    gm.half_last = std::any_of(last.inputs.begin(), last.inputs.end(), [&](TensorId v) { return is_scalar_constant(g, v, 0.5, kTol); });
    return true;
  }
  return false;
}

std::optional<GeluMatch> match_gelu(const Graph& g, OpId f) {
  GeluMatch gm;
  gm.tanh = is(g, f, "Tanh");
  gm.m.members.insert(f);
  const TensorId u = g.ops[f].input(0);
  gm.x = gm.tanh ? tanh_argument(g, u, gm) : erf_argument(g, u, gm.m);
  if (gm.x == kNoTensor) return std::nullopt;
  TensorId a = kNoTensor;
  const OpId one = sole_reader(g, g.ops[f].outputs[0], "Add");
  if (one == kNoOp || !split_constant(g, g.ops[one], 1.0, kTol, a) || a != g.ops[f].outputs[0]) return std::nullopt;
  gm.m.members.insert(one);
  if (!close_product(g, g.ops[one].outputs[0], gm)) return std::nullopt;
  if (!same_shape(g, gm.x, gm.m.result)) return std::nullopt;
  return gm;
}

std::optional<Found> gelu_at(const Graph& g, OpId o, bool composite) {
  if (!is(g, o, "Erf") && !is(g, o, "Tanh")) return std::nullopt;
  const auto gm = match_gelu(g, o);
  if (!gm || (!composite && !gm->library_form())) return std::nullopt;
  Found f{gm->m, {}, "gelu"};
  f.op.type = "Gelu";
  f.op.inputs = {gm->x};
  analysis::Attribute approx;
  approx.kind = analysis::Attribute::Kind::s;
  approx.s = gm->tanh ? "tanh" : "none";
  f.op.attrs["approximate"] = approx;
  return f;
}

std::optional<Found> found_gelu(const Graph& g, OpId o) { return gelu_at(g, o, true); }
std::optional<Found> found_library_gelu(const Graph& g, OpId o) { return gelu_at(g, o, false); }

}  // namespace

FusionResult fuse_gelu(const Graph& g, bool composite) {
  return fuse_matches(g, composite ? &found_gelu : &found_library_gelu);
}

}  // namespace memplan::planner
