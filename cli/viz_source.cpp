// Plans (or reads) what the picture commands draw: inference or training plans, or saved plan files.
#include "cli/viz_source.hpp"
#include "cli/plan_report.hpp"

#include <filesystem>
#include <fstream>

#include "analysis/autocast.hpp"
#include "analysis/import.hpp"
#include "analysis/json_read.hpp"
#include "planner/step.hpp"
#include "planner/inference.hpp"
#include "planner/plan_json.hpp"
#include "planner/fusion.hpp"
#include "planner/training_plan.hpp"
#include "planner/verify.hpp"
#include "viz/svg.hpp"

namespace memplan::cli {

void add_viz_source_args(CLI::App* cmd, VizSourceArgs& a, bool plans) {
  add_training_args(cmd, a.train);
  if (plans)
    cmd->add_option("--plan", a.plan_files,
                    "read this saved plan (JSON, graph embedded) and draw it instead of planning; twice to compare");
}

namespace {

std::string model_title(const TrainingArgs& a) {
  std::string t = std::filesystem::path(a.model.model).filename().string();
  for (const char* ext : {".onnx", ".json"})
    if (t.size() > std::string(ext).size() && t.ends_with(ext)) t.resize(t.size() - std::string(ext).size());
  for (const auto& d : a.model.dims) t += " \u00b7 " + d;
  return t;
}

PlannedModel plan_inference_model(const TrainingArgs& a) {
  planner::InferenceStep step =
      planner::plan_inference_step(load_shaped_model(a.model), fuse_options(a.model), assign_options(a.arena), schedule_options(a.arena));
  PlannedModel m;
  m.graph = std::move(step.graph);
  m.fusion = std::move(step.fusion);
  m.plan = std::move(step.plan.plan);
  m.lower_bound_bytes = m.plan.aliased_lower_bound_bytes;
  m.title = model_title(a) + " \u00b7 inference";
  m.note = "lower bound without sharing " + viz::bytes_label(step.plan.liveness.lower_bound_bytes);
  return m;
}

PlannedModel plan_training_model(TrainingArgs a, const std::string& strategy) {
  a.strategy = strategy;
  auto s = load_training(a);
  auto& po = s.options;
  PlannedModel m;
  m.fusion = s.fusion;
  m.budget = po.budget_bytes.value_or(0);
  planner::TrainingPlanResult r;
  try {
    r = planner::plan_training(s.training, po);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::infeasible || !po.budget_bytes) throw;
    po.budget_bytes.reset();  // draw what this strategy does without the budget, with the budget line above it
    r = planner::plan_training(s.training, po);
    m.over_budget = true;
  }
  const std::uint64_t fixed = r.persistent_bytes + r.input_bytes;
  m.arena_budget = m.budget > fixed ? m.budget - fixed : 0;
  m.lower_bound_bytes = r.plan.aliased_lower_bound_bytes;
  m.title = model_title(a) + " \u00b7 training (" + a.optimizer + ") \u00b7 " + r.strategy;
  if (m.budget) m.title += std::string(" \u00b7 budget ") + viz::bytes_label(m.budget) + (m.over_budget ? " NOT MET" : "");
  // The words plan prints: the peak (persistent + inputs + arena), the step against keep-all, what is recomputed and swapped.
  m.peak_bytes = r.peak_bytes;
  m.estimated_step_seconds = r.estimated_step_seconds;
  m.keep_all_step_seconds = r.keep_all_step_seconds;
  m.note = "peak " + human_bytes(r.peak_bytes) + " = persistent " + human_bytes(r.persistent_bytes) + " + inputs " +
           human_bytes(r.input_bytes) + " + arena " + human_bytes(r.activation_arena_bytes) + " \u00b7 step " +
           step_text(r.estimated_step_seconds, r.keep_all_step_seconds);
  if (r.recomputed_tensors) m.note += " \u00b7 recomputes " + std::to_string(r.recomputed_tensors) + " tensors";
  if (r.swapped_tensors)
    m.note += " \u00b7 swaps " + std::to_string(r.swapped_tensors) + " tensors (" + human_bytes(r.swap_bytes) + ")" +
              (r.swap_stall_seconds > 0 ? ", waits " + step_text(r.swap_stall_seconds, 0) + " for copies" : ", copies hidden");
  m.graph = std::move(r.graph);
  m.plan = std::move(r.plan);
  return m;
}

}  // namespace

