// Gated activations as the exporters write PyTorch's library ones: F.silu as x * Sigmoid(x) -> Swish (alpha 1),
// F.hardswish as x * HardSigmoid(x; 1/6, 1/2) -> HardSwish, F.mish as x * Tanh(Softplus(x)) -> Mish. PyTorch runs
// each as one kernel whose backward saves x alone; written out, the prediction of PyTorch's memory would also keep
// the gate (a tensor of x's size per activation). A model that wrote the arithmetic in Python runs it op by op:
// the ONNX export cannot tell the two apart, and the library form is by far the common one (transformers' ACT2FN,
// timm's layers, torchvision's), so the PyTorch prediction takes it (eager_doubts.cpp says so).
#include <cmath>
#include <optional>

#include "planner/fusion.hpp"
#include "planner/fusion_norms_match.hpp"

namespace memplan::planner {

using namespace norm_match;

namespace {

constexpr double kTol = 1e-4;

// The gate's op type and the ops between x and the gate's output: Sigmoid, HardSigmoid, or Softplus then Tanh.
std::optional<std::pair<const char*, std::vector<OpId>>> gate_of(const Graph& g, TensorId gate, TensorId x) {
  if (const OpId s = made_by(g, gate, "Sigmoid"); s != kNoOp && g.ops[s].inputs[0] == x) return {{"Swish", {s}}};
  if (const OpId h = made_by(g, gate, "HardSigmoid"); h != kNoOp && g.ops[h].inputs[0] == x) {
    const Op& op = g.ops[h];
    if (std::abs(op.attr_float("alpha", 0.2) - 1.0 / 6) < kTol && std::abs(op.attr_float("beta", 0.5) - 0.5) < kTol)
      return {{"HardSwish", {h}}};
  }
  if (const OpId t = made_by(g, gate, "Tanh"); t != kNoOp) {
    const OpId sp = made_by(g, g.ops[t].inputs[0], "Softplus");
    if (sp != kNoOp && g.ops[sp].inputs[0] == x) return {{"Mish", {t, sp}}};
  }
  return std::nullopt;
}

std::optional<Found> gated_at(const Graph& g, OpId o) {
  if (!is(g, o, "Mul") || g.ops[o].inputs.size() != 2) return std::nullopt;
  for (std::size_t k = 0; k < 2; ++k) {
    const TensorId x = g.ops[o].inputs[k], gate = g.ops[o].inputs[1 - k];
    const auto found = gate_of(g, gate, x);
    if (!found) continue;
    Found f{{}, {}, "activation"};
    f.m.members.insert(o);
    f.m.members.insert(found->second.begin(), found->second.end());
    f.m.result = g.ops[o].outputs[0];
    f.op.type = found->first;
    f.op.inputs = {x};
    if (f.op.type == "Swish") {
      analysis::Attribute alpha;
      alpha.kind = analysis::Attribute::Kind::f;
      alpha.f = 1.0;
      f.op.attrs["alpha"] = alpha;
    }
    return f;
  }
  return std::nullopt;
}

}  // namespace

FusionResult fuse_gated_activations(const Graph& g) { return fuse_matches(g, &gated_at); }

}  // namespace memplan::planner
