// `memplan analyze`: inference memory of a model: weights, lower bound, verified arena plan, peak tensors.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "analysis/names.hpp"
#include "analysis/liveness.hpp"
#include "cli/common.hpp"
#include "cli/deprecated_flags.hpp"
#include "cli/device_memory.hpp"
#include "cli/fusion_report.hpp"
#include "cli/plan_report.hpp"
#include "cli/registry.hpp"
#include "planner/assign.hpp"
#include "planner/inference.hpp"
#include "planner/step.hpp"
#include "planner/plan_json.hpp"
#include "planner/remat.hpp"
#include "viz/timeline.hpp"

namespace memplan::cli {
namespace {

struct AnalyzeArgs {
  ModelArgs model;
  bool json = false;
  bool shapes = false;
  std::string plan_file;
  ArenaArgs arena;
  int top = 12;
  std::string budget;  // "16GiB": answer fits / does not fit
  std::string library_bytes = kDefaultLibraryBytes;
};

nlohmann::json shapes_json(const analysis::Graph& g) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& t : g.tensors)
    out[t.name] = {{"dtype", analysis::dtype_name(t.dtype)}, {"shape", t.shape()}, {"role", analysis::role_name(t.role)}};
  return out;
}

// What analyze reports beside the plan: the model's bytes by role, the naive sum, and the live peak.
struct AnalyzeFacts {
  std::uint64_t weights = 0, inputs = 0, naive = 0, params = 0;
  std::size_t unresolved = 0;
  viz::Usage usage;
  const analysis::Op* peak_op = nullptr;  // null: no steps
  DeviceMemory mem;
  double total_seconds = 0.0;
};

AnalyzeFacts analyze_facts(const AnalyzeArgs& a, const planner::InferenceStep& step) {
  AnalyzeFacts f;
  const analysis::Graph& g = step.graph;
  const planner::Plan& p = step.plan.plan;
  for (analysis::TensorId t = 0; t < g.tensors.size(); ++t) {
    const auto& x = g.tensors[t];
    if (!x.shape_known()) {
      ++f.unresolved;
      continue;
    }
    if (x.role == analysis::TensorRole::weight) {
      f.weights = checked_add(f.weights, x.bytes(), "weights");
      if (analysis::dtype_is_float(x.dtype)) f.params += x.element_count();
    } else if (x.role == analysis::TensorRole::input) {
      f.inputs = checked_add(f.inputs, x.bytes(), "inputs");
    }
    f.naive = checked_add(f.naive, step.plan.liveness.bytes[t], "naive total");
  }
  // Peak (one meaning in every command): weights + inputs + arena. The live peak is the most arena bytes
  // in use at one step; what is live then is listed.
  f.usage = viz::plan_usage(p);
  if (!p.schedule.empty()) f.peak_op = &g.ops[p.schedule[f.usage.peak_step]];
  f.mem.weights = f.weights;
  f.mem.inputs = f.inputs;
  f.mem.arena = p.arena_bytes;
  f.mem.scratch = largest_scratch(p);
  f.mem.library = parse_library_bytes(a.library_bytes);
  if (!a.budget.empty()) f.mem.budget = planner::parse_size(a.budget);
  return f;
}

nlohmann::json live_json(const planner::InferenceStep& step, const AnalyzeFacts& f) {
  nlohmann::json live = nlohmann::json::array();
  if (!f.peak_op) return live;
  const analysis::Graph& g = step.graph;
  const analysis::Liveness& l = step.plan.liveness;
  for (auto t : analysis::live_at(l, f.usage.peak_step)) {
    const auto& x = g.tensors[t];
    live.push_back({{"tensor", x.name}, {"bytes", l.bytes[t]}, {"producer", g.ops[x.producer].name},
                    {"producer_type", g.ops[x.producer].type}, {"shape", x.shape()}});
  }
  return live;
}

