// GroupNorm as the TorchScript exporter writes it, read back as one GroupNormalization once shapes are known.
//
// torch.onnx's group_norm symbolic (opset 9-17) emits Reshape(X, [0, G, -1]) -> InstanceNormalization(ones[G],
// zeros[G]) -> Reshape(Shape(X)) -> Mul(Unsqueeze(weight)) -> Add(Unsqueeze(bias)). As five ops the affine weight
// and bias reach the step only through Unsqueeze (folded to [C, 1, ...] constants: no parameter slot, so they would not
// train) and the Mul would save the normalized tensor for the weight's gradient, which PyTorch's native_group_norm
// does not keep (it saves X, mean and rstd per sample and group). As one GroupNormalization (opset 21 semantics:
// scale and bias [C]) both are PyTorch's: the parameters train and the saved set is X and the statistics.
#include <algorithm>

#include "analysis/shape_rules.hpp"

namespace memplan::analysis::shape_detail {
namespace {

bool onnx_op(const Op& op, std::string_view type) { return op.type == type && (op.domain.empty() || op.domain == "ai.onnx"); }

// The only op reading tensor t (not a graph output), or null.
const Op* sole_reader(const Graph& g, TensorId t) {
  const Tensor& x = g.tensors[t];
  if (x.is_graph_output || x.consumers.size() != 1) return nullptr;
  return &g.ops[x.consumers[0]];
}

bool constant_equal_to(const Graph& g, TensorId t, double v) {
  if (t == kNoTensor || !g.tensors[t].data) return false;
  const auto values = g.tensors[t].data->as_double();
  return !values.empty() && std::all_of(values.begin(), values.end(), [v](double e) { return e == v; });
}

// The per-channel parameter [C] behind an affine operand read only there: a weight [C, 1, ...] (the folded Unsqueeze
// of a parameter whose value is in the graph), or Unsqueeze/Reshape of a weight [C]. kNoTensor when it is neither.
TensorId channel_parameter(const Graph& g, TensorId t, std::int64_t channels, std::size_t rank) {
  const Tensor& x = g.tensors[t];
  const Shape s = x.shape();
  if (s.size() != rank - 1 || s[0] != channels || std::any_of(s.begin() + 1, s.end(), [](std::int64_t d) { return d != 1; }) ||
      x.consumers.size() != 1 || x.is_graph_output)
    return kNoTensor;
  if (x.producer == kNoOp) return x.role == TensorRole::weight && dtype_is_float(x.dtype) ? t : kNoTensor;
  const Op& p = g.ops[x.producer];
  if (!onnx_op(p, "Unsqueeze") && !onnx_op(p, "Reshape")) return kNoTensor;
  const Tensor& w = g.tensors[p.inputs.at(0)];
  return w.producer == kNoOp && w.role == TensorRole::weight && w.shape() == Shape{channels} ? p.inputs[0] : kNoTensor;
}

struct Match {
  std::vector<OpId> ops;  // Reshape, InstanceNormalization, Reshape, Mul, Add, then the affine operands' Unsqueezes
  TensorId x = kNoTensor, scale = kNoTensor, bias = kNoTensor;
  std::int64_t groups = 0;
};

// The affine operand of a binary op (the input that is not `from`) as its channel parameter.
TensorId affine_of(const Graph& g, const Op& op, TensorId from, std::int64_t channels, std::size_t rank) {
  if (op.inputs.size() != 2) return kNoTensor;
  const TensorId other = op.inputs[0] == from ? op.inputs[1] : op.inputs[1] == from ? op.inputs[0] : kNoTensor;
  return other == kNoTensor ? kNoTensor : channel_parameter(g, other, channels, rank);
}

// An InstanceNormalization of ones and zeros over Reshape(X, [N, G, L]): its Reshape and itself, X and G.
std::optional<Match> normalized_groups(const Graph& g, OpId in_op) {
  const Op& norm = g.ops[in_op];
  if (!onnx_op(norm, "InstanceNormalization") || norm.outputs.size() != 1 || !constant_equal_to(g, norm.input(1), 1.0) ||
      !constant_equal_to(g, norm.input(2), 0.0))
    return std::nullopt;
  const TensorId xr = norm.inputs[0];
  const OpId a = g.tensors[xr].producer;
  if (a == kNoOp || !sole_reader(g, xr) || !onnx_op(g.ops[a], "Reshape")) return std::nullopt;
  Match m;
  m.x = g.ops[a].inputs.at(0);
  const Shape xs = g.tensors[m.x].shape(), rs = g.tensors[xr].shape();
  if (xs.size() < 2 || rs.size() != 3 || rs[0] != xs[0] || rs[1] <= 0 || xs[1] % rs[1] != 0) return std::nullopt;
  m.groups = rs[1];
  m.ops = {a, in_op};
  return m;
}

// After the normalization: Reshape back to X's shape, Mul by the per-channel weight and Add of the per-channel bias
// (with the Unsqueezes that broadcast them), appended to m; false when the ops are not those.
bool affine_tail(const Graph& g, Match& m) {
  const Shape xs = g.tensors[m.x].shape();
  const Op* back = sole_reader(g, g.ops[m.ops[1]].outputs[0]);
  if (!back || !onnx_op(*back, "Reshape") || g.tensors[back->outputs.at(0)].shape() != xs) return false;
  const Op* mul = sole_reader(g, back->outputs[0]);
  if (!mul || !onnx_op(*mul, "Mul")) return false;
  const Op* add = sole_reader(g, mul->outputs.at(0));
  if (!add || !onnx_op(*add, "Add")) return false;
  m.scale = affine_of(g, *mul, back->outputs[0], xs[1], xs.size());
  m.bias = affine_of(g, *add, mul->outputs[0], xs[1], xs.size());
  const DType dt = g.tensors[m.x].dtype;
  for (TensorId t : {m.scale, m.bias, add->outputs[0]})
    if (t == kNoTensor || g.tensors[t].dtype != dt) return false;
  const auto id = [&](const Op* op) { return static_cast<OpId>(op - g.ops.data()); };
  m.ops.insert(m.ops.end(), {id(back), id(mul), id(add)});
  for (TensorId t : {mul->inputs[0], mul->inputs[1], add->inputs[0], add->inputs[1]})
    if (g.tensors[t].producer != kNoOp && t != back->outputs[0] && t != mul->outputs[0]) m.ops.push_back(g.tensors[t].producer);
  return true;
}

std::optional<Match> match_group_norm(const Graph& g, OpId in_op) {
  auto m = normalized_groups(g, in_op);
  if (!m || !affine_tail(g, *m)) return std::nullopt;
  return m;
}

// A [C, 1, ...] constant that only the matched op read becomes the [C] parameter itself (same bytes).
void flatten_parameter(Graph& g, TensorId t) {
  Tensor& x = g.tensors[t];
  const std::int64_t c = x.shape().at(0);
  x.dims = {Dim::of(c)};
  if (x.data) x.data = std::make_shared<TensorData>(TensorData{x.data->dtype, {c}, x.data->bytes});
}

// Drops the tensors no op or graph edge names (the matched ops' intermediates and constants).
void drop_unused_tensors(Graph& g) {
  std::vector<bool> used(g.tensors.size(), false);
  for (TensorId t : g.inputs) used[t] = true;
  for (TensorId t : g.outputs) used[t] = true;
  for (const Op& op : g.ops)
    for (const auto* list : {&op.inputs, &op.outputs})
      for (TensorId t : *list)
        if (t != kNoTensor) used[t] = true;
  std::vector<TensorId> remap(g.tensors.size(), kNoTensor);
  std::vector<Tensor> kept;
  for (TensorId t = 0; t < g.tensors.size(); ++t)
    if (used[t]) {
      remap[t] = static_cast<TensorId>(kept.size());
      kept.push_back(std::move(g.tensors[t]));
    }
  for (Op& op : g.ops)
    for (auto* list : {&op.inputs, &op.outputs})
      for (TensorId& t : *list)
        if (t != kNoTensor) t = remap[t];
  for (TensorId& t : g.inputs) t = remap[t];
  for (TensorId& t : g.outputs) t = remap[t];
  g.tensors = std::move(kept);
  g.relink();
}

}  // namespace

void raise_group_norms(Graph& g) {
  std::vector<Match> found;
  std::vector<bool> taken(g.ops.size(), false);
  for (OpId o = 0; o < g.ops.size(); ++o)
    if (auto m = match_group_norm(g, o); m && std::none_of(m->ops.begin(), m->ops.end(), [&](OpId k) { return taken[k]; })) {
      for (OpId k : m->ops) taken[k] = true;
      found.push_back(*m);
    }
  if (found.empty()) return;
  std::vector<std::optional<Op>> replace(g.ops.size());
  for (const Match& m : found) {
    for (TensorId t : {m.scale, m.bias})
      if (g.tensors[t].shape().size() > 1) flatten_parameter(g, t);
    const Op& norm = g.ops[m.ops[1]];
    Op gn;
    gn.name = norm.name;
    gn.type = "GroupNormalization";
    gn.inputs = {m.x, m.scale, m.bias};
    gn.outputs = {g.ops[m.ops[4]].outputs[0]};
    gn.attrs["num_groups"].kind = Attribute::Kind::i;
    gn.attrs["num_groups"].i = m.groups;
    gn.attrs["epsilon"].kind = Attribute::Kind::f;
    gn.attrs["epsilon"].f = norm.attr_float("epsilon", 1e-5);
    replace[m.ops[4]] = std::move(gn);  // where the Add was: every input is ready there
  }
  std::vector<Op> ops;
  for (OpId o = 0; o < g.ops.size(); ++o) {
    if (replace[o]) ops.push_back(std::move(*replace[o]));
    else if (!taken[o]) ops.push_back(std::move(g.ops[o]));
  }
  g.ops = std::move(ops);
  drop_unused_tensors(g);
}

}  // namespace memplan::analysis::shape_detail
