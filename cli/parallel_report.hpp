// `--gpus N --zero --tp --pp ...`: the parallel layout options of plan and fit, and how per-rank plans are stated.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "cli/training_args.hpp"
#include "planner/parallel/parallel.hpp"
#include "planner/pytorch/data_parallel_eager.hpp"

namespace memplan::cli {

// Read wide and checked by parallel_options, so that no value wraps before its range is checked.
struct ParallelArgs {
  std::optional<std::int64_t> gpus;  // none: not given (a one-GPU plan as before, or tp x pp GPUs)
  std::int64_t zero = 0;
  std::int64_t tp = 1;
  std::int64_t pp = 1;
  std::string pp_schedule = "1f1b";
  bool sequence_parallel = false;
};

void add_parallel_args(CLI::App* cmd, ParallelArgs& args);
// True when any option of a parallel layout was given.
bool parallel_requested(const ParallelArgs& args);
// The layout, checked (ErrorKind::usage naming the option and its range: --gpus 1..kMaxGpus, --tp and --pp 1..--gpus,
// their product dividing --gpus, --microbatches 1..kMaxMicrobatches); microbatches from --microbatches.
planner::ParallelOptions parallel_options(const ParallelArgs& args, std::int64_t microbatches);

// {"layout": {...}, "ranks": [...], "communication_bytes_per_step": {...}, ...} (docs/multi-gpu.md).
nlohmann::json parallel_json(const planner::ParallelPlanResult& r);
// One table per rank role.
std::string parallel_text(const planner::ParallelPlanResult& r);
// `memplan plan --train --gpus N ...`: plans every rank role, prints the JSON or the tables; --save-plan FILE
// writes one plan per rank role (docs/plan-schema.md, "Rank plans").
// `pytorch`: how PyTorch eager runs the step, for the prediction of PyTorch's DDP / ZeRO-1 / FSDP2 on each rank (data
// parallel alone: --tp 1 --pp 1).
int run_parallel_plan(const TrainingArgs& train, const ParallelArgs& par, bool json, const std::string& plan_file,
                      const std::optional<planner::PytorchEager>& pytorch = std::nullopt);
// The model loaded, fused and planned per rank role as `plan --gpus` does (--microbatches are the layout's); with
// `pytorch`, PyTorch's layout predicted on each rank too.
struct RankPlans {
  TrainingSetup setup;
  planner::ParallelPlanResult result;
  std::optional<planner::PytorchDataParallel> pytorch;
};
RankPlans plan_rank_roles(const TrainingArgs& train, const ParallelArgs& par,
                          const std::optional<planner::PytorchEager>& pytorch = std::nullopt);
// {"layout": "FSDP2", "roles": [{"ranks", "pytorch_peak_bytes", ...}], ...} and the text lines of the same.
nlohmann::json pytorch_parallel_json(const planner::PytorchDataParallel& p);
std::string pytorch_parallel_text(const planner::PytorchDataParallel& p);
// "dp2 zero3 tp1 pp1"
std::string layout_name(const planner::ParallelOptions& o);
// "0,1,2,3" (eight at most), else "0..15".
std::string ranks_text(const std::vector<int>& ranks);

}  // namespace memplan::cli
