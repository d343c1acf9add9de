// Per-rank plans of a training step spread over GPUs: data parallel with ZeRO 0-3, tensor and pipeline parallel.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "analysis/training.hpp"
#include "planner/training_plan.hpp"

namespace memplan::planner {

// The most GPUs a layout may have (docs/errors.md): a rank role lists its ranks, so a layout's cost grows with its GPUs.
inline constexpr int kMaxGpus = 65536;

enum class PipelineSchedule : std::uint8_t { one_f_one_b, gpipe };
const char* pipeline_schedule_name(PipelineSchedule s) noexcept;

// N = data parallel x tp x pp GPUs (docs/multi-gpu.md). The graph's batch is one microbatch of one
// data-parallel rank (Megatron's and DeepSpeed's micro_batch_size): the global batch of a step is
// batch x microbatches x data_parallel().
struct ParallelOptions {
  int gpus = 1;
  int zero = 0;          // 0 plain data parallel, 1 optimizer state, 2 + gradients, 3 + parameters (FSDP)
  int tp = 1;            // tensor parallel degree (Megatron column/row pairs)
  int pp = 1;            // pipeline stages
  int microbatches = 1;  // per step and data-parallel rank: pipeline microbatches, else gradient accumulation
  PipelineSchedule pp_schedule = PipelineSchedule::one_f_one_b;
  bool sequence_parallel = false;
  int data_parallel() const noexcept {
    const std::int64_t degrees = static_cast<std::int64_t>(tp) * pp;  // never wraps: both are ints
    return degrees > 0 ? static_cast<int>(gpus / degrees) : 0;
  }
};

// ErrorKind::usage naming the option and its range: gpus outside 1..kMaxGpus or not a multiple of tp x pp (the
// product taken without wrapping), zero outside 0-3, a degree below 1, sequence parallel without tp > 1.
void check_parallel_options(const ParallelOptions& o);

// Bytes one rank sends per step, by collective (ring algorithms: an all-reduce of B bytes over n ranks
// sends 2(n-1)/n B, a reduce-scatter or all-gather of B (unsharded) bytes (n-1)/n B), and pipeline
// sends (activations forward, their gradients backward).
struct CommunicationBytes {
  std::uint64_t all_reduce = 0, reduce_scatter = 0, all_gather = 0, send_recv = 0;
  std::uint64_t total() const noexcept { return all_reduce + reduce_scatter + all_gather + send_recv; }
  CommunicationBytes& operator+=(const CommunicationBytes& o) noexcept;
};
// Bytes a rank sends in a ring collective over `ranks` ranks moving `bytes` unsharded bytes.
std::uint64_t ring_all_reduce_bytes(std::uint64_t bytes, int ranks) noexcept;
std::uint64_t ring_shard_bytes(std::uint64_t bytes, int ranks) noexcept;  // reduce-scatter or all-gather
// Seconds for a rank to send `bytes` over the interconnect (profile.interconnect_bytes_per_s).
double communication_seconds(const CommunicationBytes& c, const analysis::DeviceProfile& p);

// A parameter unit (FSDP's wrapped module, DeepSpeed's bucket): weights of one transformer block (names
// sharing the prefix up to the first layer index, e.g. "h.3" of "h.3.attn.c_attn.weight", or of the op
// that first reads them), in the order of their first forward use; runs of weights outside any block form
// units of their own.
struct ParameterUnit {
  std::string name;
  std::vector<std::size_t> params;  // indices into TrainingGraph::param_grads
  bool block = false;               // a transformer block's (a layer index in the names); false: weights outside blocks
};
std::vector<ParameterUnit> parameter_units(const analysis::TrainingGraph& tg);

struct ZeroSharding {
  std::size_t units = 0;
  std::uint64_t weight_bytes = 0, gradient_bytes = 0, optimizer_state_bytes = 0;  // the rank's model state
  std::uint64_t unsharded_weight_bytes = 0, unsharded_gradient_bytes = 0;
  CommunicationBytes communication;  // one step's gradient reduction and parameter gathers
};

// Rewrites a rank's training graph (built with microbatches 1) for data parallelism over `dp` ranks at
// ZeRO `stage`, inserting memplan::AllReduce / ReduceScatter / AllGather ops whose buffers the planner
// packs with real lifetimes: stage 0 all-reduces each unit's gradients in place once they are all made;
// 1 shards the optimizer state (1/dp of each tensor) and reduce-scatters the full gradients after the
// backward pass; 2 reduce-scatters each unit's gradients as soon as they are made (the full ones die
// there); 3 also shards the weights and all-gathers each unit's before its forward and again before its
// backward ops, one unit ahead (prefetch). The optimizer then updates shards. dp 1 leaves the graph alone.
ZeroSharding shard_data_parallel(analysis::TrainingGraph& tg, int dp, int stage);

// Bytes of the activations the backward pass reads (TrainingGraph::saved_for_backward in the arena, a view
// counted once with its source): what one microbatch in flight holds.
std::uint64_t saved_activation_bytes(const analysis::TrainingGraph& tg);

// One pipeline stage: a contiguous range of the forward ops.
struct PipelineStage {
  std::size_t first_op = 0, end_op = 0;   // [first, end) in the forward graph's op order
  double forward_seconds = 0.0;            // the cost model's time of its forward ops
  std::uint64_t boundary_bytes = 0;        // activations it sends to the next stage (per microbatch)
};
// Cuts the forward ops into `stages` ranges of balanced estimated time at points where the fewest
// activations cross (the residual stream between transformer blocks). ErrorKind::usage when the graph has
// fewer such points than stages - 1 (more stages than layers).
std::vector<PipelineStage> pipeline_cuts(const analysis::Graph& forward, int stages, const analysis::DeviceProfile& p);
// The forward graph of one stage: activations from earlier stages become graph inputs; a stage before the
// last outputs its boundary activations (their gradients seeded, as received from the next stage).
analysis::Graph pipeline_stage_graph(const analysis::Graph& forward, const PipelineStage& s, bool last);
// Microbatches whose saved activations stage `stage` (0-based) holds at once: 1F1B min(pp - stage, M), GPipe M.
int in_flight_microbatches(PipelineSchedule s, int pp, int stage, int microbatches) noexcept;

// Tensor parallel sharding of a forward graph (Megatron-LM): see parallel_tp.cpp.
struct TensorParallelReport {
  std::size_t column_ops = 0, row_ops = 0;      // weight matmuls split by output / input features
  std::size_t sharded_tensors = 0;              // activations and weights divided by tp
  std::size_t replicated_matmuls = 0;           // weight matmuls outside a recognised pair (kept whole)
  std::vector<std::string> replicated;          // their op names (first 16)
  std::uint64_t all_reduce_bytes_per_layer = 0; // unsharded bytes of the row outputs all-reduced, forward
  std::uint64_t all_reduce_bytes = 0;           // all of them, one microbatch's forward
  std::uint64_t replicated_weight_bytes = 0;    // weights outside the pairs (embeddings, norms, head): on every rank
  std::uint64_t sharded_weight_bytes = 0;       // a rank's share of the pairs' weights (unsharded: x tp)
  std::vector<std::string> tensor_parallel_ops;   // forward ops inside a pair (its matmuls and what lies between)
  std::vector<std::string> sequence_parallel_ops; // with sequence parallelism: forward ops holding s/tp of the sequence
  std::vector<std::int64_t> stream_dims;          // the residual stream's full shape (what the column matmuls read)
};
// Divides the weights and activations of each recognised column/row pair by `tp` (heads split) and
// inserts an all-reduce after each row-parallel matmul (with sequence parallelism: a reduce-scatter, and
// an all-gather before the column matmuls; the activations between pairs divided by tp along the
// sequence). ErrorKind::usage when a pair's output features or head count is not divisible by tp.
analysis::Graph shard_tensor_parallel(const analysis::Graph& forward, int tp, bool sequence_parallel, TensorParallelReport& report);
// Inserts the collectives of the pairs into a rank's training graph built from shard_tensor_parallel's graph
// (ops told apart by name: a backward op is its forward op's): Megatron's g, an in-place memplan::AllReduce of
// each row output, and f, one of each column input's gradient; with sequence parallelism it divides the
// sequence axis of what the sequence-parallel ops make (and of graph inputs they read) and gathers where others
// read those (memplan::AllGather, again in backward for the column weight gradients), reduce-scatters the
// row outputs and column input gradients into them. Returns the bytes a rank sends, one microbatch.
CommunicationBytes insert_tensor_parallel_collectives(analysis::TrainingGraph& tg, const TensorParallelReport& report, int tp, bool sequence_parallel);

// One rank role's plan (ranks with the same role plan the same step).
struct RankPlan {
  std::vector<int> ranks;  // global ranks: rank = stage * (dp * tp) + dp_index * tp + tp_index
  std::string role;        // rank_role_name: "stage 0 of 4, tp ranks 0-1 of 2", ...
  int stage = 0;
  TrainingPlanResult result;
  ZeroSharding zero;
  std::uint64_t model_state_bytes = 0;   // weights + gradients + optimizer state the rank holds
  std::uint64_t activation_bytes = 0;    // saved activations of the microbatches in flight (after remat/swap)
  std::uint64_t saved_bytes_per_microbatch = 0;
  int in_flight = 1;
  std::uint64_t peak_bytes = 0;          // result.peak_bytes + (in_flight - 1) saved activations
  std::uint64_t forward_ops = 0;
  double flops = 0.0;                    // one microbatch's step
  double compute_seconds = 0.0;          // one microbatch's step, cost model
  CommunicationBytes communication;      // per step
  bool least_memory = false;             // planned without the budget, which it could not meet (least_where_over_budget)
};

struct ParallelPlanResult {
  ParallelOptions options;
  std::vector<RankPlan> roles;
  std::vector<PipelineStage> stages;
  TensorParallelReport tensor_parallel;
  std::uint64_t unsharded_parameters = 0;  // elements of the trainable weights of the whole model
  double estimated_step_seconds = 0.0;     // compute (pipeline bubble included) + communication, not overlapped
  double communication_seconds = 0.0;      // of it, the slowest rank's
  bool fits = true;                        // every role under the budget (when one is given)
};

// Rank plans shared across layouts (fit --gpus): plan_training's result (or its infeasible error) per rank
// training graph, keyed by the graph's fingerprint, the role's place (tp, sp, pp, stage, ZeRO stage) and its
// budget. Ranks of ZeRO 0 at different data-parallel degrees plan one graph (the collectives' rank counts
// differ, not their buffers), as do the same microbatch's roles wherever they recur.
struct RolePlanCache {
  struct Entry {
    bool infeasible = false;
    std::string message;  // the infeasible error's
    TrainingPlanResult result;
  };
  std::map<std::string, Entry> entries;
  std::size_t hits = 0, misses = 0;
};

// Plans every rank role of a training step of `shaped_forward` (fused, shapes concrete) laid out by `par`,
// each through plan_training (remat and swap under options.budget_bytes, per GPU) and the verifier.
// With `cache`, a role whose training graph was planned before under the same budget reuses that plan. A
// budget a role cannot meet is ErrorKind::infeasible, or with `least_where_over_budget` that role is planned
// without it (its strategy's least memory, RankPlan::least_memory) and the result does not fit.
ParallelPlanResult plan_parallel(const analysis::Graph& shaped_forward, const analysis::TrainingOptions& training,
                                 const TrainingPlanOptions& options, const ParallelOptions& par, RolePlanCache* cache = nullptr,
                                 bool least_where_over_budget = false);

// Per rank role (pipeline stage order), a lower bound of its peak without planning it: the model state the
// rank holds (weights, gradients, optimizer state: all live at once when the optimizer runs) plus its graph
// inputs; and what tensor parallelism found. Usage errors as plan_parallel's (a tp that does not divide the
// heads, more stages than layers).
struct ParallelLowerBounds {
  std::vector<std::uint64_t> peak_bytes;
  TensorParallelReport tensor_parallel;
};
ParallelLowerBounds parallel_lower_bounds(const analysis::Graph& shaped_forward, const analysis::TrainingOptions& training,
                                          const TrainingPlanOptions& options, const ParallelOptions& par);

// "stage 1 of 2, tp ranks 0-1 of 2, data parallel x4"; "single GPU" for one GPU.
std::string rank_role_name(const ParallelOptions& par, int stage);

}  // namespace memplan::planner
