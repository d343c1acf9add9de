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
EagerPeak eager_peak(const analysis::Graph& g, const Plan& plan);

}  // namespace memplan::planner
