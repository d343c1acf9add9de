// `memplan plan MODEL --train`: a training step under a memory budget (recompute, swap), verified.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "analysis/ops.hpp"
#include "analysis/names.hpp"
#include "analysis/training.hpp"
#include "cli/common.hpp"
#include "cli/deprecated_flags.hpp"
#include "cli/fusion_report.hpp"
#include "cli/registry.hpp"
#include "cli/training_args.hpp"
#include "cli/parallel_report.hpp"
#include "cli/plan_report.hpp"
#include "planner/pytorch/eager_model.hpp"
#include "planner/plan_json.hpp"
#include "planner/step.hpp"
#include "viz/timeline.hpp"

namespace memplan::cli {

namespace {

nlohmann::json exact_remat_json(const planner::ExactRematReport& e) {
  auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); };
  return {{"stages", e.stages}, {"swappable_stages", e.swappable}, {"solves", e.solves}, {"variables", e.variables}, {"status", e.status},
          {"model_budget_bytes", e.model_budget}, {"dp_model_seconds", num(e.dp_cost)}, {"milp_model_seconds", num(e.milp_cost)},
          {"lower_bound_model_seconds", num(e.lower_bound)}, {"gap", e.gap}, {"milp_gap", e.milp_gap}, {"swapped_stages", e.swaps}, {"seconds", e.seconds},
          {"nodes", e.nodes}, {"used", e.used}, {"optimal_recompute_flops", num(e.optimal_recompute_flops)},
          {"optimal_step_seconds", num(e.optimal_step_seconds)}, {"exact_step_seconds", e.exact_step_seconds > 0 ? num(e.exact_step_seconds) : nlohmann::json()}};
}

std::string exact_remat_text(const planner::ExactRematReport& e) {
  if (e.solves == 0) return "exact remat          no MILP solve (" + std::to_string(e.stages) + " stages): optimal's plan kept\n";
  char buf[640];
  std::snprintf(buf, sizeof buf,
                "exact remat          %zu stages (%zu can swap), %zu MILP solves (%.2f s, %llu nodes), last kept: %s, model cost DP %.3f ms -> "
                "MILP %.3f ms (%zu stages swapped), bound %.3f ms (gap %.1f%%: the share of the DP's cost the optimum may save; the MILP's "
                "plan within %.2f%% of it); %s\n",
                e.stages, e.swappable, e.solves, e.seconds, static_cast<unsigned long long>(e.nodes), e.status.c_str(), 1e3 * e.dp_cost,
                1e3 * e.milp_cost, e.swaps, 1e3 * e.lower_bound, 100.0 * e.gap, 100.0 * e.milp_gap,
                e.used ? "the MILP's plan used (a faster estimated step than optimal's)" : "optimal's plan kept (its estimated step is no slower)");
  return buf;
}

struct PlanArgs {
  TrainingArgs train;
  bool json = false;
  std::string plan_file;
  std::string pytorch_attention = "auto";
  std::string pytorch_workspace = "65MiB";  // planner::kPytorchWorkspaceBytes
  std::string pytorch_outputs = "held";
  ParallelArgs parallel;  // --gpus, --zero, --tp, --pp: per-rank plans (cli/cmd_plan_parallel.cpp)
};

// What plan prints beside the StepPlan: the arena's live peak, the naive sum, the tensors without a shape.
struct PlanFacts {
  std::uint64_t naive = 0;
  std::size_t unresolved = 0;
  viz::Usage usage;
  std::string live_op;
};

PlanFacts plan_facts(const planner::TrainingPlanResult& r) {
  PlanFacts f;
  const analysis::Graph& g = r.graph;
  for (const auto& t : g.tensors) {
    if (!t.shape_known()) {
      ++f.unresolved;
      continue;
    }
    if (analysis::occupies_arena(t)) f.naive = checked_add(f.naive, align_up(t.bytes(), r.plan.alignment), "naive bytes");
  }
  f.usage = viz::plan_usage(r.plan);
  f.live_op = r.plan.schedule.empty() ? "" : g.ops[r.plan.schedule[f.usage.peak_step]].name;
  return f;
}

