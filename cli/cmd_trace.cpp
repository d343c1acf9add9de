// `memplan trace`: the plan as a Chrome trace (chrome://tracing, Perfetto): op spans and live arena bytes.
#include <iostream>

#include "cli/plan_report.hpp"
#include "cli/deprecated_flags.hpp"
#include "cli/fusion_report.hpp"
#include "analysis/names.hpp"
#include "cli/registry.hpp"
#include "cli/viz_source.hpp"
#include "viz/trace.hpp"

namespace memplan::cli {
namespace {

struct TraceArgs {
  VizSourceArgs source;
  std::string output;
  bool unit_times = false;
};

int run_trace(const TraceArgs& a) {
  auto models = planned_models(a.source);
  const auto& m = models.front();
  viz::TraceOptions opts;
  opts.process_name = m.title;
  if (!a.unit_times) {
    // --device-profile: the clock the strategies chose by, so the op spans add up to the step the plan states.
    const std::string& path = a.source.train.device_profile;
    const auto profile = path.empty() ? analysis::default_device_profile() : analysis::read_device_profile(path);
    opts.op_seconds = viz::estimated_op_seconds(m.graph, profile);
  }
  const auto doc = viz::chrome_trace(m.graph, m.plan, opts);
  analysis::OutputFiles files;  // renamed into place once stdout is written
  files.add(a.output, json_text(doc) + "\n");
  if (m.fusion) std::cout << analysis::terminal_safe(m.title) << ": fused " << fusion_text(*m.fusion) << "\n";
  // The step plan states: the same estimate (planner/step_time.hpp), swap stalls included, against keep-all
  // when this plan was made here (a saved plan does not say what keeping everything would cost).
  const double step = doc["otherData"]["estimated_seconds"].get<double>(), stall = doc["otherData"]["swap_stall_seconds"].get<double>();
  const bool same_clock = !a.unit_times;
  std::cout << analysis::terminal_safe(m.title) << ": " << m.plan.schedule.size() << " op spans, estimated step "
            << step_text(step, same_clock ? m.keep_all_step_seconds : 0.0) << (stall > 0 ? " (the compute waits " + step_text(stall, 0.0) + " for swap copies)" : "")
            << "; trace written to " << a.output << " (open in https://ui.perfetto.dev or chrome://tracing)\n";
  commit_after_stdout(files);
  return 0;
}

void add_trace(CLI::App& app, std::function<int()>& action) {
  auto args = std::make_shared<TraceArgs>();
  CLI::App* cmd = app.add_subcommand("trace", "Chrome trace event JSON of the plan: op spans and a live-bytes counter");
  add_viz_source_args(cmd, args->source, true);
  cmd->add_option("-o,--output", args->output, "JSON file to write")->required();
  add_deprecated_alias(cmd, "--profile", "--device-profile", "fit/trace", args->source.train.device_profile);
  cmd->add_flag("--unit-times", args->unit_times, "1 us per op instead of cost-model estimates");
  cmd->callback([args, &action] { action = [args] { return run_trace(*args); }; });
}

[[maybe_unused]] const int registered = register_command(62, &add_trace);

}  // namespace
}  // namespace memplan::cli
