// `memplan plan MODEL --train --gpus N [--zero S] [--tp T] [--pp P]`: one verified plan per rank role.
#include <cstdio>
#include <iostream>

#include "analysis/names.hpp"
#include "cli/fusion_report.hpp"
#include "cli/training_args.hpp"
#include "cli/parallel_report.hpp"
#include "cli/plan_report.hpp"
#include "planner/plan_json.hpp"

namespace memplan::cli {

RankPlans plan_rank_roles(const TrainingArgs& train, const ParallelArgs& par,
                          const std::optional<planner::PytorchEager>& pytorch) {
  const planner::ParallelOptions o = parallel_options(par, train.microbatches);
  const analysis::Graph shaped = load_shaped_model(train.model);
  warn_if_eval_export(shaped, train.model.model);
  TrainingArgs ta = train;
  ta.microbatches = 1;  // --microbatches are the layout's (pipeline microbatches or accumulation steps)
  RankPlans rp{training_setup(shaped, ta), {}};
  rp.result = planner::plan_parallel(rp.setup.fused_forward, rp.setup.training_options, rp.setup.options, o);
  if (pytorch && o.tp == 1 && o.pp == 1 && o.data_parallel() > 1)
    rp.pytorch = planner::predict_pytorch_data_parallel(shaped, step_request(ta), *pytorch, o.data_parallel(), o.zero);
  return rp;
}

int run_parallel_plan(const TrainingArgs& train, const ParallelArgs& par, bool json, const std::string& plan_file,
                      const std::optional<planner::PytorchEager>& pytorch) {
  const RankPlans planned = plan_rank_roles(train, par, pytorch);
  const TrainingSetup& s = planned.setup;
  const planner::ParallelPlanResult& r = planned.result;
  analysis::OutputFiles files;  // written once stdout is: a failed print leaves no rank-plans file behind
  if (!plan_file.empty()) {
    // One plan per rank role, each with its graph: `memplan run`/`viz` read them one by one.
    nlohmann::json doc;
    doc["schema"] = "memplan-rank-plans";
    doc["version"] = 1;
    doc["layout"] = parallel_json(r)["layout"];
    doc["budget_bytes"] = s.options.budget_bytes ? nlohmann::json(*s.options.budget_bytes) : nlohmann::json();
    doc["library_bytes"] = s.options.library_bytes;
    nlohmann::json plans = nlohmann::json::array();
    const nlohmann::json ranks = parallel_json(r)["ranks"];
    for (std::size_t i = 0; i < r.roles.size(); ++i) {
      nlohmann::json pj = planner::plan_to_json(r.roles[i].result.graph, r.roles[i].result.plan, true);
      // The role's entry of `plan --gpus --json` beside its plan (rank, ranks, role, peak and model state bytes,
      // ...: what `viz` labels each rank's timeline with), never over a key of the plan's own.
      for (const auto& [key, value] : ranks[i].items())
        if (!pj.contains(key)) pj[key] = value;
      plans.push_back(std::move(pj));
    }
    doc["plans"] = plans;
    files.add(plan_file, json_text(doc, 1) + "\n");
  }
  if (json) {
    nlohmann::json j = parallel_json(r);
    j["model"] = train.model.model;
    j["fusion"] = fusion_json(s.fusion);
    j["precision"] = train.precision;
    j["budget_bytes"] = s.options.budget_bytes ? nlohmann::json(*s.options.budget_bytes) : nlohmann::json();
    if (planned.pytorch) {
      j["pytorch"] = pytorch_parallel_json(*planned.pytorch);
      j["pytorch_peak_bytes"] = j["pytorch"]["pytorch_peak_bytes"];  // the rank that peaks highest
    }
    std::cout << json_text(j, 2) << "\n";
    commit_after_stdout(files);
    return 0;
  }
  std::printf("model                %s (per-rank training plans)\n", analysis::terminal_safe(train.model.model).c_str());
  std::printf("fused                %s\n", fusion_text(s.fusion).c_str());
  std::printf("%s", parallel_text(r).c_str());
  if (planned.pytorch) std::printf("%s", pytorch_parallel_text(*planned.pytorch).c_str());
  if (!plan_file.empty()) std::printf("plans written to     %s (one per rank role)\n", analysis::terminal_safe(plan_file).c_str());
  commit_after_stdout(files);
  return 0;
}

}  // namespace memplan::cli
