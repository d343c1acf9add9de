// `memplan fit MODEL --train --max-gpus MAX --budget SIZE`: the fewest GPUs and the parallel layout that fit (docs/multi-gpu.md).
#pragma once

#include <cstdint>
#include <string>

#include "cli/training_args.hpp"

namespace memplan::cli {

struct FitGpusArgs {
  int max_gpus = 0;               // --max-gpus MAX (0: not asked)
  std::int64_t global_batch = 0;  // --global-batch (0: from --dim BATCH=G, or the model's fixed batch)
  std::size_t max_layouts = 256;  // --max-layouts: layouts planned at most
};

// Plans the layouts of 1..MAX GPUs (planner::search_layouts), prints the candidates and the chosen layout
// (JSON with --json); `batch_dim` names the dim split over data-parallel ranks and microbatches. Nothing
// fitting prints the candidates, then fails with ErrorKind::infeasible naming the least per-GPU peak found.
int run_fit_gpus(const TrainingArgs& train, const std::string& batch_dim, const FitGpusArgs& args, bool json);

}  // namespace memplan::cli
