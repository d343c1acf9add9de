// The one place that knows the order of a step: shaped forward -> fuse -> training graph -> remat/swap -> assign ->
// verify, with its reports (what was fused, device memory part by part, what PyTorch eager would need). The command
// line, the benches and the sample call these entry points; none stitches a step together by hand.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analysis/graph.hpp"
#include "analysis/training.hpp"
#include "planner/pytorch/eager_doubts.hpp"
#include "planner/fusion.hpp"
#include "planner/inference.hpp"
#include "planner/plan.hpp"
#include "planner/training_plan.hpp"

namespace memplan::planner {

// What fusion did to a forward graph: groups by kind, and the intermediate bytes no longer planned.
struct FusionSummary {
  bool enabled = false;  // false: no pass enabled (--no-fuse)
  struct Group {
    std::string kind;
    std::string op;  // the fused op's name (in the fused forward graph and the training graph built from it)
    std::vector<std::string> members;
  };
  std::vector<Group> groups;  // in the order fuse_graph made them
  std::uint64_t intermediate_bytes_removed = 0;
};

// Fuses `shaped` (a forward graph with concrete shapes) in place with the passes `opts` enables; with none
// (FuseOptions::none()) the graph is untouched and the summary says fusion was off.
FusionSummary fuse_in_place(analysis::Graph& shaped, const FuseOptions& opts);

// A plan's device memory part by part. Peak = weights + optimizer state + other persistent + inputs + arena (what the
// plan holds at once); total = peak + libraries. Convolution scratch is planned inside the arena, not added again.
struct DeviceMemory {
  std::uint64_t weights = 0;
  std::uint64_t optimizer_state = 0;
  std::uint64_t other_persistent = 0;  // persistent bytes that are neither weights nor optimizer state
  std::uint64_t inputs = 0;
  std::uint64_t arena = 0;
  std::uint64_t scratch = 0;  // the largest convolution scratch region (part of the arena)
  std::uint64_t library = 0;  // CUDA context and library workspaces beside the plan
  std::optional<std::uint64_t> budget;
  std::uint64_t peak() const;
  std::uint64_t total() const;
  std::optional<bool> fits() const;  // none without a budget
};

// The largest scratch (workspace) region of the plan.
std::uint64_t largest_scratch(const Plan& plan);
// The parts of a training plan's device memory.
DeviceMemory training_device_memory(const TrainingPlanResult& r, std::optional<std::uint64_t> budget);

// What PyTorch's caching allocator holds for the CUDA libraries once a matmul has run: the cuBLAS and cuBLASLt
// workspaces (65.0 MiB measured on an H100 with PyTorch 2.11 / CUDA 13 before any step, the same for every model of
// bench/torch_recipes.py); part of max_memory_allocated, so of the PyTorch prediction. A step that runs no GEMM (a
// network of convolutions alone, a 1x1 convolution as its classifier) never allocates it: predict_pytorch counts 0 there.
inline constexpr std::uint64_t kPytorchWorkspaceBytes = 65ull << 20;

// How PyTorch eager runs the step the prediction is for.
struct PytorchEager {
  bool sdpa = true;  // attention through scaled_dot_product_attention (one fused kernel); false: matmul, softmax, matmul
  std::uint64_t workspace_bytes = kPytorchWorkspaceBytes;
  bool hold_outputs = true;  // the loop holds the model's output to the end of the step (EagerOptions::hold_outputs)
  // With `sdpa`: only attention in the form an exported SDPA call has (FuseOptions::sdpa_form_only) is SDPA, the
  // model's own attention runs op by op; false: every attention the matcher takes is SDPA.
  bool sdpa_form_only = true;
};

// What PyTorch eager would hold at its peak running the step (torch.cuda.max_memory_allocated): the forward graph fused
// only where PyTorch runs one library kernel, planned keeping everything in PyTorch's op order, its memory replayed by
// the eager model (eager_model.hpp), plus the libraries' workspaces; and where that model guessed.
struct PytorchPrediction {
  std::uint64_t peak_bytes = 0;       // workspace_bytes included
  std::uint64_t workspace_bytes = 0;
  bool sdpa = true;
  bool sdpa_form_only = true;
  bool hold_outputs = true;
  std::vector<EagerDoubt> doubts;     // empty: nothing it could not tell apart
  // A cross-entropy step not chunked: PyTorch's peak with the head and loss through memplan_torch.lm_head_loss (the
  // step --chunked-loss plans), where the output is a head it can chunk; else nullopt.
  std::optional<std::uint64_t> chunked_loss_peak_bytes;
};

// The CUDA context and library workspaces beside the plan, counted against the budget (measured on an H100): the
// default of a request, and of memplan's --library-bytes.
inline constexpr std::uint64_t kDefaultLibraryBytes = 69ull << 20;

// Everything a training step is planned with; the defaults are the command line's.
struct StepRequest {
  StepRequest() { plan.library_bytes = kDefaultLibraryBytes; }
  analysis::TrainingOptions training;
  FuseOptions fuse;            // the forward's fusion passes (the training-mode flag is set by the step)
  TrainingPlanOptions plan;    // strategy, budget, library bytes, device profile, arena and schedule, exact remat
  std::optional<PytorchEager> pytorch;  // set: predict PyTorch eager's peak for the same step
};

// A training step built (fused forward, training graph), not yet planned.
struct TrainingStep {
  analysis::TrainingGraph training;
  TrainingPlanOptions options;
  FusionSummary fusion;                        // what was fused in the forward before the training graph was built
  analysis::Graph fused_forward;               // the forward graph the training graph was built from
  analysis::TrainingOptions training_options;  // what it was built with
};

// A training step planned, with its reports.
struct StepPlan {
  TrainingStep step;
  TrainingPlanResult result;
  DeviceMemory memory;
  std::optional<PytorchPrediction> pytorch;
};

// Fuses a copy of `shaped_forward` with req.fuse (training mode) and builds its training step with req.training, so the
// fused ops' backward rules decide what is saved.
TrainingStep build_training_step(const analysis::Graph& shaped_forward, const StepRequest& req);
// build_training_step, plan_training under req.plan, device memory, and the PyTorch prediction when req.pytorch is set.
StepPlan plan_training_step(const analysis::Graph& shaped_forward, const StepRequest& req);
// The PyTorch prediction alone (req.plan's strategy and budget do not apply: PyTorch keeps every saved tensor).
PytorchPrediction predict_pytorch(const analysis::Graph& shaped_forward, const StepRequest& req, const PytorchEager& eager);

// An inference step: the shaped graph fused with `fuse`, then plan_inference.
struct InferenceStep {
  FusionSummary fusion;
  analysis::Graph graph;  // the fused graph the plan is for
  InferencePlan plan;
};
InferenceStep plan_inference_step(analysis::Graph shaped, const FuseOptions& fuse, const AssignOptions& assign = {},
                                  const ScheduleOptions& schedule = {});

}  // namespace memplan::planner
