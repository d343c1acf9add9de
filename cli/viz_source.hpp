// What the picture commands (viz, graph, trace) draw: a model planned for inference or training, or saved plans.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analysis/graph.hpp"
#include "cli/training_args.hpp"
#include "cli/common.hpp"
#include "cli/fusion_report.hpp"
#include "planner/plan.hpp"

namespace memplan::cli {

struct VizSourceArgs {
  TrainingArgs train;                   // MODEL, --dim, --train, --strategy, --budget, ... (cmd_plan.hpp)
  std::vector<std::string> plan_files;  // saved plans (graph embedded) instead of planning
};

// The options of `memplan plan` (add_training_args); with `plans` also --plan FILE.
void add_viz_source_args(CLI::App* cmd, VizSourceArgs& a, bool plans);

// A plan with everything a picture needs around it.
struct PlannedModel {
  analysis::Graph graph;  // the graph the plan was made for (training graph for --train)
  planner::Plan plan;
  std::string title;
  std::string note;                      // peak, step time, recomputation and swap, in words
  std::uint64_t peak_bytes = 0;          // training: persistent + inputs + arena (0: not known)
  double estimated_step_seconds = 0.0;   // training: planner/step_time.hpp, as plan states it (0: not known)
  double keep_all_step_seconds = 0.0;    // training: the same with every saved tensor kept (0: not known)
  std::uint64_t arena_budget = 0;        // the budget's share for the arena (0: no budget)
  std::uint64_t budget = 0;              // the whole budget as given
  std::uint64_t lower_bound_bytes = 0;   // most arena bytes live at one step with views and in-place shared
  bool over_budget = false;              // planned without the budget because it could not be met
  std::string budget_label, lower_bound_label;  // the lines' texts where the panel's default does not fit
  std::optional<FusionSummary> fusion;   // what planning fused (none for a saved plan: its graph says)
};

// Plans the model, with `strategy` for --train (in place of --strategy; ignores a.plan_files). With --train and a budget
// that `strategy` cannot meet, plans without the budget and marks over_budget.
PlannedModel plan_model(const VizSourceArgs& a, const std::string& strategy);

// Reads a saved plan; its embedded graph is what it was made for.
PlannedModel load_plan_file(const std::string& path);

// Reads a trace file of memplan_torch's allocator (memplan_save_trace): the recorded PyTorch step as a
// graph of allocation events and its planned offsets, proven by the verifier; the budget line marks what
// PyTorch's caching allocator would reserve for the step, the lower bound line its peak live bytes.
PlannedModel load_trace_file(const std::string& path);

// The panels a picture command draws: each --plan file, else the model with --strategy.
std::vector<PlannedModel> planned_models(const VizSourceArgs& a);

}  // namespace memplan::cli
