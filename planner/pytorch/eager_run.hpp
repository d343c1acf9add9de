// The step PyTorch eager runs, as predict_pytorch builds and replays it (step.cpp), for the predictions built on its
// timeline (data_parallel_eager.cpp). Not installed: the eager model is the planner's own.
#pragma once

#include "analysis/graph.hpp"
#include "planner/pytorch/eager_model.hpp"
#include "planner/step.hpp"

namespace memplan::planner {

// The step (fused only where PyTorch runs one kernel), its keep-everything plan in the program's order and the eager
// model's replay of it (with its timeline when asked).
struct PytorchEagerRun {
  TrainingStep step;
  TrainingPlanResult planned;
  EagerPeak peak;  // workspaces not included
};
PytorchEagerRun run_pytorch_eager(const analysis::Graph& shaped_forward, const StepRequest& req, const PytorchEager& eager,
                                  bool timeline = false);

}  // namespace memplan::planner
