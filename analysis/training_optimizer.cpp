// The optimizer step after backward: SGD, momentum, Adam or AdamW updates in place over weights and state.
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
  TensorId step = kNoTensor;
  if (is_adam(opts.optimizer) && !tg.param_grads.empty()) {
    Tensor t;
    t.name = unique_name(g, "adam/step");
    t.dtype = DType::f32;
    t.rank_known = true;
    t.role = TensorRole::optimizer_state;
    const TensorId old = g.add_tensor(std::move(t));
    step = like(g, old, "/updated", TensorRole::optimizer_state);
    add_update(g, "optimizer/AdamStep", memplan_ops::kAdamStep, {old}, {step}, {});
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
      add_update(g, name, memplan_ops::kSGDUpdate, {w, grad}, {nw}, {{"lr", lr}, {"weight_decay", wd}});
    } else if (opts.optimizer == Optimizer::momentum) {
      state_in = {like(g, w, "/momentum", TensorRole::optimizer_state)};
      state_out = {like(g, w, "/momentum/updated", TensorRole::optimizer_state)};
      add_update(g, name, memplan_ops::kMomentumUpdate, {w, grad, state_in[0]}, {nw, state_out[0]},
                 {{"lr", lr}, {"momentum", attr_f(opts.momentum)}, {"weight_decay", wd}});
    } else {
      state_in = {like(g, w, "/adam_m", TensorRole::optimizer_state), like(g, w, "/adam_v", TensorRole::optimizer_state)};
      state_out = {like(g, w, "/adam_m/updated", TensorRole::optimizer_state),
                   like(g, w, "/adam_v/updated", TensorRole::optimizer_state)};
      add_update(g, name, memplan_ops::kAdamUpdate, {w, grad, state_in[0], state_in[1], step}, {nw, state_out[0], state_out[1]},
                 {{"lr", lr}, {"beta1", attr_f(opts.adam_beta1)}, {"beta2", attr_f(opts.adam_beta2)},
                  {"epsilon", attr_f(opts.adam_epsilon)}, {"weight_decay", wd},
                  {"decoupled", attr_i(opts.optimizer == Optimizer::adamw ? 1 : 0)}});
    }
    tg.updated_weights.push_back(nw);
    outputs.push_back(nw);
    tg.optimizer_state.insert(tg.optimizer_state.end(), state_in.begin(), state_in.end());
    outputs.insert(outputs.end(), state_out.begin(), state_out.end());
  }
  for (TensorId t : g.outputs) g.tensors[t].is_graph_output = false;
  g.outputs = std::move(outputs);
  for (TensorId t : g.outputs) g.tensors[t].is_graph_output = true;
}

}  // namespace memplan::analysis::autodiff
