// build_training_graph: loss, reverse-mode differentiation in PyTorch's order, then the optimizer.
#include "analysis/training.hpp"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "analysis/autocast.hpp"
#include "analysis/autodiff.hpp"
#include "analysis/ops.hpp"

namespace memplan::analysis {
namespace autodiff {

struct State {
  Graph g;
  std::size_t forward_tensors = 0;          // tensors [0, n) belong to the forward graph (and the loss)
  std::vector<bool> trainable;              // per forward tensor
  std::vector<bool> requires_grad;          // per forward tensor: depends on a trainable weight
  std::vector<std::uint32_t> pending;       // per forward tensor: contributions it will receive
  std::vector<std::uint32_t> received;      // per forward tensor: contributions received so far
  std::vector<TensorId> grad;               // per forward tensor: its gradient accumulated so far
  std::unordered_map<TensorId, TensorId> made_for;  // gradient tensor -> the forward tensor it was made for
  std::vector<bool> saved;                  // per forward tensor: read by a backward op
  std::vector<std::pair<TensorId, TensorId>> param_grads;
  std::vector<std::uint32_t> given;         // per input slot of the op being differentiated
  bool accumulate = false;                  // microbatches > 1: weight gradients go into accumulators
  std::unordered_map<TensorId, TensorId> accumulator_of;  // weight -> its gradient accumulator

