// `memplan fit MODEL --train --budget SIZE --vary batch`: the largest dim value that fits, per strategy.
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>

#include "analysis/import.hpp"
#include "analysis/names.hpp"
#include "cli/cmd_plan.hpp"
#include "cli/registry.hpp"

namespace memplan::cli {
namespace {

struct FitArgs {
  TrainingArgs train;
  std::string vary = "batch";
  std::vector<std::string> strategies;
  std::int64_t max_value = 1 << 16;
  bool json = false;
};

struct Probe {
  bool fits = false;
  planner::TrainingPlanResult result;
};

int run_fit(const FitArgs& a) {
  if (a.train.budget.empty()) fail(ErrorKind::usage, "fit needs --budget");
  const analysis::Graph forward = analysis::import_model(a.train.model.model);
  analysis::DimBindings dims = parse_dims(a.train.model.dims);
  if (dims.count(a.vary)) fail(ErrorKind::usage, "--vary " + a.vary + " is also bound by --dim");
  std::vector<std::string> strategies = a.strategies.empty() ? planner::training_strategies() : a.strategies;
  // Shaped training graphs per value, shared by the strategies' searches.
  std::map<std::int64_t, analysis::Graph> shaped;
  std::optional<FusionSummary> fusion;  // of the first value probed: the same groups at every value
  auto probe = [&](const std::string& strategy, std::int64_t v) {
    auto it = shaped.find(v);
    if (it == shaped.end()) {
      analysis::ShapeOptions so;
      so.dims = dims;
      so.dims[a.vary] = v;
      it = shaped.emplace(v, analysis::infer_shapes(forward, so)).first;
    }
    TrainingArgs ta = a.train;
    ta.strategy = strategy;
    TrainingSetup s = training_setup(it->second, ta);
    if (!fusion) fusion = s.fusion;
    Probe p;
    try {
      p.result = planner::plan_training(s.training, s.options);
      p.fits = true;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::infeasible) throw;
    }
    return p;
  };
  nlohmann::json out;
  out["model"] = a.train.model.model;
  out["budget_bytes"] = planner::parse_size(a.train.budget);
  out["dim"] = a.vary;
  nlohmann::json per = nlohmann::json::object();
  for (const auto& s : strategies) {
    // Doubling, then bisection: memory grows with the dim, so feasibility is monotone.
    std::int64_t lo = 0, hi = 1;
    Probe best;
    for (;;) {
      Probe p = probe(s, hi);
      if (!p.fits) break;
      lo = hi;
      best = std::move(p);
      if (hi >= a.max_value) break;
      hi = std::min(hi * 2, a.max_value);
    }
    if (lo == hi) hi = lo + 1;
    while (hi - lo > 1) {
      const std::int64_t mid = lo + (hi - lo) / 2;
      Probe p = probe(s, mid);
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
    if (lo > 0) {
      e["peak_bytes"] = best.result.peak_bytes;
      e["recompute_overhead"] = best.result.recompute_overhead;
      e["swap_bytes"] = best.result.swap_bytes;
      e["estimated_step_seconds"] = best.result.estimated_step_seconds;
    }
    per[s] = e;
  }
  out["strategies"] = per;
  if (fusion) out["fusion"] = fusion_json(*fusion);
  if (a.json) {
    std::cout << json_text(out, 2) << "\n";
    return 0;
  }
  std::printf("model %s, budget %s, varying %s\n", analysis::terminal_safe(a.train.model.model).c_str(), human_bytes(out["budget_bytes"]).c_str(), a.vary.c_str());
  if (fusion) std::printf("fused %s\n", fusion_text(*fusion).c_str());
  std::printf("  %-9s %10s %14s %12s %14s\n", "strategy", ("max " + a.vary).c_str(), "peak", "recompute", "step estimate");
  for (const auto& s : strategies) {
    const auto& e = per[s];
    const auto v = e["max_value"].get<std::int64_t>();
    if (v == 0) {
      std::printf("  %-9s %10s\n", s.c_str(), "none fits");
      continue;
    }
    std::printf("  %-9s %10lld %14s %11.1f%% %11.3f ms\n", s.c_str(), static_cast<long long>(v),
                human_bytes(e["peak_bytes"].get<std::uint64_t>()).c_str(), 100.0 * e["recompute_overhead"].get<double>(),
                1e3 * e["estimated_step_seconds"].get<double>());
  }
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
  cmd->callback([args, &action] {
    args->train.train = true;
    action = [args] { return run_fit(*args); };
  });
}

[[maybe_unused]] const int registered = register_command(21, &add_fit);

}  // namespace
}  // namespace memplan::cli
