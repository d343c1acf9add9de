// The sample models' training steps and their inputs, and a planned step on the CPU executor, shared by the CPU
// and GPU training-step tests.
#pragma once

#include <doctest/doctest.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "analysis/import.hpp"
#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "planner/training_plan.hpp"
#include "runtime_allocator/executor.hpp"
#include "runtime_allocator/npy.hpp"

namespace memplan::runtime::testing {

// samples/models/ of the checkout; MEMPLAN_SOURCE_DIR in the environment overrides it where the binary
// runs away from its checkout (the GPU machine).
inline std::string models_dir() {
  const char* src = std::getenv("MEMPLAN_SOURCE_DIR");
  return std::string(src ? src : MEMPLAN_SOURCE_DIR) + "/samples/models/";
}

// The training step of sample model `name` (weights loaded) with optimizer `opt`.
inline analysis::TrainingGraph training(const std::string& name, analysis::Optimizer opt = analysis::Optimizer::sgd) {
  analysis::ImportOptions io;
  io.keep_weight_data = true;
  analysis::TrainingOptions to;
  to.optimizer = opt;
  return analysis::build_training_graph(analysis::infer_shapes(analysis::import_onnx(models_dir() + name + ".onnx", io), {}), to);
}

// The model's sample input and a deterministic target.
inline std::vector<analysis::TensorData> feeds(const std::string& name, const analysis::Graph& g) {
  std::vector<analysis::TensorData> v;
  std::mt19937 rng(11);
  for (analysis::TensorId t : g.inputs) {
    const auto& x = g.tensors[t];
    if (v.empty()) {
      v.push_back(read_npy(models_dir() + name + ".input.npy"));
      continue;
    }
    std::vector<double> d(x.element_count());
    for (auto& e : d) e = std::uniform_real_distribution<double>(-1, 1)(rng);
    v.push_back(analysis::TensorData::from_double(x.dtype, x.shape(), d));
  }
  return v;
}

// A training step planned (strategy none by default, the plan verified) and bound on the CPU executor, which
// keeps weights and optimizer state across runs.
struct PlannedStep {
  analysis::TrainingGraph tg;
  planner::TrainingPlanResult r;
  runtime::HostBackend backend;
  std::unique_ptr<runtime::Executor> ex;
  explicit PlannedStep(analysis::TrainingGraph g) : tg(std::move(g)), r(planner::plan_training(tg, {})) {
    REQUIRE(r.report.valid);
    ex = std::make_unique<runtime::Executor>(r.graph, r.plan, backend);
  }
};

// The plan of `tg` under `strategy`, verified; nullopt (with a message) when the strategy cannot plan it.
inline std::optional<planner::TrainingPlanResult> plan_strategy(const analysis::TrainingGraph& tg, const std::string& strategy) {
  planner::TrainingPlanOptions po;
  po.strategy = strategy;
  std::optional<planner::TrainingPlanResult> r;
  try {
    r = planner::plan_training(tg, po);
  } catch (const Error& e) {
    MESSAGE("strategy " << strategy << " not planned: " << e.what());
    return std::nullopt;
  }
  REQUIRE(r->report.valid);
  return r;
}

}  // namespace memplan::runtime::testing
