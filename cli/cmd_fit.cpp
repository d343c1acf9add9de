// `memplan fit MODEL --train --budget SIZE --vary batch`: the largest dim value that fits, per strategy (--max-gpus: cmd_fit_gpus.cpp).
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>

#include "analysis/import.hpp"
#include "cli/fusion_report.hpp"
#include "analysis/names.hpp"
#include "cli/cmd_fit_gpus.hpp"
#include "cli/deprecated_flags.hpp"
#include "cli/training_args.hpp"
#include "cli/plan_report.hpp"
#include "cli/registry.hpp"

namespace memplan::cli {
namespace {

struct FitArgs {
  TrainingArgs train;
  std::string vary = "batch";
  std::vector<std::string> strategies;
  std::int64_t max_value = 1 << 16;
  bool json = false;
  FitGpusArgs gpus;  // --max-gpus MAX: the fewest GPUs and the parallel layout that fit (cmd_fit_gpus.cpp)
};

struct Probe {
  bool fits = false;
  planner::TrainingPlanResult result;
};

// The training steps of the values probed, built once per value (fused, shaped) and planned per strategy.
class FitSearch {
 public:
  FitSearch(const FitArgs& a, const analysis::Graph& forward, analysis::DimBindings dims)
      : a_(a), forward_(forward), dims_(std::move(dims)) {}

  Probe probe(const std::string& strategy, std::int64_t v) {
    TrainingSetup& s = setup(v);
    Probe p;
    planner::TrainingPlanOptions options = s.options;
    options.strategy = strategy;
    try {
      p.result = planner::plan_training(s.training, options);
      p.fits = true;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::infeasible) throw;
    }
    return p;
  }
  const analysis::Graph& shaped(std::int64_t v) { return setup(v).fused_forward; }
  const std::optional<FusionSummary>& fusion() const { return fusion_; }

 private:
  TrainingSetup& setup(std::int64_t v) {
    auto it = setups_.find(v);
    if (it != setups_.end()) return it->second;
    analysis::ShapeOptions so;
    so.dims = dims_;
    so.dims[a_.vary] = v;
    TrainingSetup s = training_setup(analysis::infer_shapes(forward_, so), a_.train);
    if (!fusion_) fusion_ = s.fusion;  // of the first value probed: the same groups at every value
    return setups_.emplace(v, std::move(s)).first->second;
  }
  const FitArgs& a_;
  const analysis::Graph& forward_;
  analysis::DimBindings dims_;
  std::map<std::int64_t, TrainingSetup> setups_;
  std::optional<FusionSummary> fusion_;
};

// Doubling, then bisection: memory grows with the dim, so feasibility is monotone. The largest value that fits and
// its plan's figures.
nlohmann::json search_strategy(const FitArgs& a, FitSearch& search, const std::string& strategy) {
  std::int64_t lo = 0, hi = 1;
  Probe best;
  for (;;) {
    Probe p = search.probe(strategy, hi);
    if (!p.fits) break;
    lo = hi;
    best = std::move(p);
    if (hi >= a.max_value) break;
    hi = std::min(hi * 2, a.max_value);
  }
  if (lo == hi) hi = lo + 1;
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    Probe p = search.probe(strategy, mid);
    if (p.fits) {
      lo = mid;
      best = std::move(p);
    } else {
      hi = mid;
    }
  }
  nlohmann::json e;
  e["max_" + a.vary] = lo;
  e["max_value"] = lo;
  if (lo == 0) return e;
  const planner::TrainingPlanResult& r = best.result;
  e["peak_bytes"] = r.peak_bytes;
  e["total_device_bytes"] = r.total_device_bytes;
  e["recompute_overhead"] = r.recompute_overhead;
  e["swap_bytes"] = r.swap_bytes;
  e["estimated_step_seconds"] = r.estimated_step_seconds;
  e["keep_all_step_seconds"] = r.keep_all_step_seconds;
  e["step_overhead"] = step_overhead(r.estimated_step_seconds, r.keep_all_step_seconds);
  // Samples a step trains: dim 0 of the first graph input (the batch) at this value.
  const analysis::Graph& shaped_at = search.shaped(lo);
  std::int64_t samples = 1;
  for (analysis::TensorId t : shaped_at.inputs)
    if (!shaped_at.tensors[t].dims.empty()) {
      samples = shaped_at.tensors[t].dims[0].value;
      break;
    }
  e["samples_per_step"] = samples;
  e["samples_per_second"] = r.estimated_step_seconds > 0 ? static_cast<double>(samples) / r.estimated_step_seconds : 0.0;
  return e;
}

