// Options shared by `memplan plan --train` and `memplan fit`: optimizer, budget, strategy, packing.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "analysis/training.hpp"
#include "cli/common.hpp"
#include "planner/training_plan.hpp"

namespace memplan::cli {

struct TrainingArgs {
  ModelArgs model;
  bool train = false;
  std::string optimizer = "sgd";
  std::string budget;  // "16GiB"; empty: none
  std::string strategy = "none";
  ArenaArgs arena;
};

struct TrainingSetup {
  analysis::TrainingGraph training;
  planner::TrainingPlanOptions options;
};

void add_training_args(CLI::App* cmd, TrainingArgs& args);
// Builds the training step of an already shaped forward graph; --train missing or a bad
// --optimizer/--budget/--strategy is ErrorKind::usage.
TrainingSetup training_setup(const analysis::Graph& shaped_forward, const TrainingArgs& args);
TrainingSetup load_training(const TrainingArgs& args);

}  // namespace memplan::cli