void save_plan(analysis::OutputFiles& files, const std::string& path, const planner::StepPlan& step) {
  const planner::TrainingPlanResult& r = step.result;
  nlohmann::json pj = planner::plan_to_json(r.graph, r.plan, true);
  const auto& budget = step.step.options.budget_bytes;
  pj["training"] = {{"strategy", r.strategy}, {"budget_bytes", budget ? nlohmann::json(*budget) : nlohmann::json()},
                    {"peak_bytes", r.peak_bytes}, {"persistent_bytes", r.persistent_bytes}, {"input_bytes", r.input_bytes}};
  files.add(path, json_text(pj, 1) + "\n");
}

nlohmann::json pytorch_json(const planner::PytorchPrediction& p) {
  nlohmann::json doubts = nlohmann::json::array();
  for (const auto& d : p.doubts) doubts.push_back({{"kind", d.kind}, {"count", d.count}, {"detail", d.detail}});
  return {{"pytorch_peak_bytes", p.peak_bytes},            // PyTorch eager's own peak (planner::predict_pytorch)
          {"pytorch_workspace_bytes", p.workspace_bytes},  // of pytorch_peak_bytes: the libraries' workspaces
          {"pytorch_attention", !p.sdpa ? "eager" : p.sdpa_form_only ? "auto" : "sdpa"},
          {"pytorch_outputs", p.hold_outputs ? "held" : "freed"},
          {"pytorch_peak_doubts", std::move(doubts)},      // where that prediction guessed (empty: nothing)
          // the same step with the head and loss over chunks of tokens (--chunked-loss; null: not a head it chunks)
          {"pytorch_peak_bytes_chunked_loss", p.chunked_loss_peak_bytes ? nlohmann::json(*p.chunked_loss_peak_bytes) : nlohmann::json()}};
}

nlohmann::json plan_json(const PlanArgs& a, const planner::StepPlan& step, const PlanFacts& f) {
  const planner::TrainingPlanResult& r = step.result;
  nlohmann::json j;
  j["model"] = a.train.model.model;
  j["ops"] = r.graph.ops.size();
  j["tensors"] = r.graph.tensors.size();
  j["unresolved_tensors"] = f.unresolved;
  add_device_memory_json(j, step.memory);  // the parts, peak_bytes, total_device_bytes, budget_bytes, fits
  j["lower_bound_bytes"] = r.lower_bound_bytes;
  j["live_peak_bytes"] = f.usage.peak_bytes;
  j["live_peak_step"] = f.usage.peak_step;
  j["live_peak_op"] = f.live_op;
  j["arena_bytes"] = r.plan.arena_bytes;
  j["naive_bytes"] = f.naive;
  j["aliased_lower_bound_bytes"] = r.plan.aliased_lower_bound_bytes;
  j["arena_optimal"] = r.plan.arena_optimal;
  j["arena_gap"] = r.plan.arena_gap;
  j["schedule"] = schedule_json(r.schedule);
  j["plan_valid"] = r.report.valid;
  j["plan_seconds"] = r.plan_seconds;
  j["strategy"] = r.strategy;
  j["precision"] = a.train.precision;
  j["loss_scaling"] = a.train.loss_scaling;
  j["persistent_bytes"] = r.persistent_bytes;
  j["eager_peak_bytes"] = planner::eager_peak(r.graph, r.plan).peak_bytes;  // an eager allocator on this plan's graph and schedule
  j.update(pytorch_json(*step.pytorch));
  j["fusion"] = fusion_json(step.step.fusion);
  j["training_flops"] = r.training_flops;
  j["forward_flops"] = r.forward_flops;
  j["recompute_flops"] = r.recompute_flops;
  j["recompute_overhead"] = r.recompute_overhead;
  j["recomputed_tensors"] = r.recomputed_tensors;
  j["recompute_ops"] = r.recompute_ops;
  j["recomputed"] = planned_tensors_json(r.recomputed);
  j["swapped_tensors"] = r.swapped_tensors;
  j["swap_bytes"] = r.swap_bytes;
  j["swapped"] = planned_tensors_json(r.swapped);
  j["estimated_step_seconds"] = r.estimated_step_seconds;
  j["keep_all_step_seconds"] = r.keep_all_step_seconds;
  j["step_overhead"] = step_overhead(r.estimated_step_seconds, r.keep_all_step_seconds);
  j["swap_stall_seconds"] = r.swap_stall_seconds;
  if (r.exact.ran) j["exact_remat"] = exact_remat_json(r.exact);
  return j;
}

