// The optimizer step after backward: SGD, momentum, Adam or AdamW updates in place over weights and state, and fp16
// loss scaling's unscale before them and scale update after them (GradScaler).
#include "analysis/autodiff.hpp"
#include "analysis/ops.hpp"

namespace memplan::analysis::autodiff {
namespace {

TensorId like(Graph& g, TensorId of, const std::string& suffix, TensorRole role) {
  Tensor t;
  t.name = unique_name(g, g.tensors[of].name + suffix);
  t.dtype = g.tensors[of].dtype;
  t.dims = g.tensors[of].dims;
  t.rank_known = true;
  t.role = role;
  return g.add_tensor(std::move(t));
}

void add_update(Graph& g, const std::string& name, std::string_view type, std::vector<TensorId> inputs,
                std::vector<TensorId> outputs, std::map<std::string, Attribute> attrs) {
  Op op;
  op.name = name;
  op.type = type;
  op.domain = kMemplanDomain;
  op.inputs = std::move(inputs);
  op.outputs = std::move(outputs);
  op.attrs = std::move(attrs);
  op.phase = Phase::optimizer;
  g.add_op(std::move(op));
}

bool is_adam(Optimizer o) { return o == Optimizer::adam || o == Optimizer::adamw; }

TensorId scalar(Graph& g, const std::string& name, DType dtype) {
  Tensor t;
  t.name = unique_name(g, name);
  t.dtype = dtype;
  t.rank_known = true;
  t.role = TensorRole::optimizer_state;
  return g.add_tensor(std::move(t));
}

// GradScaler's unscale_ before the step (torch._amp_foreach_non_finite_check_and_unscale_): one AmpUnscale per weight
// gradient, in param_grads order, multiplies it by 1 / scale in place and sets found_inf where it is not finite (the
// first one resets found_inf). A gradient the backward pass made becomes an activation that its unscaled value
// overwrites (the planner's in-place aliasing: one buffer, as PyTorch's in-place unscale); an accumulated gradient is
// rewritten outside the arena. Points param_grads at the unscaled gradients; returns the step's final found_inf.
TensorId add_unscale(Graph& g, TrainingGraph& tg) {
  tg.found_inf = scalar(g, "amp/found_inf", DType::f32);
  TensorId found = tg.found_inf;
  for (std::size_t k = 0; k < tg.param_grads.size(); ++k) {
    const TensorId w = tg.param_grads[k].first, scaled = tg.param_grads[k].second;
    if (rewritten_source(g, scaled) == kNoTensor) g.tensors[scaled].role = TensorRole::activation;
    const TensorId unscaled = like(g, scaled, "/unscaled", TensorRole::gradient);
    const TensorId next = like(g, tg.found_inf, "/updated", TensorRole::optimizer_state);
    add_update(g, "amp/unscale/" + g.tensors[w].name, memplan_ops::kAmpUnscale, {scaled, tg.loss_scale, found}, {unscaled, next},
               {{"reset", attr_i(k == 0 ? 1 : 0)}});
    tg.param_grads[k].second = unscaled;
    found = next;
  }
  return found;
}

// GradScaler's update() after the step: the scale halves when found_inf is set, doubles after 2000 clean steps
// (torch._amp_update_scale_, GradScaler's defaults); the growth tracker counts the clean steps.
void add_scale_update(Graph& g, TrainingGraph& tg, TensorId found, std::vector<TensorId>& outputs) {
  tg.growth_tracker = scalar(g, "amp/growth_tracker", DType::i32);
  const TensorId scale = like(g, tg.loss_scale, "/updated", TensorRole::optimizer_state);
  const TensorId tracker = like(g, tg.growth_tracker, "/updated", TensorRole::optimizer_state);
  add_update(g, "amp/update_scale", memplan_ops::kAmpUpdateScale, {tg.loss_scale, tg.growth_tracker, found}, {scale, tracker},
             {{"growth_factor", attr_f(2.0)}, {"backoff_factor", attr_f(0.5)}, {"growth_interval", attr_i(2000)}});
  tg.optimizer_state.insert(tg.optimizer_state.end(), {tg.loss_scale, tg.growth_tracker, tg.found_inf});
  outputs.insert(outputs.end(), {scale, tracker});
}

}  // namespace

// Each update rewrites its weight and state in place (OpInfo::rewrites): the outputs are new tensor ids
// for the values after the step, over the same storage, so the graph stays one assignment per tensor
// while the planner and runtime give them no bytes of their own (docs/training-recipes.md).
void add_optimizer(Graph& g, const TrainingOptions& opts, TrainingGraph& tg) {
  std::vector<TensorId> outputs{tg.loss};
  // Running statistics written by BatchNormTraining are results of the step too.
  for (const Op& op : g.ops)
    if (op.type == memplan_ops::kBatchNormTraining)
      for (std::size_t i = 1; i <= 2; ++i) outputs.push_back(op.outputs.at(i));
  // fp16 loss scaling: every update reads found_inf and is skipped when it is set (GradScaler.step).
  const TensorId found = tg.loss_scale != kNoTensor ? add_unscale(g, tg) : kNoTensor;
  auto and_found = [&](std::vector<TensorId> inputs) {
    if (found != kNoTensor) inputs.push_back(found);
    return inputs;
  };
  TensorId step = kNoTensor;
  if (is_adam(opts.optimizer) && !tg.param_grads.empty()) {
    Tensor t;
    t.name = unique_name(g, "adam/step");
    t.dtype = DType::f32;
    t.rank_known = true;
    t.role = TensorRole::optimizer_state;
    const TensorId old = g.add_tensor(std::move(t));
    step = like(g, old, "/updated", TensorRole::optimizer_state);
    add_update(g, "optimizer/AdamStep", memplan_ops::kAdamStep, and_found({old}), {step}, {});
    tg.optimizer_state.push_back(old);
    outputs.push_back(step);
  }
  const Attribute lr = attr_f(opts.learning_rate), wd = attr_f(opts.weight_decay);
  for (const auto& [w, grad] : tg.param_grads) {
    const std::string name = "optimizer/" + g.tensors[w].name;
    if (opts.optimizer == Optimizer::none) {
      outputs.push_back(grad);
      continue;
    }
    const TensorId nw = like(g, w, "/updated", TensorRole::weight);
    std::vector<TensorId> state_in, state_out;
    if (opts.optimizer == Optimizer::sgd) {
      add_update(g, name, memplan_ops::kSGDUpdate, and_found({w, grad}), {nw}, {{"lr", lr}, {"weight_decay", wd}});
    } else if (opts.optimizer == Optimizer::momentum) {
      state_in = {like(g, w, "/momentum", TensorRole::optimizer_state)};
      state_out = {like(g, w, "/momentum/updated", TensorRole::optimizer_state)};
      add_update(g, name, memplan_ops::kMomentumUpdate, and_found({w, grad, state_in[0]}), {nw, state_out[0]},
                 {{"lr", lr}, {"momentum", attr_f(opts.momentum)}, {"weight_decay", wd}});
    } else {
      state_in = {like(g, w, "/adam_m", TensorRole::optimizer_state), like(g, w, "/adam_v", TensorRole::optimizer_state)};
      state_out = {like(g, w, "/adam_m/updated", TensorRole::optimizer_state),
                   like(g, w, "/adam_v/updated", TensorRole::optimizer_state)};
      add_update(g, name, memplan_ops::kAdamUpdate, and_found({w, grad, state_in[0], state_in[1], step}), {nw, state_out[0], state_out[1]},
                 {{"lr", lr}, {"beta1", attr_f(opts.adam_beta1)}, {"beta2", attr_f(opts.adam_beta2)},
                  {"epsilon", attr_f(opts.adam_epsilon)}, {"weight_decay", wd},
                  {"decoupled", attr_i(opts.optimizer == Optimizer::adamw ? 1 : 0)}});
    }
    tg.updated_weights.push_back(nw);
    outputs.push_back(nw);
    tg.optimizer_state.insert(tg.optimizer_state.end(), state_in.begin(), state_in.end());
    outputs.insert(outputs.end(), state_out.begin(), state_out.end());
  }
  if (found != kNoTensor) add_scale_update(g, tg, found, outputs);
  for (TensorId t : g.outputs) g.tensors[t].is_graph_output = false;
  g.outputs = std::move(outputs);
  for (TensorId t : g.outputs) g.tensors[t].is_graph_output = true;
}

}  // namespace memplan::analysis::autodiff
