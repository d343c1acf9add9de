// The segment DP (strategy `optimal`'s optimal_segments) against exact remat (the stage-chain MILP through CBC) on
// sample training graphs: recompute FLOPs at several model budgets, the gap, and the solve times.
//
// Usage: bench_remat_exact MODELS_DIR [MAX_STAGES [SECONDS [MAX_NODES [FLAGS]]]]  (FLAGS: o once)
// Stages: the plain forward stages of the training graph (file order, SGD, no fusion), coarsened to MAX_STAGES
// (default 32) as the planner coarsens to 128. Budgets: from the DP's least model peak to keeping everything.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "analysis/cost.hpp"
#include "analysis/import.hpp"
#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "planner/step.hpp"
#include "planner/exact/remat_exact.hpp"

using namespace memplan;
namespace fs = std::filesystem;

namespace {

struct ModelSpec {
  std::string file;
  analysis::DimBindings dims;
};

const std::vector<ModelSpec> kModels = {
    {"resnet18.train.onnx", {{"batch", 32}}},
    {"mobilenet_v2.train.onnx", {{"batch", 32}}},
    {"vgg16.train.onnx", {{"batch", 8}}},
    {"densenet121.train.onnx", {{"batch", 8}}},
};

double mib(std::uint64_t b) { return static_cast<double>(b) / 1048576.0; }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_remat_exact MODELS_DIR [MAX_STAGES [SECONDS [MAX_NODES [FLAGS]]]]\n");
    return 2;
  }
  const fs::path dir = argv[1];
  const std::size_t max_stages = argc > 2 ? std::stoul(argv[2]) : 32;
  planner::ExactRematOptions eo;
  if (argc > 3) eo.seconds = std::stod(argv[3]);
  if (argc > 4) eo.max_nodes = std::stoull(argv[4]);
  const std::string flags = argc > 5 ? argv[5] : "";  // letters: o once
  eo.once = flags.find('o') != std::string::npos;
  std::printf("exact remat: CBC %s; stages <= %zu, limit %.0f s / %llu nodes per solve\n",
              planner::exact_remat_available() ? "linked" : "NOT BUILT", max_stages, eo.seconds, static_cast<unsigned long long>(eo.max_nodes));
  std::printf("| model | stages | budget MiB | DP GFLOP | DP s | exact GFLOP | bound GFLOP | status | exact s | nodes | gap |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& spec : kModels) {
    analysis::ImportOptions io;
    analysis::ShapeOptions so;
    so.dims = spec.dims;
    planner::StepRequest req;  // fused as `memplan plan --train` fuses (planner/step.hpp)
    req.training.optimizer = analysis::Optimizer::sgd;
    const analysis::TrainingGraph tg =
        planner::build_training_step(analysis::infer_shapes(analysis::import_onnx((dir / spec.file).string(), io), so), req).training;
    const analysis::Graph& g = tg.graph;
    const std::vector<analysis::OpId> schedule = analysis::topological_order(g);
    std::vector<double> flops(g.ops.size());
    for (analysis::OpId o = 0; o < g.ops.size(); ++o) flops[o] = analysis::op_cost(g, o).flops;
    const planner::ForwardStages s = planner::coarsen_stages(planner::find_forward_stages(g, schedule, flops, 256), max_stages);
    const std::uint64_t floor = planner::min_segment_peak(s);
    const std::uint64_t full = planner::evaluate_segments(s, {{0, static_cast<std::uint32_t>(s.size() - 1), false}}).peak_bytes;
    for (double f : {0.0, 0.1, 0.25, 0.5, 0.75}) {
      const auto budget = floor + static_cast<std::uint64_t>(f * static_cast<double>(full - std::min(full, floor)));
      const auto t0 = std::chrono::steady_clock::now();
      const planner::SegmentPlan dp = planner::optimal_segments(s, budget);
      const double dp_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double dp_flops = dp.empty() ? INFINITY : planner::evaluate_segments(s, dp).recompute_flops;
      const planner::RematGap gap = planner::remat_gap(s, budget, eo);
      std::printf("| %s | %zu | %.1f | %.2f | %.4f | %.2f | %.2f | %s | %.2f | %llu | %.2f%% |\n", spec.file.c_str(), s.size(), mib(budget),
                  dp_flops / 1e9, dp_s, gap.exact.recompute_flops / 1e9, gap.exact.lower_bound / 1e9, planner::exact_status_name(gap.exact.status),
                  gap.exact.seconds, static_cast<unsigned long long>(gap.exact.nodes), 100.0 * gap.gap);
      std::fflush(stdout);
    }
  }
  return 0;
}
