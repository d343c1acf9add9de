// What an eager framework (PyTorch's caching allocator) would hold at its peak running a plan's schedule.
#pragma once

#include <cstdint>

#include "analysis/graph.hpp"
#include "planner/plan.hpp"

namespace memplan::planner {

struct EagerPeak {
  std::uint64_t peak_bytes = 0;       // resident + activations + gradients at the worst step
  std::uint64_t resident_bytes = 0;   // weights, optimizer state and graph inputs: held for the whole step
  std::uint32_t peak_step = 0;
};

// An eager framework allocates each tensor when its op runs and frees it after its last use; it shares
// storage only for views and in-place ops (the plan's aliases); weight gradients are allocated when the
// backward produces them and held to the end of the step (gradients set to None between steps). So
// live(s) = bytes of the plan's buffers live at step s + gradients produced up to s + the loss's storage
// (below). Used to predict PyTorch's measured peak from the same schedule.
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
//   its result, NllLossBackward its input) until log_softmax's backward has run. Under autocast cross_entropy
//   runs in fp32: non-fp32 logits are first copied to fp32, a copy alive while the loss runs. nll_loss's own
//   outputs are scalars. The logits themselves are freed after their last forward use (the loss).
// - backward: nll_loss_backward allocates a zeroed logits-sized fp32 gradient (cuda/Loss.cu), then
//   log_softmax_backward an fp32 logits-sized result: log-probabilities, nll gradient and logits gradient live
//   at once; with non-fp32 logits ToCopyBackward then makes the gradient in their dtype (the plan's dy).
EagerPeak eager_peak(const analysis::Graph& g, const Plan& plan);

}  // namespace memplan::planner
