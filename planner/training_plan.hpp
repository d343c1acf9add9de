// A training step planned under a device memory budget: strategy choice, transform, arena, verification.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/cost.hpp"
#include "analysis/training.hpp"
#include "planner/assign.hpp"
#include "planner/plan.hpp"
#include "planner/remat.hpp"
#include "planner/schedule.hpp"
#include "planner/verify.hpp"

namespace memplan::planner {

// none | sqrt | budget | optimal | swap | auto (docs/strategies.md).
const std::vector<std::string>& training_strategies();

struct TrainingPlanOptions {
  std::string strategy = "none";
  std::optional<std::uint64_t> budget_bytes;  // total device memory; none: the least each strategy reaches
  // Device memory beside the plan (CUDA context, cuBLAS/cuDNN workspaces): counted against the budget.
  std::uint64_t library_bytes = 0;
  analysis::DeviceProfile profile = analysis::default_device_profile();
  AssignOptions assign;
  ScheduleOptions schedule;  // the order of the training graph every strategy plans on
  // Strategy `exact` (docs/strategies.md): the keep / swap / recompute MILP on the forward stages coarsened to at
  // most exact_stages, each solve stopped after exact_nodes branch-and-bound nodes (the deterministic limit) or
  // exact_seconds (only a cap).
  std::size_t exact_stages = 300;
  std::uint64_t exact_nodes = 200;
  double exact_seconds = 20.0;
  double exact_gap = 0.001;  // each solve stops once its plan is within this share of the bound
};

// What strategy `exact` ran and proved: the MILP solve behind the plan it kept (its last solve where the segment
// DP's plan was kept). Costs and bounds in the model's seconds (remat_exact_segments.hpp: rebuild seconds plus
// swap_weight times the copy-back seconds of swaps), on `stages` plain stages.
struct ExactRematReport {
  bool ran = false;
  std::size_t stages = 0;
  std::size_t swappable = 0;     // stages whose copy back hides under the backward of the stage after them
  std::size_t solves = 0;        // MILP solves of the calibration
  std::size_t variables = 0;     // columns of the last solve
  std::string status;            // exact_status_name: optimal (proven), feasible (stopped at a limit), ...
  double dp_cost = 0.0;          // the segment DP's plan on the same stages and model budget (the MILP's start)
  double milp_cost = 0.0;        // the best plan the MILP found (never above dp_cost)
  double lower_bound = 0.0;      // no plan of the model costs less
  double gap = 0.0;              // (dp_cost - lower_bound) / dp_cost: the most the DP's plan can lose there
  double milp_gap = 0.0;         // (milp_cost - lower_bound) / milp_cost: the most the MILP's own plan can lose
  std::size_t swaps = 0;         // stages the MILP's plan swaps
  double seconds = 0.0;          // all solves
  std::uint64_t nodes = 0;       // all solves
  std::uint64_t model_budget = 0;
  // The MILP's plan was kept: its estimated step is faster than `optimal`'s (the segment DP with cheap
  // recomputation and partial stages on up to 128 stages), which `exact` plans too and keeps otherwise.
  bool used = false;
  double optimal_recompute_flops = 0.0;  // `optimal`'s plan (real recompute; infinity where it found none)
  double optimal_step_seconds = 0.0;     // its estimated step (infinity where it found none)
  double exact_step_seconds = 0.0;       // the MILP's fitted plan's estimated step (0: none fitted)
};

// A tensor the plan recomputes or swaps, and the layer (op) that makes it.
struct PlannedTensor {
  std::string tensor;
  std::string op;  // the forward op that makes it
  std::string op_type;
  std::uint64_t bytes = 0;
};

// Peak, one meaning everywhere (docs/training-recipes.md, "Honest answers"): the most device bytes the plan
// holds at once, persistent + inputs + arena; total device memory adds the libraries beside it.
struct TrainingPlanResult {
  std::string strategy;
  Graph graph;  // the training graph with recompute clones and swap ops
  Plan plan;
  VerifyReport report;
  // Weights + optimizer state (+ gradient accumulators with microbatches > 1), each once: the optimizer
  // rewrites them in place. Weight gradients of one step are planned in the arena.
  std::uint64_t persistent_bytes = 0;
  std::uint64_t weight_bytes = 0;            // of persistent_bytes: the weights (and BatchNorm running statistics)
  std::uint64_t optimizer_state_bytes = 0;   // of persistent_bytes: the optimizer state
  std::uint64_t library_bytes = 0;           // options.library_bytes
  std::uint64_t total_device_bytes = 0;      // peak_bytes + library_bytes
  std::uint64_t input_bytes = 0;             // graph inputs (batch, target)
  std::uint64_t activation_arena_bytes = 0;  // the planned arena
  std::uint64_t lower_bound_bytes = 0;       // most live tensor bytes at one step of the transformed graph, no sharing
  std::uint64_t peak_bytes = 0;              // persistent + inputs + arena: the peak
  std::uint64_t swap_bytes = 0;
  std::size_t recomputed_tensors = 0, swapped_tensors = 0, recompute_ops = 0;
  std::vector<PlannedTensor> recomputed, swapped;  // every one, largest first (ties by name)
  double training_flops = 0.0;   // one step without recomputation
  double forward_flops = 0.0;    // the forward ops (and loss) alone
  double recompute_flops = 0.0;
  double recompute_overhead = 0.0;  // recompute_flops / training_flops
  double estimated_step_seconds = 0.0;   // planner/step_time.hpp: compute, recompute and swap stalls
  double swap_stall_seconds = 0.0;       // of estimated_step_seconds: compute waiting for swap copies
  double keep_all_step_seconds = 0.0;    // the same estimate with everything kept (strategy none)
  double plan_seconds = 0.0;
  ScheduleResult schedule;  // the training graph's order (before recompute and swap ops), both peaks
  ExactRematReport exact;   // strategy `exact` under a budget
};

// Plans `tg` with options.strategy. Errors: ErrorKind::usage for an unknown strategy,
// ErrorKind::infeasible when the budget cannot be met (the message states the least total device memory
// each strategy reaches and names the closest, with how far it is over), ErrorKind::verification when the plan fails the verifier or exceeds the budget.
TrainingPlanResult plan_training(const analysis::TrainingGraph& tg, const TrainingPlanOptions& options);

}  // namespace memplan::planner