nlohmann::json analyze_json(const AnalyzeArgs& a, const planner::InferenceStep& step, const AnalyzeFacts& f) {
  const analysis::Graph& g = step.graph;
  const planner::Plan& p = step.plan.plan;
  nlohmann::json j;
  j["model"] = a.model.model;
  j["ops"] = g.ops.size();
  j["tensors"] = g.tensors.size();
  j["unresolved_tensors"] = f.unresolved;
  add_device_memory_json(j, f.mem);  // weights, inputs, arena, scratch, libraries, peak, total, fits
  j["parameters"] = f.params;
  j["lower_bound_bytes"] = step.plan.liveness.lower_bound_bytes;
  j["aliased_lower_bound_bytes"] = p.aliased_lower_bound_bytes;
  j["arena_bytes"] = p.arena_bytes;
  j["naive_bytes"] = f.naive;
  j["saving_bytes"] = f.naive > p.arena_bytes ? f.naive - p.arena_bytes : 0;
  j["alignment"] = p.alignment;
  j["packer"] = p.packer;
  j["buffers"] = p.buffers.size();
  j["live_peak_bytes"] = f.usage.peak_bytes;
  j["live_peak_step"] = f.usage.peak_step;
  j["live_peak_op"] = f.peak_op ? f.peak_op->name : "";
  j["live_peak_op_type"] = f.peak_op ? f.peak_op->type : "";
  j["arena_optimal"] = p.arena_optimal;
  j["arena_gap"] = p.arena_gap;
  j["schedule"] = schedule_json(step.plan.schedule);
  j["plan_valid"] = step.plan.report.valid;
  j["plan_seconds"] = step.plan.plan_seconds;
  j["total_seconds"] = f.total_seconds;
  j["live_at_live_peak"] = live_json(step, f);
  j["fusion"] = fusion_json(step.fusion);
  if (a.shapes) j["tensor_shapes"] = shapes_json(g);
  return j;
}

// The tensors live at the live peak, at most `top` rows, whole names (exporter names differ in their tails, and a
// cut name may read as another tensor's).
void print_live_table(const planner::InferenceStep& step, const AnalyzeFacts& f, int top) {
  const analysis::Graph& g = step.graph;
  const analysis::Liveness& l = step.plan.liveness;
  const auto live = analysis::live_at(l, f.usage.peak_step);
  std::printf("\nlive at the live peak (step %u): %zu tensors\n", f.usage.peak_step, live.size());
  std::vector<std::array<std::string, 4>> rows;
  for (auto t : live) {
    if (rows.size() == static_cast<std::size_t>(top)) break;
    const auto& x = g.tensors[t];
    std::string shape = "[";
    for (std::size_t k = 0; k < x.dims.size(); ++k) shape += (k ? "," : "") + std::to_string(x.dims[k].value);
    shape += "]";
    rows.push_back({analysis::terminal_safe(x.name), human_bytes(l.bytes[t]),
                    analysis::terminal_safe(g.ops[x.producer].name + " (" + g.ops[x.producer].type + ")"), shape});
  }
  std::size_t w0 = 6, w2 = 7;
  for (const auto& r : rows) w0 = std::max(w0, r[0].size()), w2 = std::max(w2, r[2].size());
  std::printf("  %-*s %12s  %-*s %s\n", static_cast<int>(w0), "tensor", "bytes", static_cast<int>(w2), "made by", "shape");
  for (const auto& r : rows)
    std::printf("  %-*s %12s  %-*s %s\n", static_cast<int>(w0), r[0].c_str(), r[1].c_str(), static_cast<int>(w2), r[2].c_str(), r[3].c_str());
  if (live.size() > rows.size()) std::printf("  ... %zu more\n", live.size() - rows.size());
}

