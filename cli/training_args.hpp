// The training flags shared by plan, fit, train, viz and trace (optimizer, loss, precision, budget, strategy, packing),
// parsed into the step library's request (planner/step.hpp).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "analysis/training.hpp"
#include "cli/common.hpp"
#include "planner/step.hpp"

namespace memplan::cli {

struct TrainingArgs {
  ModelArgs model;
  bool train = false;
  std::string optimizer = "sgd";
  std::string optimizer_impl = "foreach";
  double weight_decay = 0.0;
  std::optional<double> learning_rate;  // none: the optimizer's PyTorch default
  std::string loss = "mse";
  std::optional<std::int64_t> class_axis;
  bool chunked_loss = false;
  std::string precision = "fp32";
  bool loss_scaling = false;
  std::int64_t microbatches = 1;
  std::string budget;  // "16GiB"; empty: none
  std::string strategy;  // empty: auto with --budget, none without (training_setup resolves it)
  std::string library_bytes = kDefaultLibraryBytes;  // CUDA context and library workspaces beside the plan
  std::string device_profile;  // JSON (analysis/cost.hpp) for the step-time estimates; empty: the H100-like default
  ArenaArgs arena;
  // Strategy exact (TrainingPlanOptions::exact_*).
  // Signed, so that a negative value is refused rather than wrapped (step_request checks the ranges).
  std::int64_t exact_stages = static_cast<std::int64_t>(planner::TrainingPlanOptions{}.exact_stages);
  std::int64_t exact_nodes = static_cast<std::int64_t>(planner::TrainingPlanOptions{}.exact_nodes);
  double exact_seconds = planner::TrainingPlanOptions{}.exact_seconds;
  double exact_gap = planner::TrainingPlanOptions{}.exact_gap;
};

using TrainingSetup = planner::TrainingStep;

// The accepted ranges of the training flags (docs/errors.md, "Numbers on the command line").
inline constexpr double kMaxLearningRate = 1e6, kMaxWeightDecay = 1e6, kMaxExactSeconds = 86400.0;
inline constexpr std::int64_t kMaxMicrobatches = std::int64_t{1} << 20;  // as fit --max-gpus searches
inline constexpr std::int64_t kMaxExactStages = 1'000'000, kMaxExactNodes = 1'000'000'000;

void add_training_args(CLI::App* cmd, TrainingArgs& args);
// The flags as the step library's request; a bad --optimizer, --budget, --strategy, ... is ErrorKind::usage, --train
// missing too.
planner::StepRequest step_request(const TrainingArgs& args);
// planner::build_training_step on the request.
TrainingSetup training_setup(const analysis::Graph& shaped_forward, const TrainingArgs& args);
TrainingSetup load_training(const TrainingArgs& args);
// --strategy as given, else auto with --budget and none without.
std::string resolved_strategy(const TrainingArgs& args);

}  // namespace memplan::cli