  const GradRule* rule(const Op& op) const {
    const OpInfo* i = op_registry().find(op);
    return i ? i->grad : nullptr;
  }
  bool output_active(const Op& op, const GradRule& r, std::size_t i, const std::vector<bool>& has_grad) const {
    TensorId t = op.output(i);
    return t != kNoTensor && i < 32 && ((r.diff_outputs >> i) & 1u) && has_grad[t];
  }
  bool slot_wants(const Op& op, const GradRule& r, std::size_t i) const {
    TensorId t = op.input(i);
    const std::uint32_t mask = r.narrow_inputs ? r.diff_inputs & r.narrow_inputs(op) : r.diff_inputs;
    return t != kNoTensor && i < 32 && ((mask >> i) & 1u) && requires_grad[t];
  }
};

std::string op_where(const Op& op) { return "op '" + op.name + "' (" + op.type + ")"; }

}  // namespace autodiff

using autodiff::GradContext;
using autodiff::State;

namespace autodiff {

GradContext::GradContext(State& s, OpId fwd) : s_(s), op_(s.g.ops.at(fwd)) {}
const Op& GradContext::fwd() const { return op_; }
const Graph& GradContext::graph() const { return s_.g; }
const Tensor& GradContext::tensor(TensorId t) const { return s_.g.tensors.at(t); }
std::string GradContext::where() const { return op_where(fwd()); }
void GradContext::unsupported(const std::string& what) const {
  fail(ErrorKind::unsupported, where() + ": " + what);
}

TensorId GradContext::dy(std::size_t i) const {
  TensorId t = out(i);
  return t == kNoTensor ? kNoTensor : s_.grad[t];
}

bool GradContext::wants(std::size_t i) const {
  const GradRule* r = s_.rule(fwd());
  return r && s_.slot_wants(fwd(), *r, i);
}

TensorId GradContext::temp(const std::string& hint, DType dtype, const Shape& shape) {
  Tensor t;
  t.name = unique_name(s_.g, fwd().name + "/grad/" + hint);
  t.dtype = dtype;
  for (auto d : shape) t.dims.push_back(Dim::of(d));
  t.rank_known = true;
  return s_.g.add_tensor(std::move(t));
}

TensorId GradContext::grad_tensor(std::size_t i) {
  const TensorId x = in(i);
  const Tensor& src = tensor(x);
  Tensor t;
  const bool only = s_.pending[x] == 1;
  t.name = unique_name(s_.g, "grad/" + src.name + (only ? "" : "/part" + std::to_string(s_.received[x])));
  t.dtype = src.dtype;
  t.dims = src.dims;
  t.rank_known = true;
  TensorId id = s_.g.add_tensor(std::move(t));
  s_.made_for[id] = x;
  return id;
}

TensorId GradContext::int_constant(const std::string& hint, const std::vector<std::int64_t>& values) {
  Tensor t;
  t.name = unique_name(s_.g, fwd().name + "/grad/" + hint);
  t.dtype = DType::i64;
  t.dims = {Dim::of(static_cast<std::int64_t>(values.size()))};
  t.rank_known = true;
  t.role = TensorRole::weight;
  t.data = std::make_shared<TensorData>(
      TensorData::from_int64(DType::i64, {static_cast<std::int64_t>(values.size())}, values));
  return s_.g.add_tensor(std::move(t));
}

void GradContext::emit(const std::string& type, const std::string& domain, std::vector<TensorId> inputs,
                       std::vector<TensorId> outputs, std::map<std::string, Attribute> attrs) {
  Op op;
  op.name = fwd().name + "/grad/" + type + (emitted_ ? "_" + std::to_string(emitted_) : "");
  ++emitted_;
  op.type = type;
  op.domain = domain;
  op.inputs = std::move(inputs);
  op.outputs = std::move(outputs);
  op.attrs = std::move(attrs);
  op.phase = Phase::backward;
  for (TensorId t : op.inputs)
    if (t != kNoTensor && t < s_.forward_tensors) s_.saved[t] = true;
  s_.g.add_op(std::move(op));
}

TensorId GradContext::full_or_grad(std::size_t i, const Shape& full_shape) {
  if (shape(in(i)) == full_shape) return grad_tensor(i);
  return temp(tensor(in(i)).name + "/full", tensor(in(i)).dtype, full_shape);
}

void GradContext::give_reduced(std::size_t i, TensorId full, double scale) {
  if (shape(full) == shape(in(i)) && scale == 1.0) return give(i, full);
  TensorId g = grad_tensor(i);
  std::map<std::string, Attribute> attrs;
  if (scale != 1.0) attrs["scale"] = attr_f(scale);
  emit(std::string(memplan_ops::kReduceSumTo), std::string(kMemplanDomain), {full}, {g}, std::move(attrs));
  give(i, g);
}

void GradContext::give(std::size_t i, TensorId g) {
  const TensorId x = in(i);
  if (!wants(i)) fail(ErrorKind::invalid_graph, where() + ": a gradient for input " + std::to_string(i) + " that takes none");
  if (shape(g) != shape(x))
    fail(ErrorKind::shape, where() + ": gradient '" + tensor(g).name + "' does not have the shape of '" + tensor(x).name + "'");
  ++s_.given.at(i);
  const bool last = ++s_.received[x] == s_.pending[x];
  const std::string final_name = "grad/" + tensor(x).name;
  TensorId acc = g;
  if (s_.grad[x] != kNoTensor) {
    // PyTorch's InputBuffer: each arriving contribution is added to the running sum at once.
    Tensor t;
    t.name = unique_name(s_.g, last ? final_name : final_name + "/sum" + std::to_string(s_.received[x] - 1));
    t.dtype = tensor(x).dtype;
    t.dims = tensor(x).dims;
    t.rank_known = true;
    acc = s_.g.add_tensor(std::move(t));
    s_.made_for[acc] = x;
    emit("Add", "", {s_.grad[x], g}, {acc});
  }
  if (last && s_.trainable[x] && s_.accumulate) {
    // Gradient accumulation: PyTorch's AccumulateGrad adds each micro-step's gradient into .grad in place.
    auto like_x = [&](const std::string& name) {
      Tensor t;
      t.name = unique_name(s_.g, name);
      t.dtype = tensor(x).dtype;
      t.dims = tensor(x).dims;
      t.rank_known = true;
      t.role = TensorRole::gradient;
      return s_.g.add_tensor(std::move(t));
    };
    const TensorId store = like_x(final_name + "/accumulator");
    const TensorId sum = like_x(final_name + "/accumulated");
    emit(std::string(memplan_ops::kGradAccumulate), std::string(kMemplanDomain), {store, acc}, {sum});
    s_.accumulator_of[x] = store;
    s_.param_grads.emplace_back(x, sum);
  } else if (last && s_.trainable[x]) {
    auto it = s_.made_for.find(acc);
    if (it == s_.made_for.end() || it->second != x) {  // a gradient shared with another tensor: copy it
      Tensor t;
      t.name = unique_name(s_.g, final_name);
      t.dtype = tensor(x).dtype;
      t.dims = tensor(x).dims;
      t.rank_known = true;
      TensorId copy = s_.g.add_tensor(std::move(t));
      emit("Identity", "", {acc}, {copy});
      acc = copy;
    }
    s_.g.tensors[acc].role = TensorRole::gradient;
    s_.param_grads.emplace_back(x, acc);
  }
  s_.grad[x] = acc;
}

}  // namespace autodiff









std::vector<OpId> training_schedule(const TrainingGraph& tg) {
  std::vector<OpId> order(tg.graph.ops.size());
  for (OpId o = 0; o < order.size(); ++o) order[o] = o;
  return order;
}

namespace autodiff {
}  // namespace autodiff

namespace {

void require_shapes(const Graph& g) {
  for (const Tensor& t : g.tensors)
    if ((t.producer != kNoOp || !t.consumers.empty() || t.is_graph_output) && !t.shape_known())
      fail(ErrorKind::shape, "tensor '" + t.name + "' has no concrete shape: run shape inference before building the training graph");
}

// Forward ops in a topological order (the file's when it is one).
void order_forward(Graph& g) {
  auto order = topological_order(g);
  if (std::is_sorted(order.begin(), order.end())) return;
  std::vector<Op> ops;
  for (OpId o : order) ops.push_back(g.ops[o]);
  g.ops = std::move(ops);
  g.relink();
}

bool not_differentiable(const Op& op) {
  const OpInfo* i = op_registry().find(op);
  return i && i->grad_kind == GradKind::not_differentiable;
}

void mark_requires_grad(State& s) {
  const Graph& g = s.g;
  s.requires_grad = s.trainable;
  for (const Op& op : g.ops) {
    const autodiff::GradRule* r = s.rule(op);
    bool any = false;
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      TensorId t = op.inputs[i];
      if (t == kNoTensor || !s.requires_grad[t]) continue;
      // Unknown ops propagate conservatively: an error is raised only if a gradient must cross one.
      any = any || (r ? (i < 32 && ((r->diff_inputs >> i) & 1u)) : !not_differentiable(op));
    }
    if (!any) continue;
    for (std::size_t i = 0; i < op.outputs.size(); ++i) {
      TensorId t = op.outputs[i];
      if (t != kNoTensor && dtype_is_float(g.tensors[t].dtype) && (!r || (i < 32 && ((r->diff_outputs >> i) & 1u))))
        s.requires_grad[t] = true;
    }
  }
}

// Which tensors receive gradients, and how many contributions each: a reverse sweep from the loss.
void count_contributions(State& s, TensorId loss, std::size_t forward_ops) {
  std::vector<bool> has_grad(s.g.tensors.size(), false);
  has_grad[loss] = true;
  for (std::size_t k = forward_ops; k-- > 0;) {
    const Op& op = s.g.ops[k];
    const autodiff::GradRule* r = s.rule(op);
    bool reached = false;
    for (std::size_t i = 0; i < op.outputs.size(); ++i)
      reached = reached || (op.outputs[i] != kNoTensor && has_grad[op.outputs[i]] && s.requires_grad[op.outputs[i]]);
    if (!reached) continue;
    bool needed = false;
    for (TensorId t : op.inputs) needed = needed || (t != kNoTensor && s.requires_grad[t]);
    if (!needed) continue;
    if (!r) fail(ErrorKind::unsupported, autodiff::op_where(op) + ": no backward rule, and a gradient must flow through it");
    bool active = false;
    for (std::size_t i = 0; i < op.outputs.size(); ++i) active = active || s.output_active(op, *r, i, has_grad);
    if (!active) continue;
    for (std::size_t i = 0; i < op.inputs.size(); ++i)
      if (s.slot_wants(op, *r, i)) {
        has_grad[op.inputs[i]] = true;
        ++s.pending[op.inputs[i]];
      }
  }
}

// Whether the backward rule of `op` runs: some input it differentiates still waits for a contribution, and the op is
// the loss or some output it differentiates has a gradient.
bool rule_runs(const State& s, const Op& op, const autodiff::GradRule& r) {
  bool wanted = false;
  for (std::size_t i = 0; i < op.inputs.size(); ++i)
    wanted = wanted || (s.slot_wants(op, r, i) && s.pending[op.inputs[i]] > s.received[op.inputs[i]]);
  bool active = autodiff::is_loss_op(op);
  for (std::size_t i = 0; i < op.outputs.size(); ++i)
    active = active || (op.outputs[i] != kNoTensor && ((r.diff_outputs >> i) & 1u) && s.grad[op.outputs[i]] != kNoTensor);
  return wanted && active;
}

// The backward: each forward op's rule, latest first, each giving every input it differentiates one gradient.
void run_backward_rules(State& s, std::size_t forward_ops) {
  for (std::size_t k = forward_ops; k-- > 0;) {
    const autodiff::GradRule* r = s.rule(s.g.ops[k]);
    if (!r || !rule_runs(s, s.g.ops[k], *r)) continue;
    s.given.assign(s.g.ops[k].inputs.size(), 0);
    GradContext ctx(s, static_cast<OpId>(k));
    r->fn(ctx);
    const Op& done = s.g.ops[k];
    for (std::size_t i = 0; i < done.inputs.size(); ++i)
      if (s.slot_wants(done, *r, i) && s.given[i] != 1)
        fail(ErrorKind::unsupported, autodiff::op_where(done) + ": the backward rule gave input " + std::to_string(i) + " " +
                                         std::to_string(s.given[i]) + " gradients instead of one");
  }
  for (TensorId t = 0; t < s.forward_tensors; ++t)
    if (s.trainable[t] && s.pending[t] > 0 && s.received[t] != s.pending[t])
      fail(ErrorKind::invalid_graph, "weight '" + s.g.tensors[t].name + "' received " + std::to_string(s.received[t]) + " of " +
                                         std::to_string(s.pending[t]) + " gradient contributions");
}

// The forward as the backward reads it: relinked, shaped, in order, prepared; the weights it trains.
void prepare_state(State& s, const Graph& shaped_forward, const TrainingOptions& opts) {
  s.g = shaped_forward;
  s.g.relink();
  require_shapes(s.g);
  order_forward(s.g);
  autodiff::prepare_forward(s.g);
  s.trainable = trainable_weights(s.g, opts);
  if (opts.microbatches < 1) fail(ErrorKind::usage, "microbatches must be 1 or more");
  s.accumulate = opts.microbatches > 1;
}

// The weights' gradients (and their accumulators), and the forward tensors the backward saves.
void take_gradients(const State& s, TrainingGraph& tg) {
  tg.param_grads = s.param_grads;
  std::stable_sort(tg.param_grads.begin(), tg.param_grads.end());
  for (const auto& [w, grad] : tg.param_grads)
    if (s.accumulate) tg.grad_accumulators.push_back(s.accumulator_of.at(w));
  for (TensorId t = 0; t < s.forward_tensors; ++t)
    if (s.saved[t] && (s.g.tensors[t].role == TensorRole::activation || s.g.tensors[t].role == TensorRole::input))
      tg.saved_for_backward.push_back(t);
}

}  // namespace

