// `memplan viz`: the memory timeline of a plan (or two side by side, or one per rank role) as one SVG file.
#include <algorithm>
#include <iostream>
#include <optional>

#include "cli/plan_report.hpp"
#include "cli/fusion_report.hpp"
#include "analysis/names.hpp"
#include "cli/registry.hpp"
#include "cli/viz_ranks.hpp"
#include "cli/viz_source.hpp"
#include "viz/timeline.hpp"

namespace memplan::cli {
namespace {

struct VizArgs {
  VizSourceArgs source;
  std::string output;
  std::string compare;
  std::vector<std::string> traces;
  double width = 1400, height = 900;
  bool width_given = false;
  ParallelArgs parallel;  // --gpus N ...: one timeline per rank role (cli/viz_ranks.cpp)
};

viz::TimelinePanel panel_of(const PlannedModel& m) {
  viz::TimelinePanel p{m.title, &m.graph, &m.plan, m.arena_budget, m.lower_bound_bytes, m.note, "", ""};
  if (m.budget && m.arena_budget != m.budget)
    p.budget_label = "budget " + viz::bytes_label(m.budget) + ": " + viz::bytes_label(m.arena_budget) + " left for the arena";
  if (m.lower_bound_bytes) p.lower_bound_label = "lower bound (views, in-place shared) " + viz::bytes_label(m.lower_bound_bytes);
  if (!m.budget_label.empty()) p.budget_label = m.budget_label;
  if (!m.lower_bound_label.empty()) p.lower_bound_label = m.lower_bound_label;
  return p;
}

// One panel per rank role: planned with --gpus, or read from a `memplan-rank-plans` file given as --plan.
std::optional<std::vector<PlannedModel>> rank_models(const VizArgs& a) {
  if (parallel_requested(a.parallel)) {
    if (!a.source.train.train) fail(ErrorKind::usage, "viz --gpus draws per-rank training plans: add --train");
    if (!a.traces.empty() || !a.compare.empty() || !a.source.plan_files.empty())
      fail(ErrorKind::usage, "viz --gpus draws the rank roles of one layout: leave out --trace, --compare and --plan");
    return plan_rank_models(a.source.train, a.parallel);
  }
  if (a.source.plan_files.empty()) return std::nullopt;
  auto ranks = load_rank_plans(a.source.plan_files.front());
  if (ranks && (a.source.plan_files.size() > 1 || !a.traces.empty() || !a.compare.empty()))
    fail(ErrorKind::usage, "a rank-plans file is drawn alone (one panel per rank role): leave out other --plan, --trace and --compare");
  return ranks;
}

int run_viz(const VizArgs& a) {
  std::vector<PlannedModel> models;
  if (auto ranks = rank_models(a)) {
    models = std::move(*ranks);
  } else {
    for (const auto& t : a.traces) models.push_back(load_trace_file(t));
    if (a.traces.empty() && a.source.train.model.model.empty()) fail(ErrorKind::usage, "viz needs a MODEL or --trace FILE");
    if (!a.source.train.model.model.empty())
      for (auto& m : planned_models(a.source)) models.push_back(std::move(m));
    if (!a.compare.empty()) {
      if (!a.source.train.train) fail(ErrorKind::usage, "--compare draws a second training strategy: add --train");
      models.push_back(plan_model(a.source, a.compare));
    }
    if (models.size() > 2) fail(ErrorKind::usage, "viz draws one plan or two side by side; got " + std::to_string(models.size()));
  }
  std::vector<viz::TimelinePanel> panels;
  for (const auto& m : models) panels.push_back(panel_of(m));
  viz::TimelineOptions opts;
  // Rank roles side by side: 640 pixels each unless --width says otherwise.
  opts.width = a.width_given || models.size() <= 2 ? a.width : std::min(20000.0, 640.0 * static_cast<double>(models.size()));
  opts.height = a.height;
  analysis::OutputFiles files;  // renamed into place once stdout is written
  files.add(a.output, viz::render_timeline_svg(panels, opts));
  for (const auto& m : models) {
    const auto u = viz::plan_usage(m.plan);
    const std::string op = m.plan.schedule.empty() ? "-" : m.graph.ops[m.plan.schedule[u.peak_step]].name;
    std::cout << analysis::terminal_safe(m.title) << ": " << m.plan.buffers.size() << " buffers, arena " << human_bytes(m.plan.arena_bytes) << ", live peak "
              << human_bytes(u.peak_bytes) << " at step " << u.peak_step << " (" << op << ")" << (m.over_budget ? ", budget not met" : "")
              << "\n";
    if (m.peak_bytes) std::cout << "  peak " << human_bytes(m.peak_bytes) << " (persistent + inputs + arena)\n";
    if (m.estimated_step_seconds > 0) std::cout << "  step " << step_text(m.estimated_step_seconds, m.keep_all_step_seconds) << "\n";
    if (m.fusion) std::cout << "  fused " << fusion_text(*m.fusion) << "\n";
  }
  std::cout << "timeline written to " << analysis::terminal_safe(a.output) << "\n";
  commit_after_stdout(files);
  return 0;
}

void add_viz(CLI::App& app, std::function<int()>& action) {
  auto args = std::make_shared<VizArgs>();
  CLI::App* cmd = app.add_subcommand("viz", "SVG memory timeline: arena buffers over the schedule and live bytes per step");
  add_viz_source_args(cmd, args->source, true);
  cmd->add_option("-o,--output", args->output, "SVG file to write")->required();
  cmd->get_option("MODEL")->required(false);
  cmd->add_option("--trace", args->traces, "draw a PyTorch step recorded by memplan_torch (save_trace) instead of a model; twice to compare");
  cmd->add_option("--compare", args->compare, "with --train: also plan with this strategy and draw both side by side");
  cmd->add_option("--width", args->width, "picture width in pixels")->check(CLI::Range(300.0, 20000.0))->each([args](const std::string&) { args->width_given = true; });
  add_parallel_args(cmd, args->parallel);
  cmd->add_option("--height", args->height, "picture height in pixels")->check(CLI::Range(300.0, 20000.0));
  cmd->callback([args, &action] { action = [args] { return run_viz(*args); }; });
}

[[maybe_unused]] const int registered = register_command(60, &add_viz);

}  // namespace
}  // namespace memplan::cli
