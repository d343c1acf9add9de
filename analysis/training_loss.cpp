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

// LinearCrossEntropy made its inputs' gradients in the forward (outputs 1, 2, 3 for X, W, bias, at dloss = 1): the
// backward hands them on, times dloss where one is given (the fp16 loss scale); in the weight's or bias's dtype.
void linear_cross_entropy_grad(GradContext& c) {
  const std::pair<std::size_t, std::size_t> slots[] = {{0, 1}, {1, 2}, {3, 3}};
  for (const auto& [in, out] : slots) {
    if (!c.wants(in) || c.out(out) == kNoTensor) continue;
    TensorId g = c.grad_tensor(in);
    const Graph& gr = c.graph();
    const bool cast = gr.tensors[g].dtype != gr.tensors[c.out(out)].dtype;
    if (c.dy(0) == kNoTensor && !cast) {
      c.emit("Identity", "", {c.out(out)}, {g});
    } else if (c.dy(0) == kNoTensor) {
      c.emit("Cast", "", {c.out(out)}, {g}, {{"to", attr_i(static_cast<std::int64_t>(gr.tensors[g].dtype))}});
    } else {
      c.emit("Mul", "", {c.out(out), c.dy(0)}, {g});  // float32 gradients times the float32 scale
    }
    c.give(in, g);
  }
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

// The loss becomes the graph's one output.
TensorId finish_loss(Graph& g, TensorId lt) {
  for (TensorId t : g.outputs) g.tensors[t].is_graph_output = false;
  g.outputs = {lt};
  g.tensors[lt].is_graph_output = true;
  return lt;
}

// One float32 tensor's bytes per chunk of LinearCrossEntropy: the rows per chunk are what keeps a chunk's float32
// logits within it.
constexpr std::uint64_t kChunkLogitsBytes = 64ull << 20;

void drop_if_unused(Graph& g, TensorId t) {
  if (t == kNoTensor || !g.tensors[t].consumers.empty() || g.tensors[t].is_graph_output) return;
  const OpId p = g.tensors[t].producer;
  if (p == kNoOp) return;
  for (TensorId o : g.ops[p].outputs)
    if (o != kNoTensor && (!g.tensors[o].consumers.empty() || g.tensors[o].is_graph_output)) return;
  const std::vector<TensorId> ins = g.ops[p].inputs;
  g.ops.erase(g.ops.begin() + p);
  g.relink();
  for (TensorId i : ins) drop_if_unused(g, i);
}

TensorId reshaped(Graph& g, TensorId x, std::vector<std::int64_t> dims, const std::string& name) {
  if (g.tensors[x].shape() == dims) return x;
  const TensorId shape = new_tensor(g, name + "/shape", DType::i64, {Dim::of(static_cast<std::int64_t>(dims.size()))}, TensorRole::weight);
  g.tensors[shape].data = std::make_shared<TensorData>(TensorData::from_int64(DType::i64, {static_cast<std::int64_t>(dims.size())}, dims));
  std::vector<Dim> d;
  for (auto v : dims) d.push_back(Dim::of(v));
  const TensorId y = new_tensor(g, name, g.tensors[x].dtype, d, TensorRole::activation);
  Op op;
  op.name = name + "/Reshape";
  op.type = "Reshape";
  op.inputs = {x, shape};
  op.outputs = {y};
  g.add_op(std::move(op));
  return y;
}

// --chunked-loss: y = MatMul(h, W) (+ bias) with classes on y's last axis (W [K, V], or [V, K] read transposed by
// memplan MatMulT) becomes LinearCrossEntropy(h as [N, K], W, labels as [N], bias); the MatMul and Add are dropped. A
// usage error names what does not match.
TensorId chunked_cross_entropy(Graph& g, TensorId y, std::int64_t axis, TensorId labels) {
  const auto why = [&](const std::string& s) {
    fail(ErrorKind::usage, "--chunked-loss: the output '" + g.tensors[y].name + "' " + s +
                               "; it needs a MatMul of the hidden states by a [hidden, classes] weight (plus a bias) with the classes last");
  };
  const Tensor& yt = g.tensors[y];
  if (axis + 1 != static_cast<std::int64_t>(yt.dims.size())) why("has its classes on axis " + std::to_string(axis) + ", not the last");
  OpId p = yt.producer;
  TensorId bias = kNoTensor, mm = y;
  const auto is_matmul = [&](OpId o) {
    return o != kNoOp && ((g.ops[o].domain.empty() && g.ops[o].type == "MatMul") ||
                          (g.ops[o].domain == kMemplanDomain && g.ops[o].type == memplan_ops::kMatMulT && g.ops[o].attr_int("trans_a", 0) == 0));
  };
  if (p != kNoOp && g.ops[p].domain.empty() && g.ops[p].type == "Add" && g.ops[p].inputs.size() == 2) {
    for (std::size_t k = 0; k < 2; ++k) {
      const TensorId a = g.ops[p].inputs[k], b = g.ops[p].inputs[1 - k];
      if (g.tensors[a].dims.size() == 1 && is_matmul(g.tensors[b].producer)) bias = a, mm = b;
    }
    if (bias == kNoTensor) why("is an Add, not of a MatMul and a bias vector");
    p = g.tensors[mm].producer;
  }
  if (!is_matmul(p)) why("is not made by a MatMul");
  const std::int64_t trans_b = g.ops[p].type == "MatMul" ? 0 : g.ops[p].attr_int("trans_b", 0);
  const TensorId h = g.ops[p].inputs.at(0), w = g.ops[p].inputs.at(1);
  const auto ws = g.tensors[w].shape(), hs = g.tensors[h].shape();
  if (ws.size() != 2 || hs.empty() || hs.back() != ws[trans_b ? 1 : 0]) why("is a MatMul whose weight is not a [hidden, classes] matrix");
  const std::int64_t k = hs.back(), v = ws[trans_b ? 0 : 1], n = static_cast<std::int64_t>(g.tensors[h].element_count()) / std::max<std::int64_t>(k, 1);
  if (bias != kNoTensor && g.tensors[bias].shape() != std::vector<std::int64_t>{v}) why("has a bias of another length than its classes");
  const TensorId h2 = reshaped(g, h, {n, k}, "loss/hidden");
  const TensorId l2 = reshaped(g, labels, {n}, "loss/labels");
  const TensorId lt = new_tensor(g, "loss", DType::f32, {}, TensorRole::activation);
  std::vector<TensorId> outs{lt, new_tensor(g, "loss/grad_hidden", g.tensors[h].dtype, {Dim::of(n), Dim::of(k)}, TensorRole::activation),
                             new_tensor(g, "loss/grad_weight", DType::f32, g.tensors[w].dims, TensorRole::activation)};
  std::vector<TensorId> ins{h2, w, l2};
  if (bias != kNoTensor) {
    ins.push_back(bias);
    outs.push_back(new_tensor(g, "loss/grad_bias", DType::f32, {Dim::of(v)}, TensorRole::activation));
  }
  // rows per chunk: a chunk's float32 logits within kChunkLogitsBytes, and at most an eighth of the rows (so the
  // chunk's buffers stay a fraction of the whole logits on small heads)
  const std::int64_t by_bytes = static_cast<std::int64_t>(kChunkLogitsBytes / (4u * static_cast<std::uint64_t>(std::max<std::int64_t>(v, 1))));
  const std::int64_t chunk = std::max<std::int64_t>(1, std::min({by_bytes, (n + 7) / 8, n}));
  add_loss_op(g, "loss/LinearCrossEntropy", memplan_ops::kLinearCrossEntropy, ins, outs,
              {{"chunk", attr_i(chunk)}, {"ignore_index", attr_i(-100)}, {"trans_b", attr_i(trans_b)}});
  g.tensors[y].is_graph_output = false;
  g.outputs.erase(std::remove(g.outputs.begin(), g.outputs.end(), y), g.outputs.end());
  drop_if_unused(g, y);
  return lt;
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
  if (opts.chunked_loss && opts.loss != Loss::ce) fail(ErrorKind::usage, "--chunked-loss needs --loss ce");
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
    if (opts.chunked_loss) return finish_loss(g, chunked_cross_entropy(g, y, axis, labels));
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
  return finish_loss(g, lt);
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
  t[std::string(memplan_ops::kLinearCrossEntropy)] = {linear_cross_entropy_grad, 0b1011u, 0b0001u};
}

}  // namespace memplan::analysis::autodiff