std::string swapped_text(const planner::TrainingPlanResult& r) {
  if (r.swapped_tensors == 0) return "swapped              none\n";
  char buf[256];
  if (r.swap_stall_seconds > 0.0)
    std::snprintf(buf, sizeof buf, "swapped              %zu tensors, %s to host and back; the compute waits %.3f ms for the copies\n",
                  r.swapped_tensors, human_bytes(r.swap_bytes).c_str(), 1e3 * r.swap_stall_seconds);
  else
    std::snprintf(buf, sizeof buf, "swapped              %zu tensors, %s to host and back; the copies hide under compute (no wait)\n",
                  r.swapped_tensors, human_bytes(r.swap_bytes).c_str());
  return buf + planned_tensors_text(r.swapped);
}

void print_pytorch(const PlanArgs& a, const planner::PytorchPrediction& p) {
  std::printf("PyTorch eager (%s attention, %s, optimizer %s %s) would peak at %s (max_memory_allocated, %s of library workspaces included)\n",
              !p.sdpa ? "eager" : p.sdpa_form_only ? "SDPA or eager as exported" : "SDPA",
              a.train.precision == "fp32" ? "fp32" : ("autocast " + a.train.precision).c_str(),
              a.train.optimizer.c_str(), a.train.optimizer_impl.c_str(), human_bytes(p.peak_bytes).c_str(), human_bytes(p.workspace_bytes).c_str());
  for (const auto& d : p.doubts) std::printf("  unsure: %zu x %s: %s\n", d.count, d.kind.c_str(), d.detail.c_str());
  if (p.chunked_loss_peak_bytes)
    std::printf("  with its head and loss over chunks of tokens (--chunked-loss; memplan_torch.lm_head_loss) it would peak at %s\n",
                human_bytes(*p.chunked_loss_peak_bytes).c_str());
}

void print_plan(const PlanArgs& a, const planner::StepPlan& step, const PlanFacts& f) {
  const planner::TrainingPlanResult& r = step.result;
  const auto& budget = step.step.options.budget_bytes;
  std::printf("model                %s (training step: %zu ops, %zu tensors)\n", analysis::terminal_safe(a.train.model.model).c_str(),
              r.graph.ops.size(), r.graph.tensors.size());
  std::printf("fused                %s\n", fusion_text(step.step.fusion).c_str());
  std::printf("precision            %s%s%s\n", a.train.precision.c_str(),
              a.train.precision == "fp32" ? "" : " (torch.autocast op lists, fp32 master weights and gradients)",
              a.train.loss_scaling ? ", dynamic loss scaling (GradScaler: scale, growth tracker, found_inf: 12 bytes)" : "");
  std::printf("strategy             %s%s\n", r.strategy.c_str(),
              budget ? (", budget " + human_bytes(*budget)).c_str()
              : r.strategy == "none" ? " (no budget: every saved tensor kept)"
                                     : " (no budget: the least memory this strategy reaches)");
  std::printf("peak                 %s = persistent %s + inputs %s + activation arena %s (the most device bytes the plan holds)\n",
              human_bytes(r.peak_bytes).c_str(), human_bytes(r.persistent_bytes).c_str(), human_bytes(r.input_bytes).c_str(),
              human_bytes(r.activation_arena_bytes).c_str());
  std::printf("%s", device_memory_text(step.memory).c_str());
  std::printf("live peak            %s at step %u (%s): the most arena bytes in use at one step\n", human_bytes(f.usage.peak_bytes).c_str(),
              f.usage.peak_step, f.live_op.c_str());
  std::printf("schedule             %s\n", schedule_text(r.schedule).c_str());
  std::printf("lower bound          %s (live tensors at one step, none sharing); naive %s (every tensor its own buffer)\n",
              human_bytes(r.lower_bound_bytes).c_str(), human_bytes(f.naive).c_str());
  std::printf("step estimate        %s (recompute and swap stalls included)\n",
              step_text(r.estimated_step_seconds, r.keep_all_step_seconds).c_str());
  std::printf("recomputed           %zu tensors, %zu ops; %s FLOPs (%.1f%% of the step's %s)\n", r.recomputed_tensors, r.recompute_ops,
              human_count(r.recompute_flops).c_str(), 100.0 * r.recompute_overhead, human_count(r.training_flops).c_str());
  std::printf("%s", planned_tensors_text(r.recomputed).c_str());
  if (r.exact.ran) std::printf("%s", exact_remat_text(r.exact).c_str());
  std::printf("%s", swapped_text(r).c_str());
  print_pytorch(a, *step.pytorch);
  std::printf("plan                 %s, planned in %.3f s\n", r.report.valid ? "valid (verified)" : "INVALID", r.plan_seconds);
  if (!a.plan_file.empty()) std::printf("plan written to      %s\n", analysis::terminal_safe(a.plan_file).c_str());
}

