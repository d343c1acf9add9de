// What an eager framework (PyTorch's caching allocator) would hold at its peak running a plan's schedule.
#pragma once

#include <cstdint>

#include <vector>

#include "analysis/graph.hpp"
#include "analysis/training.hpp"
#include "planner/plan.hpp"

namespace memplan::planner {

struct EagerOptions {
  // How torch.optim runs step(): what it allocates beside the parameters and their state (eager_model.cpp).
  analysis::OptimizerImpl optimizer_impl = analysis::OptimizerImpl::foreach;
  bool timeline = false;  // fill EagerPeak::live
  // The loop holds the model's output until the step ends (`out = model(x); loss = loss_fn(out, y)`, as
  // memplan_torch.estimate_step's loop does); false: the loss is taken inline (`loss_fn(model(x), y)`) and the
  // output dies at its last use.
  bool hold_outputs = false;
};

struct EagerPeak {
  std::uint64_t peak_bytes = 0;       // resident + activations + gradients at the worst step
  std::uint64_t resident_bytes = 0;   // weights, optimizer state and graph inputs: held for the whole step
  std::uint32_t peak_step = 0;
  std::vector<std::uint64_t> live;    // with EagerOptions::timeline: bytes live beside resident_bytes at each step
};

// An eager framework allocates each tensor when its op runs and frees it after its last use; it shares
// storage only for views and in-place ops (the plan's aliases); weight gradients are allocated when the
// backward produces them and held to the end of the step (gradients set to None between steps). So
// live(s) = bytes of the plan's buffers live at step s + gradients produced up to s + the loss's storage
// (below), less the buffers PyTorch never allocates (eager_views.hpp). Used to predict PyTorch's measured peak from
// the same schedule.
//
// PyTorch's mse_loss with reduction mean/sum (a structured op since 2.9) allocates its output at the full
// elementwise shape in the meta function and shrinks it with resize_({}), which keeps the storage
// (pytorch/pytorch#185647): the 0-dim loss holds a prediction-sized block from the loss's step to the end of
// the step (the caller holds the loss), and the mean is taken over a second prediction-sized temporary live
// at the loss's step alone. With a large output (a language model's logits) that is one more logits-sized
// block across the whole backward.
//
// Under torch.autocast the low-precision copy of a weight (a forward Cast of a weight) is cached until the
// forward pass (the loss included) ends, and longer when a backward op saved it.
//
// PyTorch's F.cross_entropy(logits, labels) (aten LossNLL.cpp cross_entropy_loss: nll_loss_nd(log_softmax(x)))
// against memplan's CrossEntropyLoss, which keeps only the logits and a logsumexp per row:
// - forward: log_softmax allocates fp32 log-probabilities of the logits' size, saved (LogSoftmaxBackward saves
//   its result, NllLossBackward its input) until log_softmax's backward has run. nll_loss's own outputs are
//   scalars. fp32 logits are freed after their last forward use (the loss). Under autocast 16-bit logits go
//   to fp32 log-probabilities in one log_softmax(dtype=float), with a temporary of the logits' size and dtype
//   while it runs, and stay until the backward.
// - backward: nll_loss_backward allocates a zeroed logits-sized fp32 gradient (cuda/Loss.cu), then
//   log_softmax_backward the logits' gradient (the plan's dy). fp32: log-probabilities, nll gradient and logits
//   gradient live at once. 16-bit logits: logits, log-probabilities and nll gradient at once; the 16-bit logits
//   gradient is made once the nll gradient is freed (as measured: bench/results/cnn_gpu_h100_2026-11-24/ce_probe.txt).
// optimizer.step() (the optimizer ops: SGDUpdate, MomentumUpdate, AdamUpdate, their attributes) allocates
// temporaries while every gradient is still held (optimizer_step_temporaries); the updates themselves are in
// place, so an updated weight or state (OpInfo::rewrites) is never counted apart from its storage. With
// gradient accumulation the accumulators (role gradient, no producer) are resident for the whole step.
EagerPeak eager_peak(const analysis::Graph& g, const Plan& plan, const EagerOptions& options = {});

// The most bytes torch.optim's step() holds in temporaries at once, from the update ops in `order` (the
// parameters in order), each size rounded up to `alignment`:
// - foreach (_multi_tensor_*): one list per parameter group. Adam/AdamW: torch._foreach_sqrt(exp_avg_sq),
//   parameter-sized (Adam's weight_decay intermediate torch._foreach_add(grads, params) is deleted before it);
//   SGD and momentum: the weight_decay intermediate when weight_decay > 0, else nothing.
// - for-loop (_single_tensor_*): one parameter's at a time. Adam: exp_avg_sq.sqrt() and its division by
//   sqrt(bias_correction2) (two), grad.add(param) with L2 weight decay (one), while the previous parameter's
//   denom is still referenced; SGD and momentum: grad.add(param) with weight_decay > 0.
// - fused (_fused_*): none.
std::uint64_t optimizer_step_temporaries(const analysis::Graph& g, const std::vector<analysis::OpId>& order,
                                         analysis::OptimizerImpl impl, std::uint64_t alignment);

}  // namespace memplan::planner
