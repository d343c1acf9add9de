// Forward graph -> training step graph: MSE loss, backward ops with PyTorch's saved tensors, optimizer.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "analysis/graph.hpp"

namespace memplan::analysis {

enum class Optimizer { none, sgd, momentum, adam };
const char* optimizer_name(Optimizer o) noexcept;
// "none", "sgd", "momentum", "adam"; anything else: nullopt.
std::optional<Optimizer> optimizer_from_name(std::string_view name) noexcept;

struct TrainingOptions {
  Optimizer optimizer = Optimizer::sgd;
  double learning_rate = 0.01;
  double momentum = 0.9;        // Optimizer::momentum: v = momentum * v + g
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_epsilon = 1e-8;
  // Weights never trained even when the rule of docs/saved-tensors.md says they are (by name).
  std::vector<std::string> frozen;
  // The loss is the mean squared error of the first float graph output against a new graph input
  // "target" of that output's shape: loss = ReduceMean((y - target)^2) over all elements.
};

struct TrainingGraph {
  // Ops in execution order (PyTorch's): forward (phase forward, in file order), the loss (forward),
  // backward ops (phase backward, in reverse order of their forward ops), optimizer ops (phase optimizer).
  Graph graph;
  TensorId loss = kNoTensor;                              // scalar float, the first graph output
  std::vector<std::pair<TensorId, TensorId>> param_grads;  // (weight, its gradient: role gradient)
  std::vector<TensorId> saved_for_backward;  // forward activations and graph inputs read by backward ops
  std::vector<TensorId> optimizer_state;     // role optimizer_state: initial values and updated values
  std::vector<TensorId> updated_weights;     // per param_grads entry, the optimizer's new weight (empty: none)
};

// The schedule of a training graph: its op order, which build_training_graph makes PyTorch's order.
std::vector<OpId> training_schedule(const TrainingGraph& tg);

// Requires every tensor's dtype and shape (analysis::infer_shapes). Errors: ErrorKind::shape for a
// tensor without a concrete shape, ErrorKind::unsupported for an op on the gradient path that has no
// backward rule (naming the op), ErrorKind::invalid_graph when no float output can carry the loss.
TrainingGraph build_training_graph(const Graph& shaped_forward, const TrainingOptions& opts = {});

// The trainable-weight rule of docs/saved-tensors.md, per tensor of `g` (true: gets a gradient).
std::vector<bool> trainable_weights(const Graph& g, const TrainingOptions& opts = {});

}  // namespace memplan::analysis