TrainingGraph build_training_graph(const Graph& shaped_forward, const TrainingOptions& opts) {
  State s;
  prepare_state(s, shaped_forward, opts);
  TrainingGraph tg;
  tg.loss = autodiff::add_loss(s.g, opts);
  // torch.autocast: the model and its loss as autocast runs them (fp32 master weights, casts cached).
  if (opts.precision != Precision::fp32) apply_autocast(s.g, opts.precision == Precision::bf16 ? DType::bf16 : DType::f16);
  const std::size_t forward_ops = s.g.ops.size();
  s.forward_tensors = s.g.tensors.size();
  s.trainable.resize(s.forward_tensors, false);
  s.saved.resize(s.forward_tensors, false);
  mark_requires_grad(s);
  s.pending.assign(s.forward_tensors, 0);
  s.received.assign(s.forward_tensors, 0);
  s.grad.assign(s.forward_tensors, kNoTensor);
  count_contributions(s, tg.loss, forward_ops);
  // fp16 loss scaling: the loss gradient is seeded with the scale (GradScaler's scaler.scale(loss).backward()).
  if (opts.loss_scaling) tg.loss_scale = autodiff::add_loss_scale(s.g, opts);
  if (const TensorId seed = autodiff::seed_loss_gradient(s.g, tg.loss, tg.loss_scale); seed != kNoTensor) s.grad[tg.loss] = seed;
  run_backward_rules(s, forward_ops);
  take_gradients(s, tg);
  autodiff::add_optimizer(s.g, opts, tg);
  tg.graph = std::move(s.g);
  tg.graph.relink();
  tg.graph.validate();
  return tg;
}

}  // namespace memplan::analysis
