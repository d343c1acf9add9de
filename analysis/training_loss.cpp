// The training losses (MSE, cross-entropy, the model's own) and their gradients, and helpers the backward rules share.
#include <algorithm>
#include <map>
#include <optional>

#include "analysis/autodiff.hpp"
#include "analysis/ops.hpp"

namespace memplan::analysis::autodiff {

Attribute attr_i(std::int64_t v) {
  Attribute a;
  a.kind = Attribute::Kind::i;
  a.i = v;
  return a;
}
Attribute attr_f(double v) {
  Attribute a;
  a.kind = Attribute::Kind::f;
  a.f = v;
  return a;
}
Attribute attr_ints(std::vector<std::int64_t> v) {
  Attribute a;
  a.kind = Attribute::Kind::ints;
  a.ints = std::move(v);
  return a;
}
Attribute attr_s(std::string v) {
  Attribute a;
  a.kind = Attribute::Kind::s;
  a.s = std::move(v);
  return a;
}

std::vector<std::int64_t> explicit_pads(const Op& op, const Shape& x, const Shape& y, const std::vector<std::int64_t>& kernel) {
  const std::size_t n = kernel.size();
  const std::string auto_pad = op.attr_string("auto_pad", "NOTSET");
  if (auto_pad == "NOTSET") {
    auto pads = op.attr_ints("pads", std::vector<std::int64_t>(2 * n, 0));
    if (pads.size() != 2 * n) fail(ErrorKind::malformed, "op '" + op.name + "' (" + op.type + "): pads has the wrong length");
    return pads;
  }
  std::vector<std::int64_t> pads(2 * n, 0);
  if (auto_pad == "VALID") return pads;
  const auto strides = op.attr_ints("strides", std::vector<std::int64_t>(n, 1));
  const auto dil = op.attr_ints("dilations", std::vector<std::int64_t>(n, 1));
  for (std::size_t k = 0; k < n; ++k) {
    const std::int64_t in = x.at(2 + k), out = y.at(2 + k);
    const std::int64_t total = std::max<std::int64_t>(0, (out - 1) * strides.at(k) + (kernel[k] - 1) * dil.at(k) + 1 - in);
    const std::int64_t small = total / 2, big = total - small;
    pads[k] = auto_pad == "SAME_LOWER" ? big : small;
    pads[k + n] = auto_pad == "SAME_LOWER" ? small : big;
  }
  return pads;
}

namespace {

// The incoming gradient of the loss when the loss op sits inside a graph (registry examples) or the loss scale
// seeds it (fp16 loss scaling); none when it is the training loss itself (dloss = 1, the seed).
std::vector<TensorId> with_dloss(const GradContext& c, std::vector<TensorId> inputs) {
  if (c.dy(0) != kNoTensor) inputs.push_back(c.dy(0));
  return inputs;
}

// MSELossGrad(y, target[, dloss]) -> dy = 2 (y - target) / numel (times dloss): the seed of the backward pass.
void mse_loss_grad(GradContext& c) {
  TensorId g = c.grad_tensor(0);
  c.emit("MSELossGrad", "memplan", with_dloss(c, {c.in(0), c.in(1)}), {g});
  c.give(0, g);
}

// CrossEntropyLossGrad(y, lse, labels[, dloss]) -> dy = (softmax(y) - onehot(label)) / valid rows, from the
// logits and the per-row logsumexp the forward saved: no log-probabilities are kept (fused_ops note in
// docs/training-recipes.md, "Losses").
void cross_entropy_grad(GradContext& c) {
  const Op fwd = c.fwd();
  TensorId g = c.grad_tensor(0);
  c.emit(std::string(memplan_ops::kCrossEntropyLossGrad), std::string(kMemplanDomain),
         with_dloss(c, {c.in(0), c.out(1), c.in(1)}), {g},
         {{"axis", attr_i(fwd.attr_int("axis", 1))}, {"ignore_index", attr_i(fwd.attr_int("ignore_index", -100))}});
  c.give(0, g);
}

// SumLossGrad([dloss]) -> ones (times dloss) of y's shape.
void sum_loss_grad(GradContext& c) {
  TensorId g = c.grad_tensor(0);
  c.emit(std::string(memplan_ops::kSumLossGrad), std::string(kMemplanDomain), with_dloss(c, {}), {g});
  c.give(0, g);
}

TensorId first_float_output(const Graph& g) {
  for (TensorId t : g.outputs)
    if (dtype_is_float(g.tensors[t].dtype)) return t;
  fail(ErrorKind::invalid_graph, "graph '" + g.name + "' has no float output to put a loss on");
}

TensorId new_tensor(Graph& g, const std::string& base, DType dtype, std::vector<Dim> dims, TensorRole role) {
  Tensor t;
  t.name = unique_name(g, base);
  t.dtype = dtype;
  t.dims = std::move(dims);
  t.rank_known = true;
  t.role = role;
  return g.add_tensor(std::move(t));
}

void add_loss_op(Graph& g, const std::string& name, std::string_view type, std::vector<TensorId> inputs,
                 std::vector<TensorId> outputs, std::map<std::string, Attribute> attrs = {}) {
  Op op;
  op.name = name;
  op.type = std::string(type);
  op.domain = std::string(kMemplanDomain);
  op.inputs = std::move(inputs);
  op.outputs = std::move(outputs);
  op.attrs = std::move(attrs);
  g.add_op(std::move(op));
}

}  // namespace

std::int64_t cross_entropy_class_axis(std::size_t rank, std::optional<std::int64_t> class_axis) {
  const auto r = static_cast<std::int64_t>(rank);
  if (rank == 0) fail(ErrorKind::invalid_graph, "cross-entropy needs an output with a class axis, not a scalar");
  std::int64_t a = class_axis ? *class_axis : (rank == 3 ? 2 : rank == 1 ? 0 : 1);
  if (a < -r || a >= r)
    fail(ErrorKind::usage, "--class-axis " + std::to_string(a) + " is outside the output's rank " + std::to_string(r) + " (accepted: " +
                               std::to_string(-r) + " .. " + std::to_string(r - 1) + ")");
  return a < 0 ? a + r : a;
}

TensorId add_loss(Graph& g, const TrainingOptions& opts) {
  const TensorId y = first_float_output(g);
  const std::vector<Dim> y_dims = g.tensors[y].dims;
  const DType y_dtype = g.tensors[y].dtype;
  TensorId lt = kNoTensor;
  if (opts.loss == Loss::mse) {
    const TensorId tt = new_tensor(g, "target", y_dtype, y_dims, TensorRole::input);
    g.inputs.push_back(tt);
    lt = new_tensor(g, "loss", y_dtype, {}, TensorRole::activation);
    add_loss_op(g, "loss/MSELoss", memplan_ops::kMSELoss, {y, tt}, {lt});
  } else if (opts.loss == Loss::ce) {
    const std::int64_t axis = cross_entropy_class_axis(y_dims.size(), opts.class_axis);
    std::vector<Dim> rows = y_dims;
    rows.erase(rows.begin() + axis);
    const TensorId labels = new_tensor(g, "labels", DType::i64, rows, TensorRole::input);
    g.inputs.push_back(labels);
    lt = new_tensor(g, "loss", DType::f32, {}, TensorRole::activation);
    const TensorId lse = new_tensor(g, "loss/logsumexp", DType::f32, rows, TensorRole::activation);
    add_loss_op(g, "loss/CrossEntropyLoss", memplan_ops::kCrossEntropyLoss, {y, labels}, {lt, lse},
                {{"axis", attr_i(axis)}, {"ignore_index", attr_i(-100)}});
  } else {
    std::int64_t n = 1;
    for (const Dim& d : y_dims) n *= d.value;
    if (n == 1) {
      lt = y;  // the model's own loss: its gradient is seeded with ones (seed_loss_gradient)
    } else {
      lt = new_tensor(g, "loss", DType::f32, {}, TensorRole::activation);
      add_loss_op(g, "loss/SumLoss", memplan_ops::kSumLoss, {y}, {lt});
    }
  }
  for (TensorId t : g.outputs) g.tensors[t].is_graph_output = false;
  g.outputs = {lt};
  g.tensors[lt].is_graph_output = true;
  return lt;
}

bool is_loss_op(const Op& op) {
  const OpInfo* i = op_registry().find(op);
  return op.phase == Phase::forward && op.domain == kMemplanDomain && i && i->kind == OpKind::loss;
}

TensorId add_loss_scale(Graph& g, const TrainingOptions& opts) {
  if (opts.precision != Precision::fp16)
    fail(ErrorKind::usage, std::string("loss scaling needs precision fp16, not ") + precision_name(opts.precision));
  const TensorId scale = new_tensor(g, "amp/scale", DType::f32, {}, TensorRole::optimizer_state);
  // GradScaler's init_scale 2^16; the executor uploads it once, the step's AmpUpdateScale rewrites it in place.
  g.tensors[scale].data = std::make_shared<TensorData>(TensorData::from_double(DType::f32, {}, {65536.0}));
  return scale;
}

TensorId seed_loss_gradient(Graph& g, TensorId loss, TensorId scale) {
  const TensorId p = g.tensors[loss].producer;
  if (p != kNoOp && is_loss_op(g.ops[p])) return scale;  // the loss op's rule starts the backward pass
  const TensorId seed = new_tensor(g, "grad/" + g.tensors[loss].name, g.tensors[loss].dtype, g.tensors[loss].dims,
                                   TensorRole::activation);
  add_loss_op(g, "loss/seed", memplan_ops::kSumLossGrad, scale == kNoTensor ? std::vector<TensorId>{} : std::vector<TensorId>{scale},
              {seed});
  g.ops.back().phase = Phase::backward;
  return seed;
}

void add_loss_grads(GradTable& t) {
  t[std::string(memplan_ops::kMSELoss)] = {mse_loss_grad, 1u, 1u};
  t[std::string(memplan_ops::kCrossEntropyLoss)] = {cross_entropy_grad, 1u, 1u};
  t[std::string(memplan_ops::kSumLoss)] = {sum_loss_grad, 1u, 1u};
}

}  // namespace memplan::analysis::autodiff
