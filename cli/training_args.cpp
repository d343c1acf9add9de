// The training flags of plan, fit, train, viz and trace, and their meaning as the step library's request.
#include "cli/training_args.hpp"

#include <algorithm>

#include "cli/common.hpp"
#include "cli/plan_report.hpp"

namespace memplan::cli {

void add_training_args(CLI::App* cmd, TrainingArgs& args) {
  add_model_args(cmd, args.model);
  cmd->add_flag("--train", args.train, "plan a training step (forward, loss, backward, optimizer)");
  cmd->add_option("--optimizer", args.optimizer, "none | sgd | momentum | adam | adamw (updates in place, as PyTorch's)");
  cmd->add_option("--optimizer-impl", args.optimizer_impl,
                  "foreach (PyTorch's default) | fused | for-loop: what PyTorch's step() allocates, for pytorch_peak_bytes");
  cmd->add_option("--weight-decay", args.weight_decay, "weight decay (L2 for sgd/momentum/adam, decoupled for adamw)");
  cmd->add_option("--lr", args.learning_rate, "learning rate (default: sgd/momentum 0.01, adam/adamw 0.001)");
  cmd->add_option("--loss", args.loss, "mse (float target of the output's shape) | ce (integer class labels) | none (the output is the loss)");
  cmd->add_option("--class-axis", args.class_axis, "ce: the output's class axis (default: 1, or the last axis of a rank-3 output)");
  cmd->add_flag("--chunked-loss", args.chunked_loss,
                "ce: the output's MatMul (+ bias) and the loss as one LinearCrossEntropy over chunks of rows: the logits never whole");
  cmd->add_option("--precision", args.precision, "fp32 | bf16 | fp16 (torch.autocast's op lists, fp32 master weights)");
  cmd->add_flag("--loss-scaling", args.loss_scaling, "fp16: dynamic loss scaling (GradScaler)");
  cmd->add_option("--microbatches", args.microbatches, "gradient accumulation: plan one micro-step of K");
  cmd->add_option("--budget", args.budget, "device memory budget, e.g. 16GiB, 512MB, 1e9")
      ->check(CLI::Validator([](std::string& v) { return v.find_first_not_of(" \t") == std::string::npos ? std::string("a size is needed, e.g. 16GiB") : std::string(); },
                             "SIZE"));
  cmd->add_option("--strategy", args.strategy, "none | sqrt | budget | optimal | swap | auto (default: auto with --budget, else none); exact (opt-in: keep / swap / recompute per stage as a MILP through CBC on up to --exact-stages stages, started from the segment DP, used where its estimated step is faster than optimal's)");
  cmd->add_option("--exact-stages", args.exact_stages, "strategy exact: the forward stages coarsened to at most this many for the MILP (default 300)");
  cmd->add_option("--exact-nodes", args.exact_nodes, "strategy exact: branch-and-bound nodes per MILP solve, the deterministic limit (default 200)");
  cmd->add_option("--exact-gap", args.exact_gap, "strategy exact: each MILP solve stops once its plan is within this share of the bound (default 0.001)");
  cmd->add_option("--exact-seconds", args.exact_seconds, "strategy exact: most seconds per MILP solve, only a cap (default 20)");
  add_library_bytes_arg(cmd, args.library_bytes);
  cmd->add_option("--device-profile", args.device_profile,
                  "device profile JSON for the step-time estimates the strategies choose by (FLOP/s, bandwidths, per-op-type scales "
                  "from bench/calibrate_profile.py; default: an H100-like placeholder)");
  add_arena_args(cmd, args.arena);
}

planner::StepRequest step_request(const TrainingArgs& args) {
  if (!args.train) fail(ErrorKind::usage, "plan and fit need --train (use `memplan analyze` for inference)");
  planner::StepRequest r;
  analysis::TrainingOptions& to = r.training;
  const auto opt = analysis::optimizer_from_name(args.optimizer);
  if (!opt) fail(ErrorKind::usage, "--optimizer '" + args.optimizer + "' is not one of none, sgd, momentum, adam, adamw");
  to.optimizer = *opt;
  const auto impl = analysis::optimizer_impl_from_name(args.optimizer_impl);
  if (!impl) fail(ErrorKind::usage, "--optimizer-impl '" + args.optimizer_impl + "' is not one of foreach, fused, for-loop");
  to.optimizer_impl = *impl;
  to.weight_decay = require_finite_in(args.weight_decay, 0.0, kMaxWeightDecay, "--weight-decay");
  if (args.learning_rate) to.learning_rate = require_finite_in(*args.learning_rate, 0.0, kMaxLearningRate, "--lr");
  else if (to.optimizer == analysis::Optimizer::adam || to.optimizer == analysis::Optimizer::adamw) to.learning_rate = 0.001;
  const auto loss = analysis::loss_from_name(args.loss);
  if (!loss) fail(ErrorKind::usage, "--loss '" + args.loss + "' is not one of mse, ce, none");
  to.loss = *loss;
  to.class_axis = args.class_axis;
  to.chunked_loss = args.chunked_loss;
  const auto precision = analysis::precision_from_name(args.precision);
  if (!precision) fail(ErrorKind::usage, "--precision '" + args.precision + "' is not one of fp32, bf16, fp16");
  to.precision = *precision;
  if (args.loss_scaling && to.precision != analysis::Precision::fp16)
    fail(ErrorKind::usage, "--loss-scaling needs --precision fp16");
  to.loss_scaling = args.loss_scaling;
  to.microbatches = require_int_in(args.microbatches, 1, kMaxMicrobatches, "--microbatches");
  r.fuse = fuse_options(args.model);
  planner::TrainingPlanOptions& po = r.plan;
  po.strategy = resolved_strategy(args);
  const auto& names = planner::training_strategies();
  if (std::find(names.begin(), names.end(), po.strategy) == names.end() && po.strategy != "exact")
    fail(ErrorKind::usage, "--strategy '" + po.strategy + "' is not one of none, sqrt, budget, optimal, swap, auto");
  if (!args.budget.empty()) po.budget_bytes = planner::parse_size(args.budget);
  po.library_bytes = parse_library_bytes(args.library_bytes);
  if (!args.device_profile.empty()) po.profile = analysis::read_device_profile(args.device_profile);
  po.assign = assign_options(args.arena);
  po.schedule = schedule_options(args.arena);
  po.exact_stages = static_cast<std::size_t>(require_int_in(args.exact_stages, 1, kMaxExactStages, "--exact-stages"));
  po.exact_nodes = static_cast<std::uint64_t>(require_int_in(args.exact_nodes, 0, kMaxExactNodes, "--exact-nodes"));
  po.exact_seconds = require_finite_in(args.exact_seconds, 0.0, kMaxExactSeconds, "--exact-seconds");
  po.exact_gap = require_finite_in(args.exact_gap, 0.0, 1.0, "--exact-gap");
  return r;
}

TrainingSetup training_setup(const analysis::Graph& shaped_forward, const TrainingArgs& args) {
  return planner::build_training_step(shaped_forward, step_request(args));
}

std::string resolved_strategy(const TrainingArgs& args) {
  if (!args.strategy.empty()) return args.strategy;
  return args.budget.empty() ? "none" : "auto";
}

TrainingSetup load_training(const TrainingArgs& args) {
  if (!args.train) fail(ErrorKind::usage, "plan and fit need --train (use `memplan analyze` for inference)");
  const analysis::Graph shaped = load_shaped_model(args.model);
  warn_if_eval_export(shaped, args.model.model);
  return training_setup(shaped, args);
}

}  // namespace memplan::cli
