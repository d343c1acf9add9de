// The executor: runs a plan's schedule op by op on any backend, every arena tensor at its planned offset.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "analysis/graph.hpp"
#include "planner/plan.hpp"
#include "runtime_allocator/arena.hpp"
#include "runtime_allocator/backend.hpp"
#include "runtime_allocator/collectives/grad_sync.hpp"
#include "runtime_allocator/pool.hpp"
#include "runtime_allocator/collectives/zero_shard.hpp"

namespace memplan::runtime {

struct ExecOptions {
  // Every tensor in its own buffer, the plan's offsets and aliases ignored (only its schedule is used,
  // or the graph's topological order when the plan has none): the reference a plan must reproduce.
  bool unshared = false;
  bool check_bounds = true;  // arena bounds checks in release builds too
  PoolOptions pool;          // for staging buffers (allocated when the first op stages)
  // Weights kept as external data and never loaded get deterministic stand-in values (benchmarks of
  // models whose weights are not at hand) instead of ErrorKind::io.
  bool synthesize_missing_weights = false;
  // Time every op on its own (the backend synchronized before and after it; ExecStats::op_seconds): a
  // profile of where a step's time goes, at the price of one synchronization per op.
  bool profile_ops = false;
  // Data parallel: the weight gradients reduced across ranks through the collectives, overlapped with the
  // backward (runtime_allocator/collectives/grad_sync.hpp); none by default.
  DataParallel data_parallel;
};

struct ExecStats {
  std::uint64_t arena_bytes = 0;     // the plan's arena (0 unshared)
  std::uint64_t touched_bytes = 0;   // highest arena byte the last run wrote
  // The one resident allocation holding every tensor outside the arena at aligned offsets: inputs,
  // weights, optimizer state, produced tensors the plan keeps outside the arena (gradients, updated
  // weights), and, unshared, everything.
  std::uint64_t separate_bytes = 0;
  std::uint64_t pool_peak_bytes = 0; // staging buffers of ops whose outputs overlap inputs unsafely
  std::uint64_t host_bytes = 0;      // the one host allocation of tensors placed on the host (swapped-out copies)
  std::size_t ops_run = 0;           // per run
  std::size_t views_elided = 0;      // view ops whose output is their input's bytes: nothing copied
  std::size_t inplace_ops = 0;       // ops that wrote over an input, as planned
  std::size_t staged_ops = 0;        // ops whose outputs overlapped inputs unsafely: computed aside, then copied
  std::size_t concats_in_place = 0;  // Concats whose inputs were written into their slices of the output: not run
  double seconds = 0.0;              // the last run, inputs and outputs copied included
  double device_seconds = 0.0;       // the last run's schedule as the backend timed it (a GPU: events)
  // The last run's host time to issue its schedule (before waiting for the device): near device_seconds, a GPU step
  // is bound by launching its kernels, not by running them.
  double issue_seconds = 0.0;
  std::vector<double> op_seconds;    // ExecOptions::profile_ops: per op id, the last run's wall seconds
  std::size_t reduce_calls = 0;      // data parallel: all-reduces per run (gradient buckets)
  std::uint64_t reduced_bytes = 0;   // data parallel: gradient bytes reduced per run
  ZeroStats zero;                    // DataParallel::zero_stage: what the rank holds and gathers
};

// Built once (the arena, weights and buffers are allocated here), then `run` may be called for many
// steps. The graph must be shaped (analysis::infer_shapes) and every weight it reads must carry data
// (ImportOptions::keep_weight_data, load_external_weights). The plan is NOT verified here: callers run
// planner::require_valid first (a test runs a broken plan on purpose). Errors: ErrorKind::plan_mismatch
// for a plan of another graph, ErrorKind::unsupported for an op without a kernel (before anything runs),
// ErrorKind::usage for inputs of the wrong number, dtype or shape, ErrorKind::runtime from the backend.
// SwapOut/SwapIn (domain memplan) copy between the backend's memory and its host memory on the copy
// queue: a SwapOut's source bytes are overwritten (by an output or a scratch region) only after its copy,
// and a SwapIn's result is read only after its copy.
class Executor {
 public:
  Executor(const analysis::Graph& g, const planner::Plan& plan, Backend& backend, ExecOptions options = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // One value per graph input (g.inputs order); returns one per graph output (g.outputs order).
  std::vector<analysis::TensorData> run(const std::vector<analysis::TensorData>& inputs);
  // The same with the inputs by name; ErrorKind::usage for a graph input without a value.
  std::vector<analysis::TensorData> run(const std::map<std::string, analysis::TensorData>& inputs);
  // Runs the schedule on whatever inputs the backend holds (a benchmark's repeated steps); returns the
  // seconds the backend measured.
  double run_device();
  // The bytes tensor t holds now (a gradient or an updated weight after a training step);
  // ErrorKind::usage for a tensor without memory. Under ZeRO a sharded optimizer state tensor reads as this rank's
  // shard (1-D), and a reduced gradient is the mean over the ranks only in this rank's chunks of its bucket.
  analysis::TensorData read(analysis::TensorId t) const;
  const ExecStats& stats() const noexcept { return stats_; }
  // Where tensor t lives on the backend (null for a tensor nothing reads or writes).
  std::byte* address(analysis::TensorId t) const noexcept { return addr_[t]; }
  // Data parallel: the gradient buckets each run reduces (empty without ExecOptions::data_parallel).
  const std::vector<GradBucket>& gradient_buckets() const noexcept;

 private:
  enum class Mode : std::uint8_t { direct, view, inplace, staged, swap, concat_in_place };
  struct HostBlock {  // a tensor placed on the host
    std::byte* p = nullptr;
    std::uint64_t bytes = 0;
  };
  void check_supported() const;
  void bind_planned(const planner::Plan& plan);
  void bind_unshared();
  void bind_scratch(const planner::Plan& plan);
  void place_separate(analysis::TensorId t);
  void bind_separate();
  void upload_constants();
  void prepare_ops();
  bool concat_done(const analysis::Op& op) const;
  void order_swaps();
  void prepare_gradient_sync();
  std::vector<bool> placed_tensors() const;
  bool touches(std::size_t step, const std::byte* lo, const std::byte* hi) const;
  void run_schedule();
  void run_one(std::size_t step, std::vector<TensorRef>& in, std::vector<TensorRef>& out);
  TensorRef ref(analysis::TensorId t, std::byte* at) const;

  const analysis::Graph& g_;
  Backend& backend_;
  ExecOptions options_;
  std::vector<analysis::OpId> schedule_;
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<PoolAllocator> pool_;  // staging buffers only; made when the first op stages
  DeviceBuffer resident_;                // every tensor outside the arena, at aligned offsets
  HostBlock host_;                       // every tensor on the host, freed with the executor
  std::vector<analysis::TensorId> resident_list_, host_list_;  // placed, bound by bind_separate
  std::vector<std::byte*> addr_;
  std::vector<std::byte*> staging_;  // per op: one block for all outputs when staged
  std::vector<std::byte*> scratch_;  // per op: its scratch region in the arena, or null
  std::vector<std::uint64_t> scratch_bytes_;
  std::vector<Mode> mode_;           // per op
  std::vector<Backend::Event> swap_ready_, swap_done_;       // per op (swaps only): before and after the copy
  std::vector<std::vector<analysis::OpId>> waits_before_;   // per schedule step: swaps whose copies must be done
  std::unique_ptr<GradientSync> grad_sync_;  // data parallel only
  std::vector<bool> zero_state_;             // ZeRO: optimizer state held as shards by zero_, not placed here
  std::unique_ptr<ZeroOptimizer> zero_;
  ExecStats stats_;
  std::uint64_t runs_ = 0;  // runs so far: the random step of the next (dropout_mask.hpp, step_key)
};

}  // namespace memplan::runtime
