// Forward graph -> training step graph: MSE loss, backward ops with PyTorch's saved tensors, optimizer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "analysis/graph.hpp"
#include "analysis/training_options.hpp"

namespace memplan::analysis {

// The schedule of a training graph: its op order, which build_training_graph makes PyTorch's order.
std::vector<OpId> training_schedule(const TrainingGraph& tg);

// Requires every tensor's dtype and shape (analysis::infer_shapes). Errors: ErrorKind::shape for a
// tensor without a concrete shape, ErrorKind::unsupported for an op on the gradient path that has no
// backward rule (naming the op), ErrorKind::invalid_graph when no float output can carry the loss.
TrainingGraph build_training_graph(const Graph& shaped_forward, const TrainingOptions& opts = {});

// The trainable-weight rule of docs/saved-tensors.md, per tensor of `g` (true: gets a gradient).
std::vector<bool> trainable_weights(const Graph& g, const TrainingOptions& opts = {});

}  // namespace memplan::analysis
