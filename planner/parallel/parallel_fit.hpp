// The fewest GPUs, and the parallel layout, whose per-rank plans fit a per-GPU budget (`memplan fit --max-gpus`).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "planner/parallel/parallel.hpp"

namespace memplan::planner {

// What is searched (docs/multi-gpu.md, "fit --max-gpus"). A step trains `global_batch` samples: a layout with
// D data-parallel ranks and M microbatches plans microbatches of global_batch / (D x M) samples (only
// layouts where that divides), or, for a model whose batch is fixed, of `fixed_microbatch` samples with
// D x M = global_batch / fixed_microbatch.
struct LayoutSearchOptions {
  int max_gpus = 1;
  std::int64_t global_batch = 1;
  std::int64_t fixed_microbatch = 0;  // > 0: the model's batch (not symbolic)
  int max_tp = 8;                     // tensor parallel within one host's NVLink domain
  int max_microbatch_choices = 4;     // per (D, T, P, ZeRO): a ladder of M, each at least twice the last
  std::size_t max_planned = 256;      // layouts planned at most (the enumeration stops there, deterministically)
};

// One layout tried. peak_bytes is the largest rank role's: its plan's peak when planned under the budget,
// the least its roles reach (planned without the budget, strategy auto) when the budget cannot be met, or
// a lower bound (model state + inputs, not planned: peak_is_lower_bound) when that alone exceeds it.
struct LayoutCandidate {
  ParallelOptions layout;
  std::int64_t microbatch = 0;  // samples per microbatch
  bool planned = false;         // false: pruned by the lower bound
  bool fits = false;
  bool plan_valid = false;      // every role's plan passed the verifier (planned candidates)
  bool peak_is_lower_bound = false;
  std::uint64_t peak_bytes = 0;
  std::uint64_t model_state_bytes = 0;  // the largest role's
  std::uint64_t activation_bytes = 0;   // the largest role's (saved activations of its microbatches in flight)
  double step_seconds = 0.0;            // ParallelPlanResult::estimated_step_seconds
  double communication_seconds = 0.0;
  std::uint64_t communication_bytes = 0;  // per step, the rank that sends the most
  std::size_t recomputed_tensors = 0, swapped_tensors = 0;  // over the roles
  bool costs_time = false;  // a role's step estimate exceeds its keep-all estimate (recomputation, swap stalls)
  // Fits with the strategy's least-memory plans (no budget given to plan_training): the budget's share for the
  // other microbatches in flight assumed they keep every saved tensor, and they keep less.
  bool least_memory_plans = false;
  std::string strategies;                 // the roles' strategies, "auto" or "auto/auto" (stages)
  std::string note;                       // why it does not fit, or what the fitting plan gives up
};

struct LayoutSearchResult {
  std::vector<LayoutCandidate> candidates;  // in enumeration order: N ascending, then T, P, ZeRO, sp, M
  std::optional<std::size_t> chosen;        // index into candidates
  std::optional<ParallelPlanResult> chosen_plan;
  int searched_gpus = 0;                    // the largest N enumerated (the chosen N, or max_gpus)
  std::size_t planned = 0;
  std::size_t role_plans_reused = 0;        // RolePlanCache hits
  bool capped = false;                      // max_planned stopped the enumeration
  std::vector<std::string> not_applicable;  // layouts the model does not allow (first reason per (T, P))
  std::optional<std::size_t> least;         // the candidate with the least per-GPU peak (by peak_bytes)
};

// Enumerates layouts of N = 1, 2, ... max_gpus GPUs (N = D x T x P; T <= max_tp; ZeRO 0-3 with D > 1, 0
// alone with D = 1; with T > 1 with and without sequence parallelism; 1F1B), plans each through
// plan_parallel under options.budget_bytes (per GPU, total device memory; remat and swap per rank), and
// stops after the first N with a fitting layout. Chosen: the least estimated step time among the fitting
// layouts of that N, then the fewest bytes sent, then the lowest peak, then enumeration order.
// Microbatches: without a pipeline, M ascending until a layout fits with nothing recomputed or swapped
// (more microbatches only add weight reads and reductions); with P > 1, a ladder from the least M >= P.
// `forward_at(b)`: the fused forward graph, shapes concrete, at microbatch b (called once per b).
LayoutSearchResult search_layouts(const std::function<const analysis::Graph&(std::int64_t)>& forward_at,
                                  const analysis::TrainingOptions& training, const TrainingPlanOptions& options,
                                  const LayoutSearchOptions& search);

// The microbatch counts tried for a layout with `dp` data-parallel ranks and `pp` stages (see above); empty
// when the batch does not divide.
std::vector<int> microbatch_choices(const LayoutSearchOptions& search, int dp, int pp);

}  // namespace memplan::planner
