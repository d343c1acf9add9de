// What a training step is built with (TrainingOptions) and what it is (TrainingGraph): the types the training-graph
// builder (training.hpp) and the per-family backward rules (autodiff.hpp) share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "analysis/graph.hpp"

namespace memplan::analysis {

// Optimizers as PyTorch runs them: every update is in place (the weight and its state are the same
// storage before and after the step; docs/training-recipes.md). adamw decouples weight decay.
enum class Optimizer { none, sgd, momentum, adam, adamw };
const char* optimizer_name(Optimizer o) noexcept;
// "none", "sgd", "momentum", "adam", "adamw"; anything else: nullopt.
std::optional<Optimizer> optimizer_from_name(std::string_view name) noexcept;

// How PyTorch's optimizer runs its step (what it allocates during step(): foreach, its default on CUDA,
// makes per-parameter-group temporaries; fused makes none; for_loop one parameter's at a time). The
// planned step is the same; only pytorch_peak_bytes depends on it.
enum class OptimizerImpl { foreach, fused, for_loop };
const char* optimizer_impl_name(OptimizerImpl i) noexcept;
std::optional<OptimizerImpl> optimizer_impl_from_name(std::string_view name) noexcept;  // "foreach" "fused" "for-loop"

// mse: mean squared error against a float target of the output's shape; ce: cross-entropy against integer
// class labels over the output's class axis (PyTorch's F.cross_entropy); none: the model's first float
// output is already the loss (a scalar, or summed), its gradient seeded with ones.
enum class Loss { mse, ce, none };
const char* loss_name(Loss l) noexcept;
std::optional<Loss> loss_from_name(std::string_view name) noexcept;

// fp32: everything fp32. bf16 / fp16: torch.autocast's op lists (analysis/autocast.hpp).
enum class Precision { fp32, bf16, fp16 };
const char* precision_name(Precision p) noexcept;
std::optional<Precision> precision_from_name(std::string_view name) noexcept;

struct TrainingOptions {
  Optimizer optimizer = Optimizer::sgd;
  double learning_rate = 0.01;
  double momentum = 0.9;        // Optimizer::momentum: v = momentum * v + g
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_epsilon = 1e-8;
  double weight_decay = 0.0;    // sgd/momentum/adam: added to the gradient (L2); adamw: decoupled
  OptimizerImpl optimizer_impl = OptimizerImpl::foreach;
  // Weights never trained even when the rule of docs/saved-tensors.md says they are (by name).
  std::vector<std::string> frozen;
  // mse: loss = ReduceMean((y - target)^2) of the first float graph output y against a new graph input
  // "target" of y's shape. ce: a new int64 graph input "labels" of y's shape without the class axis.
  Loss loss = Loss::mse;
  // ce: the class axis of y; nullopt: 1 for rank 2 and rank >= 4 (classification, segmentation), the last
  // axis for rank 3 (a language model's [batch, seq, vocab] logits).
  std::optional<std::int64_t> class_axis;
  // ce: when the output is a MatMul (+ a bias) over the last axis, the head and the loss become one
  // LinearCrossEntropy over chunks of rows (the logits never whole); a usage error when the output is not.
  bool chunked_loss = false;
  Precision precision = Precision::fp32;
  bool loss_scaling = false;    // fp16: a dynamic loss scale (GradScaler): unscale and inf check per step
  // Gradient accumulation: the planned step is one micro-step of the batch the graph's shapes give; the
  // gradients are accumulated in persistent buffers across `microbatches` micro-steps (1: none).
  std::int64_t microbatches = 1;
};

struct TrainingGraph {
  // Ops in execution order (PyTorch's): forward (phase forward, in file order), the loss (forward),
  // backward ops (phase backward, in reverse order of their forward ops), optimizer ops (phase optimizer).
  Graph graph;
  TensorId loss = kNoTensor;                              // scalar float, the first graph output
  // (weight, its gradient: role gradient). With microbatches > 1 the gradient is the accumulator after this
  // micro-step's GradAccumulate (persistent, rewritten in place), which the optimizer reads.
  std::vector<std::pair<TensorId, TensorId>> param_grads;
  std::vector<TensorId> saved_for_backward;  // forward activations and graph inputs read by backward ops
  // The optimizer's persistent state (role optimizer_state, no producer): momentum buffers, Adam's moments
  // per weight, and Adam's step count. The updates rewrite them in place (OpInfo::rewrites).
  std::vector<TensorId> optimizer_state;
  // Per param_grads entry, the weight after the update: the same storage as the weight (empty: none).
  std::vector<TensorId> updated_weights;
  // microbatches > 1: per param_grads entry, the gradient accumulator's storage (role gradient, no producer,
  // zero before the first micro-step, as PyTorch's .grad held across micro-steps).
  std::vector<TensorId> grad_accumulators;
  // loss_scaling: the persistent loss scale (float32 scalar, role optimizer_state, 65536 before the first step), the
  // growth tracker (int32: clean steps since the scale last changed) and found_inf (float32: 1 when a gradient of
  // this step was not finite, so the updates were skipped); all three are in optimizer_state too.
  TensorId loss_scale = kNoTensor;
  TensorId growth_tracker = kNoTensor;
  TensorId found_inf = kNoTensor;
};

}  // namespace memplan::analysis