void print_fit(const FitArgs& a, const std::vector<std::string>& strategies, const nlohmann::json& out,
               const std::optional<FusionSummary>& fusion) {
  const nlohmann::json& per = out["strategies"];
  std::printf("model %s, budget %s, varying %s\n", analysis::terminal_safe(a.train.model.model).c_str(), human_bytes(out["budget_bytes"]).c_str(), a.vary.c_str());
  if (fusion) std::printf("fused %s\n", fusion_text(*fusion).c_str());
  std::printf("(total device memory = peak + libraries %s; step estimates include recompute and swap stalls)\n",
              human_bytes(out["library_bytes"].get<std::uint64_t>()).c_str());
  std::printf("  %-9s %10s %12s %12s %12s %12s %14s\n", "strategy", ("max " + a.vary).c_str(), "peak", "total", "step", "vs keep-all",
              "samples/s");
  for (const auto& s : strategies) {
    const auto& e = per[s];
    const auto v = e["max_value"].get<std::int64_t>();
    if (v == 0) {
      std::printf("  %-9s %10s\n", s.c_str(), "none fits");
      continue;
    }
    std::printf("  %-9s %10lld %12s %12s %9.3f ms %+11.1f%% %14.1f\n", s.c_str(), static_cast<long long>(v),
                human_bytes(e["peak_bytes"].get<std::uint64_t>()).c_str(), human_bytes(e["total_device_bytes"].get<std::uint64_t>()).c_str(),
                1e3 * e["estimated_step_seconds"].get<double>(), 100.0 * e["step_overhead"].get<double>(),
                e["samples_per_second"].get<double>());
  }
}

int run_fit(const FitArgs& a) {
  if (a.train.budget.empty()) fail(ErrorKind::usage, "fit needs --budget");
  if (a.gpus.max_gpus > 0) return run_fit_gpus(a.train, a.vary, a.gpus, a.json);
  if (a.gpus.global_batch > 0) fail(ErrorKind::usage, "--global-batch goes with fit --max-gpus");
  const analysis::Graph forward = analysis::import_model(a.train.model.model);
  warn_converted_opset(forward, a.train.model.model);
  analysis::DimBindings dims = parse_dims(a.train.model.dims);
  if (dims.count(a.vary)) fail(ErrorKind::usage, "--vary " + a.vary + " is also bound by --dim");
  for (const auto& [name, value] : dims) require_symbolic_dim(forward, name, "--dim " + name + "=" + std::to_string(value));
  // A fixed dim cannot grow: every value would plan the same step and "fit" up to --max-value.
  require_symbolic_dim(forward, a.vary, "fit --vary " + a.vary);
  warn_if_eval_export(forward, a.train.model.model);
  // --strategies, else --strategy alone, else every strategy; each name checked before any planning.
  const std::vector<std::string> strategies = !a.strategies.empty()       ? a.strategies
                                              : !a.train.strategy.empty() ? std::vector<std::string>{a.train.strategy}
                                                                          : planner::training_strategies();
  for (const auto& s : strategies) {
    TrainingArgs ta = a.train;
    ta.strategy = s;
    step_request(ta);
  }
  FitSearch search(a, forward, dims);
  nlohmann::json out;
  out["model"] = a.train.model.model;
  out["budget_bytes"] = planner::parse_size(a.train.budget);
  out["library_bytes"] = parse_library_bytes(a.train.library_bytes);
  out["dim"] = a.vary;
  nlohmann::json per = nlohmann::json::object();
  for (const auto& s : strategies) per[s] = search_strategy(a, search, s);
  out["strategies"] = per;
  if (search.fusion()) out["fusion"] = fusion_json(*search.fusion());
  if (a.json) std::cout << json_text(out, 2) << "\n";
  else print_fit(a, strategies, out, search.fusion());
  return 0;
}

void add_fit(CLI::App& app, std::function<int()>& action) {
  auto args = std::make_shared<FitArgs>();
  CLI::App* cmd = app.add_subcommand("fit", "the largest value of a dim (e.g. batch) whose training step fits the budget");
  add_training_args(cmd, args->train);
  cmd->add_option("--vary", args->vary, "the symbolic dim to maximise (default batch)");
  cmd->add_option("--strategies", args->strategies, "strategies to try (default: all)");
  cmd->add_option("--max-value", args->max_value, "largest value tried")->check(CLI::Range(1, 1 << 24));
  cmd->add_flag("--json", args->json, "print one JSON object");
  cmd->add_option("--max-gpus", args->gpus.max_gpus,
                  "search up to this many GPUs: the fewest GPUs and the parallel layout whose per-rank plans fit --budget "
                  "per GPU (docs/multi-gpu.md; the step estimates take --device-profile's interconnect bandwidth)")
      ->check(CLI::Range(1, 4096));
  add_deprecated_alias(cmd, "--gpus", "--max-gpus", "fit", args->gpus.max_gpus)->check(CLI::Range(1, 4096));
  add_deprecated_alias(cmd, "--profile", "--device-profile", "fit/trace", args->train.device_profile);
  cmd->add_option("--global-batch", args->gpus.global_batch, "with --max-gpus: samples per step (default: --dim BATCH=G, or the model's fixed batch)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  cmd->add_option("--max-layouts", args->gpus.max_layouts, "with --max-gpus: layouts planned at most (default 256)")->check(CLI::Range(1, 1 << 20));
  cmd->callback([args, &action] {
    args->train.train = true;
    action = [args] { return run_fit(*args); };
  });
}

[[maybe_unused]] const int registered = register_command(21, &add_fit);

}  // namespace
}  // namespace memplan::cli