void print_analyze(const AnalyzeArgs& a, const planner::InferenceStep& step, const AnalyzeFacts& f) {
  const analysis::Graph& g = step.graph;
  const planner::Plan& p = step.plan.plan;
  const analysis::Liveness& l = step.plan.liveness;
  auto ratio = [](std::uint64_t x, std::uint64_t y) { return y ? static_cast<double>(x) / static_cast<double>(y) : 0.0; };
  std::printf("model              %s (%zu ops, %zu tensors)\n", analysis::terminal_safe(a.model.model).c_str(), g.ops.size(), g.tensors.size());
  std::printf("fused              %s\n", fusion_text(step.fusion).c_str());
  std::printf("parameters         %s\n", human_count(static_cast<double>(f.params)).c_str());
  std::printf("peak               %s = weights %s + inputs %s + arena %s (the most device bytes the plan holds)\n",
              human_bytes(f.mem.peak()).c_str(), human_bytes(f.weights).c_str(), human_bytes(f.inputs).c_str(), human_bytes(p.arena_bytes).c_str());
  std::printf("%s", device_memory_text(f.mem).c_str());
  const analysis::Op* op = f.peak_op;
  std::printf("live peak          %s at step %u%s%s%s: the most arena bytes in use at one step\n", human_bytes(f.usage.peak_bytes).c_str(),
              f.usage.peak_step, op ? " (" : "", op ? (op->name + ", " + op->type).c_str() : "", op ? ")" : "");
  std::printf("schedule           %s\n", schedule_text(step.plan.schedule).c_str());
  std::printf("lower bound        %s (no sharing of live tensors); %s with in-place and views\n",
              human_bytes(l.lower_bound_bytes).c_str(), human_bytes(p.aliased_lower_bound_bytes).c_str());
  std::printf("planned arena      %s (%zu buffers, packer %s, %llu-byte aligned); arena / lower bound %.3f\n",
              human_bytes(p.arena_bytes).c_str(), p.buffers.size(), p.packer.c_str(),
              static_cast<unsigned long long>(p.alignment), ratio(p.arena_bytes, l.lower_bound_bytes));
  if (p.arena_optimal) std::printf("arena optimality   proven optimal (no packing of these buffers is smaller)\n");
  else std::printf("arena optimality   at most %.2f%% above the best proven lower bound (--exact-pack-seconds searches longer)\n", 100.0 * p.arena_gap);
  std::printf("naive total        %s (every tensor its own buffer)\n", human_bytes(f.naive).c_str());
  std::printf("saving             %s (naive / arena %.2fx)\n",
              human_bytes(f.naive > p.arena_bytes ? f.naive - p.arena_bytes : 0).c_str(), ratio(f.naive, p.arena_bytes));
  std::printf("plan               %s, planned in %.3f s\n", step.plan.report.valid ? "valid (verified)" : "INVALID", step.plan.plan_seconds);
  if (op) print_live_table(step, f, a.top);
  if (!a.plan_file.empty()) std::printf("\nplan written to %s\n", analysis::terminal_safe(a.plan_file).c_str());
}

int run_analyze(const AnalyzeArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  const analysis::Graph shaped = load_shaped_model(a.model);
  const planner::InferenceStep step =
      planner::plan_inference_step(shaped, fuse_options(a.model), assign_options(a.arena), schedule_options(a.arena));
  AnalyzeFacts facts = analyze_facts(a, step);
  facts.total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  analysis::OutputFiles files;  // renamed into place once stdout is written
  if (!a.plan_file.empty()) files.add(a.plan_file, json_text(planner::plan_to_json(step.graph, step.plan.plan, true), 1) + "\n");
  if (a.json) {
    nlohmann::json j = analyze_json(a, step, facts);
    j["notes"] = shaped.notes;  // what shape inference decided for the user to know (an If planned with one branch)
    std::cout << json_text(j, 2) << "\n";
  }
  else print_analyze(a, step, facts);
  commit_after_stdout(files);
  return 0;
}

void add_analyze(CLI::App& app, std::function<int()>& action) {
  auto args = std::make_shared<AnalyzeArgs>();
  CLI::App* cmd = app.add_subcommand("analyze", "inference memory: peak, total device memory (fits --budget?), lower bound and a verified arena plan");
  add_model_args(cmd, args->model);
  cmd->add_flag("--json", args->json, "print one JSON object");
  cmd->add_flag("--shapes", args->shapes, "with --json: include every tensor's dtype and shape");
  cmd->add_option("--save-plan", args->plan_file, "write the plan (JSON, graph embedded) to this file");
  add_deprecated_alias(cmd, "--plan", "--save-plan", "analyze/plan", args->plan_file);
  add_arena_args(cmd, args->arena);
  cmd->add_option("--top", args->top, "tensors to list at the live peak")->check(CLI::Range(0, 100000));
  cmd->add_option("--budget", args->budget, "device memory budget, e.g. 16GiB: say whether the total fits");
  add_library_bytes_arg(cmd, args->library_bytes);
  cmd->callback([args, &action] { action = [args] { return run_analyze(*args); }; });
}

[[maybe_unused]] const int registered = register_command(10, &add_analyze);

}  // namespace
}  // namespace memplan::cli
