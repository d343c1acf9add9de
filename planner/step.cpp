// Steps end to end: fuse, build the training graph, plan, and the reports beside the plan.
#include "planner/step.hpp"

#include <algorithm>
#include <utility>

#include "analysis/error.hpp"

namespace memplan::planner {

FusionSummary fuse_in_place(analysis::Graph& shaped, const FuseOptions& opts) {
  FusionSummary s;
  s.enabled = opts.attention || opts.norms || opts.gelu || opts.elementwise || opts.layouts;
  if (!s.enabled) return s;
  FusionResult r = fuse_graph(shaped, opts);
  for (const auto& grp : r.groups)
    s.groups.push_back({grp.kind, grp.op < r.graph.ops.size() ? r.graph.ops[grp.op].name : std::string(), grp.members});
  s.intermediate_bytes_removed = r.intermediate_bytes_removed;
  shaped = std::move(r.graph);
  return s;
}

std::uint64_t DeviceMemory::peak() const {
  std::uint64_t p = 0;
  for (std::uint64_t part : {weights, optimizer_state, other_persistent, inputs, arena})
    p = checked_add(p, part, "device memory");
  return p;
}

std::uint64_t DeviceMemory::total() const { return checked_add(peak(), library, "device memory"); }

std::optional<bool> DeviceMemory::fits() const {
  if (!budget) return std::nullopt;
  return total() <= *budget;
}

std::uint64_t largest_scratch(const Plan& plan) {
  std::uint64_t most = 0;
  for (const auto& s : plan.scratch) most = std::max(most, s.bytes);
  return most;
}

DeviceMemory training_device_memory(const TrainingPlanResult& r, std::optional<std::uint64_t> budget) {
  DeviceMemory m;
  m.weights = r.weight_bytes;
  m.optimizer_state = r.optimizer_state_bytes;
  const std::uint64_t named = r.weight_bytes + r.optimizer_state_bytes;
  m.other_persistent = r.persistent_bytes > named ? r.persistent_bytes - named : 0;
  m.inputs = r.input_bytes;
  m.arena = r.activation_arena_bytes;
  m.scratch = largest_scratch(r.plan);
  m.library = r.library_bytes;
  m.budget = budget;
  return m;
}

TrainingStep build_training_step(const analysis::Graph& shaped_forward, const StepRequest& req) {
  TrainingStep s;
  analysis::Graph forward = shaped_forward;
  FuseOptions training_fuse = req.fuse;
  training_fuse.training = true;
  s.fusion = fuse_in_place(forward, training_fuse);
  s.training = analysis::build_training_graph(forward, req.training);
  s.fused_forward = std::move(forward);
  s.training_options = req.training;
  s.options = req.plan;
  return s;
}

StepPlan plan_training_step(const analysis::Graph& shaped_forward, const StepRequest& req) {
  StepPlan p;
  p.step = build_training_step(shaped_forward, req);
  p.result = plan_training(p.step.training, p.step.options);
  p.memory = training_device_memory(p.result, p.step.options.budget_bytes);
  if (req.pytorch) p.pytorch = predict_pytorch(shaped_forward, req, *req.pytorch);
  return p;
}

InferenceStep plan_inference_step(analysis::Graph shaped, const FuseOptions& fuse, const AssignOptions& assign,
                                  const ScheduleOptions& schedule) {
  InferenceStep s;
  s.fusion = fuse_in_place(shaped, fuse);
  s.plan = plan_inference(shaped, assign, schedule);
  s.graph = std::move(shaped);
  return s;
}

}  // namespace memplan::planner
