// What PyTorch's data-parallel layouts (DDP, ZeroRedundancyOptimizer, FSDP2) hold on each rank: the eager model's
// timeline of one rank's step, with the layout's model state and buffers in place of the single GPU's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/graph.hpp"
#include "planner/step.hpp"

namespace memplan::planner {

// The layouts, as their documentation sets them up:
// - ddp (--zero 0): DistributedDataParallel. Its reducer allocates one flat gradient bucket per bucket of parameters
//   at construction (reverse registration order; the first bucket closed at 1 MiB, the others at 25 MiB) and keeps
//   them; gradients are copied in. It rebuilds the buckets in the second step, and the first step's NCCL work objects
//   hold the old ones until the process group's watchdog thread releases them: the run's peak holds both.
// - zero1 (--zero 1): DDP with ZeroRedundancyOptimizer: each rank holds the optimizer state and step() temporaries of
//   its parameters, assigned largest first to the rank with the fewest elements so far (ties to the lowest rank).
// - fsdp2 (--zero 3; --zero 2 without resharding after forward): fully_shard per block (the parameter units of
//   parallel.hpp) and the root (the weights outside blocks): weights, gradients and optimizer state as dim-0 shards
//   padded to the first rank's; a block's weights all-gathered for its forward and again for its backward (the
//   previous block's prefetched as it starts), the root's from the first forward op to the end of the backward; a
//   block's gradients unsharded until its backward ends, then reduce-scattered through an fp32 buffer of the
//   unsharded size. bf16 means MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): unsharded weights and
//   gradients in bf16.
enum class PytorchLayout { ddp, zero1, fsdp2 };
const char* pytorch_layout_name(PytorchLayout l) noexcept;

struct PytorchRankPeak {
  std::vector<int> ranks;            // the ranks with these figures
  std::uint64_t step_peak_bytes = 0; // a steady-state step's max_memory_allocated, workspaces included
  std::uint64_t peak_bytes = 0;      // the run's max_memory_allocated (DDP's bucket rebuild included)
  std::uint64_t model_state_bytes = 0;  // weights, optimizer state and buckets the rank holds between steps
};

struct PytorchDataParallel {
  PytorchLayout layout = PytorchLayout::ddp;
  int world_size = 1;
  bool reshard_after_forward = true;  // fsdp2
  std::uint64_t bucket_bytes = 0;     // ddp, zero1: the gradient buckets
  std::vector<PytorchRankPeak> roles; // ranks with equal figures grouped
  std::vector<std::string> doubts;    // where the prediction guessed
};

// `zero`: 0 -> ddp, 1 -> zero1, 2 -> fsdp2 without resharding after forward, 3 -> fsdp2. `shaped_forward` holds one
// rank's batch.
PytorchDataParallel predict_pytorch_data_parallel(const analysis::Graph& shaped_forward, const StepRequest& req,
                                                  const PytorchEager& eager, int world_size, int zero);

// DDP's buckets for gradients of `bytes` (registration order): PyTorch's assignment and the allocator's rounding.
std::uint64_t ddp_bucket_bytes(const std::vector<std::uint64_t>& bytes, std::uint64_t first_cap, std::uint64_t cap);
// ZeroRedundancyOptimizer's partition of parameters of `numel` elements over `world` ranks: the rank of each.
std::vector<int> zero_redundancy_partition(const std::vector<std::uint64_t>& numel, int world);

}  // namespace memplan::planner