PlannedModel plan_model(const VizSourceArgs& a, const std::string& strategy) {
  return a.train.train ? plan_training_model(a.train, strategy) : plan_inference_model(a.train);
}

PlannedModel load_plan_file(const std::string& path) {
  const nlohmann::json doc = analysis::read_json_file(path, "plan");
  PlannedModel m;
  if (doc.is_object() && doc.contains("schema") && doc["schema"] == "memplan-rank-plans")
    fail(ErrorKind::plan_mismatch, "plan '" + path + "' holds rank plans, one per rank role (written by plan --gpus --save-plan): this "
                                   "command reads the plan of one GPU (analyze or plan --save-plan without --gpus); viz --plan draws rank plans");
  if (!doc.contains("graph"))
    fail(ErrorKind::plan_mismatch, "plan '" + path + "' has no embedded graph (write it with plan or analyze --save-plan)");
  m.graph = analysis::import_json(doc["graph"], path);
  m.plan = planner::plan_from_json(m.graph, doc);
  planner::require_valid(m.graph, m.plan);
  m.lower_bound_bytes = m.plan.aliased_lower_bound_bytes;
  m.title = std::filesystem::path(path).filename().string();
  return m;
}

namespace {

// A saved plan's graph (the model as planned: possibly fused, or a training step with recomputation and
// swaps appended) must hold the MODEL's graph inputs, outputs and weights by name, with the same dtypes
// and shapes under the given --dim bindings.
void require_plan_of_model(const analysis::Graph& model, const PlannedModel& m, const std::string& path) {
  auto check = [&](analysis::TensorId t, const char* what) {
    const analysis::Tensor& x = model.tensors[t];
    const analysis::TensorId u = m.graph.find(x.name);
    if (u == analysis::kNoTensor)
      fail(ErrorKind::plan_mismatch, "plan '" + path + "' does not match model '" + model.name + "': it has no " + what + " '" + x.name + "'");
    const analysis::Tensor& y = m.graph.tensors[u];
    if (y.dtype != x.dtype || (x.shape_known() && (!y.shape_known() || y.shape() != x.shape())))
      fail(ErrorKind::plan_mismatch, "plan '" + path + "' does not match model '" + model.name + "': " + what + " '" + x.name +
                                         "' has another dtype or shape there (other --dim or --precision values?)");
  };
  for (analysis::TensorId t : model.inputs) check(t, "graph input");
  for (analysis::TensorId t : model.outputs) check(t, "graph output");
  for (analysis::TensorId t = 0; t < model.tensors.size(); ++t)
    if (model.tensors[t].role == analysis::TensorRole::weight && model.tensors[t].shape_known()) check(t, "weight");
}

}  // namespace

std::vector<PlannedModel> planned_models(const VizSourceArgs& a) {
  std::vector<PlannedModel> out;
  if (!a.plan_files.empty()) {
    // Checked against the model with every fusion pass applied: its weights are the fewest any plan of the
    // model holds (a fused op absorbs the constants of its group), so fused and --no-fuse plans both pass.
    analysis::Graph model = planner::fuse_graph(load_shaped_model(a.train.model)).graph;
    // A plan made with --precision bf16/fp16 holds the graph as torch.autocast runs it (low-precision outputs of
    // the ops on its lower list): the model is checked as the same --precision makes it.
    const auto precision = analysis::precision_from_name(a.train.precision);
    if (!precision) fail(ErrorKind::usage, "--precision '" + a.train.precision + "' is not one of fp32, bf16, fp16");
    if (*precision != analysis::Precision::fp32)
      analysis::apply_autocast(model, *precision == analysis::Precision::bf16 ? analysis::DType::bf16 : analysis::DType::f16);
    for (const auto& f : a.plan_files) {
      out.push_back(load_plan_file(f));
      require_plan_of_model(model, out.back(), f);
    }
  }
  if (out.empty()) out.push_back(plan_model(a, a.train.strategy));
  return out;
}

}  // namespace memplan::cli