int run_plan(const PlanArgs& a) {
  if (a.pytorch_attention != "auto" && a.pytorch_attention != "sdpa" && a.pytorch_attention != "eager")
    fail(ErrorKind::usage, "--pytorch-attention '" + a.pytorch_attention + "' is not one of auto, sdpa, eager");
  if (!a.train.train) fail(ErrorKind::usage, "plan and fit need --train (use `memplan analyze` for inference)");
  if (a.pytorch_outputs != "held" && a.pytorch_outputs != "freed")
    fail(ErrorKind::usage, "--pytorch-outputs '" + a.pytorch_outputs + "' is not one of held, freed");
  const planner::PytorchEager pytorch{a.pytorch_attention != "eager", planner::parse_size(a.pytorch_workspace),
                                      a.pytorch_outputs == "held", a.pytorch_attention == "auto"};
  if (parallel_requested(a.parallel)) return run_parallel_plan(a.train, a.parallel, a.json, a.plan_file, pytorch);
  const analysis::Graph shaped = load_shaped_model(a.train.model);
  warn_if_eval_export(shaped, a.train.model.model);
  planner::StepRequest req = step_request(a.train);
  req.pytorch = pytorch;
  const planner::StepPlan step = planner::plan_training_step(shaped, req);
  const PlanFacts facts = plan_facts(step.result);
  analysis::OutputFiles files;
  if (!a.plan_file.empty()) save_plan(files, a.plan_file, step);
  if (a.json) {
    nlohmann::json j = plan_json(a, step, facts);
    j["notes"] = shaped.notes;  // what shape inference decided for the user to know (an If planned with one branch)
    std::cout << json_text(j, 2) << "\n";
  }
  else print_plan(a, step, facts);
  commit_after_stdout(files);
  return 0;
}

void add_plan(CLI::App& app, std::function<int()>& action) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand("plan", "training step under a memory budget: recompute and swap, verified plan");
  add_training_args(cmd, args->train);
  add_parallel_args(cmd, args->parallel);
  cmd->add_flag("--json", args->json, "print one JSON object");
  cmd->add_option("--save-plan", args->plan_file, "write the plan (JSON, graph embedded) to this file");
  add_deprecated_alias(cmd, "--plan", "--save-plan", "analyze/plan", args->plan_file);
  cmd->add_option("--pytorch-attention", args->pytorch_attention,
                  "attention PyTorch runs in the pytorch_peak_bytes prediction: auto (default: one SDPA kernel where the "
                  "export has an SDPA call's form, Q and K^T each scaled; the model's own attention as matmul, softmax, "
                  "matmul), sdpa (every attention one fused kernel) or eager (matmul, softmax, matmul)");
  cmd->add_option("--pytorch-workspace", args->pytorch_workspace,
                  "what PyTorch's allocator holds for cuBLAS/cuBLASLt workspaces, part of pytorch_peak_bytes (default 65MiB: PyTorch 2.11, CUDA 13, H100)");
  cmd->add_option("--pytorch-outputs", args->pytorch_outputs,
                  "held (default): the loop keeps the model's output to the end of the step (out = model(x); loss = loss_fn(out, y)); "
                  "freed: the loss is taken inline (loss_fn(model(x), y)), the output dies at its last use");
  cmd->callback([args, &action] { action = [args] { return run_plan(*args); }; });
}

[[maybe_unused]] const int registered = register_command(20, &add_plan);

}  // namespace
}  // namespace memplan::cli
