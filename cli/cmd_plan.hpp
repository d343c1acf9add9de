// Options shared by `memplan plan --train` and `memplan fit`: optimizer, budget, strategy, packing.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "analysis/training.hpp"
#include "cli/common.hpp"
#include "cli/fusion_report.hpp"
#include "planner/training_plan.hpp"

namespace memplan::cli {

struct TrainingArgs {
  ModelArgs model;
  bool train = false;
  std::string optimizer = "sgd";
  std::string optimizer_impl = "foreach";
  double weight_decay = 0.0;
  double learning_rate = -1.0;  // < 0: the optimizer's PyTorch default
  std::string loss = "mse";
  std::optional<std::int64_t> class_axis;
  std::string precision = "fp32";
  bool loss_scaling = false;
  std::int64_t microbatches = 1;
  std::string budget;  // "16GiB"; empty: none
  std::string strategy;  // empty: auto with --budget, none without (training_setup resolves it)
  std::string library_bytes = kDefaultLibraryBytes;  // CUDA context and library workspaces beside the plan
  std::string device_profile;  // JSON (analysis/cost.hpp) for the step-time estimates; empty: the H100-like default
  ArenaArgs arena;
  // Strategy exact (TrainingPlanOptions::exact_*).
  std::size_t exact_stages = planner::TrainingPlanOptions{}.exact_stages;
  std::uint64_t exact_nodes = planner::TrainingPlanOptions{}.exact_nodes;
  double exact_seconds = planner::TrainingPlanOptions{}.exact_seconds;
  double exact_gap = planner::TrainingPlanOptions{}.exact_gap;
};

struct TrainingSetup {
  analysis::TrainingGraph training;
  planner::TrainingPlanOptions options;
  FusionSummary fusion;  // what was fused in the forward graph before the training graph was built
  analysis::Graph fused_forward;              // the forward graph the training graph was built from
  analysis::TrainingOptions training_options; // what it was built with
};

void add_training_args(CLI::App* cmd, TrainingArgs& args);
// Fuses an already shaped forward graph (fuse_options: --no-fuse), then builds its training step, so the
// fused ops' backward rules decide what is saved; --train missing or a bad --optimizer/--budget/--strategy
// is ErrorKind::usage.
TrainingSetup training_setup(const analysis::Graph& shaped_forward, const TrainingArgs& args);
// The same with the fusion passes given (e.g. FuseOptions::pytorch_eager) in place of --no-fuse's.
TrainingSetup training_setup(const analysis::Graph& shaped_forward, const TrainingArgs& args, const planner::FuseOptions& fuse);
TrainingSetup load_training(const TrainingArgs& args);
// --strategy as given, else auto with --budget and none without.
std::string resolved_strategy(const TrainingArgs& args);

}  // namespace memplan::cli
