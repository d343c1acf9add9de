// `memplan fit MODEL --train --max-gpus MAX --budget SIZE`: layouts of 1..MAX GPUs planned per rank, the fewest GPUs that fit.
#include "cli/cmd_fit_gpus.hpp"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>

#include "cli/fusion_report.hpp"
#include "analysis/import.hpp"
#include "analysis/names.hpp"
#include "cli/parallel_report.hpp"
#include "cli/plan_report.hpp"
#include "planner/parallel/parallel_fit.hpp"

namespace memplan::cli {
namespace {

constexpr const char* kRule =
    "the fewest GPUs with a fitting layout; among that count's fitting layouts the least estimated step time (the slowest "
    "rank's compute per microbatch, recomputation included, x (M + P - 1), plus its communication bytes / interconnect "
    "bandwidth, not overlapped), then the fewest bytes sent, then the lowest peak, then enumeration order";

nlohmann::json candidate_json(const planner::LayoutCandidate& c, std::uint64_t library_bytes) {
  const auto& o = c.layout;
  nlohmann::json j;
  j["gpus"] = o.gpus;
  j["data_parallel"] = o.data_parallel();
  j["zero"] = o.zero;
  j["tp"] = o.tp;
  j["pp"] = o.pp;
  j["sequence_parallel"] = o.sequence_parallel;
  j["microbatches"] = o.microbatches;
  j["microbatch"] = c.microbatch;
  j["pp_schedule"] = planner::pipeline_schedule_name(o.pp_schedule);
  j["name"] = layout_name(o);
  j["planned"] = c.planned;
  j["fits"] = c.fits;
  j["plan_valid"] = c.planned ? nlohmann::json(c.plan_valid) : nlohmann::json();
  j["peak_bytes"] = c.peak_bytes;
  j["peak_is_lower_bound"] = c.peak_is_lower_bound;
  j["total_device_bytes"] = c.peak_bytes + library_bytes;
  if (c.planned) {
    j["model_state_bytes"] = c.model_state_bytes;
    j["activation_bytes"] = c.activation_bytes;
    j["estimated_step_seconds"] = c.step_seconds;
    j["communication_seconds"] = c.communication_seconds;
    j["communication_bytes_per_step"] = c.communication_bytes;
    j["recomputed_tensors"] = c.recomputed_tensors;
    j["swapped_tensors"] = c.swapped_tensors;
    j["strategies"] = c.strategies;
    j["least_memory_plans"] = c.least_memory_plans;
  }
  j["note"] = c.note;
  return j;
}

std::string layout_words(const planner::LayoutCandidate& c) {
  return layout_name(c.layout) + ", " + std::to_string(c.layout.microbatches) + " microbatch(es) of " + std::to_string(c.microbatch);
}

std::string step_ms(double seconds) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", 1e3 * seconds);
  return b;
}

std::string table_text(const planner::LayoutSearchResult& r) {
  std::string s;
  char line[512];
  std::snprintf(line, sizeof line, "  %-1s %4s  %-22s %4s %6s %12s %12s %5s %11s %11s  %s\n", "", "GPUs", "layout", "M", "batch", "peak/GPU", "model state",
                "fits", "step ms", "comm/step", "note");
  s += line;
  for (std::size_t i = 0; i < r.candidates.size(); ++i) {
    const auto& c = r.candidates[i];
    const std::string peak = (c.peak_is_lower_bound ? ">=" : "") + human_bytes(c.peak_bytes);
    std::snprintf(line, sizeof line, "  %-1s %4d  %-22s %4d %6lld %12s %12s %5s %11s %11s  %s\n", r.chosen && *r.chosen == i ? "*" : "", c.layout.gpus,
                  layout_name(c.layout).c_str(), c.layout.microbatches, static_cast<long long>(c.microbatch), peak.c_str(),
                  c.planned ? human_bytes(c.model_state_bytes).c_str() : "-", c.fits ? "yes" : "no",
                  c.planned ? step_ms(c.step_seconds).c_str() : "-",
                  c.planned ? human_bytes(c.communication_bytes).c_str() : "-", c.note.c_str());
    s += line;
  }
  return s;
}

}  // namespace

// The samples per step and the first microbatch planned: a symbolic batch dim is split per layout (--dim BATCH=G or
// --global-batch G give the step's samples); a fixed batch is every layout's microbatch. Fills so.global_batch and
// so.fixed_microbatch; erases the batch binding from `dims` when it is split.
std::int64_t resolve_batch(const analysis::Graph& forward, analysis::DimBindings& dims, const std::string& batch_dim, bool split,
                           const FitGpusArgs& g, planner::LayoutSearchOptions& so) {
  std::int64_t first_batch = 0;
  if (split) {
    // The batch dim is symbolic: --dim BATCH=G (or --global-batch G) is the step's samples, split per layout.
    const auto given = dims.find(batch_dim);
    if (given != dims.end() && g.global_batch > 0 && given->second != g.global_batch)
      fail(ErrorKind::usage, "--global-batch " + std::to_string(g.global_batch) + " and --dim " + batch_dim + "=" + std::to_string(given->second) +
                                 " disagree (with --max-gpus both give the samples per step)");
    so.global_batch = g.global_batch > 0 ? g.global_batch : given != dims.end() ? given->second : 0;
    if (so.global_batch < 1)
      fail(ErrorKind::usage, "fit --max-gpus needs the samples per step: --dim " + batch_dim + "=G (the global batch, split over data-parallel ranks and microbatches) or --global-batch G");
    if (given != dims.end()) dims.erase(given);
    first_batch = so.global_batch;
  } else {
    // A fixed batch is every layout's microbatch: the layouts with data parallel x microbatches = G / batch.
    analysis::ShapeOptions sh;
    sh.dims = dims;
    const analysis::Graph shaped = analysis::infer_shapes(forward, sh);
    for (analysis::TensorId t : shaped.inputs)
      if (!shaped.tensors[t].dims.empty() && shaped.tensors[t].dims[0].known()) {
        so.fixed_microbatch = shaped.tensors[t].dims[0].value;
        break;
      }
    if (so.fixed_microbatch < 1) fail(ErrorKind::usage, "fit --max-gpus: the model has no symbolic '" + batch_dim + "' dim and no fixed batch in its first input");
    so.global_batch = g.global_batch > 0 ? g.global_batch : so.fixed_microbatch;
    if (so.global_batch % so.fixed_microbatch != 0)
      fail(ErrorKind::usage, "--global-batch " + std::to_string(so.global_batch) + " is not a multiple of the model's fixed batch " +
                                 std::to_string(so.fixed_microbatch));
    first_batch = so.fixed_microbatch;
  }
  return first_batch;
}

nlohmann::json fit_gpus_json(const TrainingArgs& train, const std::string& batch_dim, const planner::LayoutSearchOptions& so,
                             const planner::LayoutSearchResult& r, const TrainingSetup& base, std::size_t pruned) {
  const planner::TrainingPlanOptions& options = base.options;
  const std::uint64_t lib = options.library_bytes;
  nlohmann::json j;
  j["model"] = train.model.model;
  j["budget_bytes"] = *options.budget_bytes;
  j["library_bytes"] = lib;
  j["batch_dim"] = batch_dim;
  j["global_batch"] = so.global_batch;
  j["fixed_microbatch"] = so.fixed_microbatch > 0 ? nlohmann::json(so.fixed_microbatch) : nlohmann::json();
  j["max_gpus"] = so.max_gpus;
  j["searched_gpus"] = r.searched_gpus;
  j["interconnect_bytes_per_s"] = options.profile.interconnect_bytes_per_s;
  j["rule"] = kRule;
  j["fits"] = r.chosen.has_value();
  j["gpus"] = r.chosen ? nlohmann::json(r.candidates[*r.chosen].layout.gpus) : nlohmann::json();
  nlohmann::json cands = nlohmann::json::array();
  for (const auto& c : r.candidates) cands.push_back(candidate_json(c, lib));
  j["candidates"] = cands;
  if (r.chosen) {
    nlohmann::json ch = candidate_json(r.candidates[*r.chosen], lib);
    const nlohmann::json pj = parallel_json(*r.chosen_plan);
    ch["layout"] = pj["layout"];
    ch["ranks"] = pj["ranks"];
    j["chosen"] = ch;
  } else {
    j["chosen"] = nullptr;
  }
  j["least"] = r.least ? candidate_json(r.candidates[*r.least], lib) : nlohmann::json();
  j["planned_layouts"] = r.planned;
  j["pruned_layouts"] = pruned;
  j["role_plans_reused"] = r.role_plans_reused;
  j["capped"] = r.capped;
  j["not_applicable"] = r.not_applicable;
  j["fusion"] = fusion_json(base.fusion);
  return j;
}

void print_fit_gpus(const TrainingArgs& train, const planner::LayoutSearchOptions& so, const planner::LayoutSearchResult& r,
                    const TrainingSetup& base, std::size_t pruned) {
  const planner::TrainingPlanOptions& options = base.options;
  const std::uint64_t lib = options.library_bytes;
  std::printf("model %s, budget %s per GPU (total device memory, libraries %s included), %lld samples per step, up to %d GPUs\n",
              analysis::terminal_safe(train.model.model).c_str(), human_bytes(*options.budget_bytes).c_str(), human_bytes(lib).c_str(),
              static_cast<long long>(so.global_batch), so.max_gpus);
  std::printf("fused %s\n", fusion_text(base.fusion).c_str());
  if (r.chosen) {
    const auto& c = r.candidates[*r.chosen];
    std::printf("fits on %d GPU(s): %s; peak %s per GPU, step %.3f ms (communication %.3f ms)\n", c.layout.gpus, layout_words(c).c_str(),
                human_bytes(c.peak_bytes).c_str(), 1e3 * c.step_seconds, 1e3 * c.communication_seconds);
  }
  std::printf("rule: %s\n", kRule);
  std::printf("layouts of 1..%d GPUs (M microbatches of `batch` samples per data-parallel rank; * chosen; >= a lower bound, not planned):\n%s",
              r.searched_gpus, table_text(r).c_str());
  std::printf("%zu layouts planned (%zu role plans reused), %zu not planned (model state alone over the budget)%s\n", r.planned,
              r.role_plans_reused, pruned, r.capped ? "; stopped at --max-layouts" : "");
  for (const auto& why : r.not_applicable) std::printf("not applicable: %s\n", analysis::terminal_safe(why).c_str());
  if (r.chosen) std::printf("\nchosen layout, per rank role:\n%s", parallel_text(*r.chosen_plan).c_str());
}

[[noreturn]] void fail_no_layout(const planner::LayoutSearchOptions& so, const planner::LayoutSearchResult& r, const planner::TrainingPlanOptions& options) {
  const std::uint64_t lib = options.library_bytes;
  std::string msg = "no layout of 1.." + std::to_string(r.searched_gpus) + " GPUs fits the budget of " + human_bytes(*options.budget_bytes) +
                    " per GPU for " + std::to_string(so.global_batch) + " samples per step";
  if (r.least) {
    const auto& l = r.candidates[*r.least];
    msg += ": the least per-GPU peak found is " + std::string(l.peak_is_lower_bound ? "at least " : "") + human_bytes(l.peak_bytes) + " (" +
           human_bytes(l.peak_bytes + lib) + " with the libraries) for " + std::to_string(l.layout.gpus) + " GPU(s), " + layout_words(l);
  }
  if (r.capped) msg += " (stopped after " + std::to_string(r.planned) + " planned layouts: --max-layouts)";
  fail(ErrorKind::infeasible, msg + "; allow more --max-gpus or a larger --budget");
}

int run_fit_gpus(const TrainingArgs& train, const std::string& batch_dim, const FitGpusArgs& g, bool json) {
  if (train.budget.empty()) fail(ErrorKind::usage, "fit --max-gpus needs --budget (per GPU)");
  if (train.microbatches != 1) fail(ErrorKind::usage, "fit --max-gpus chooses the microbatches of each layout: leave out --microbatches");
  const analysis::Graph forward = analysis::import_model(train.model.model);
  warn_converted_opset(forward, train.model.model);
  analysis::DimBindings dims = parse_dims(train.model.dims);
  const std::vector<std::string> symbolic = symbolic_dims(forward);
  const bool split = std::find(symbolic.begin(), symbolic.end(), batch_dim) != symbolic.end();
  for (const auto& [name, value] : dims)
    if (name != batch_dim || !split) require_symbolic_dim(forward, name, "--dim " + name + "=" + std::to_string(value));
  warn_if_eval_export(forward, train.model.model);
  planner::LayoutSearchOptions so;
  so.max_gpus = g.max_gpus;
  so.max_planned = g.max_layouts;
  const std::int64_t first_batch = resolve_batch(forward, dims, batch_dim, split, g, so);
  // Shaped and fused forward graphs per microbatch, shared by the layouts.
  std::map<std::int64_t, analysis::Graph> fused;
  std::optional<TrainingSetup> base;
  auto forward_at = [&](std::int64_t b) -> const analysis::Graph& {
    auto it = fused.find(b);
    if (it != fused.end()) return it->second;
    analysis::ShapeOptions sh;
    sh.dims = dims;
    if (split) sh.dims[batch_dim] = b;
    TrainingSetup s = training_setup(analysis::infer_shapes(forward, sh), train);
    if (!base) base = s;
    return fused.emplace(b, std::move(s.fused_forward)).first->second;
  };
  forward_at(first_batch);
  const planner::TrainingPlanOptions& options = base->options;  // --device-profile: the strategies and the layouts alike
  const planner::LayoutSearchResult r = planner::search_layouts(forward_at, base->training_options, options, so);

  std::size_t pruned = 0;
  for (const auto& c : r.candidates) pruned += c.planned ? 0 : 1;
  if (json) std::cout << json_text(fit_gpus_json(train, batch_dim, so, r, *base, pruned), 2) << "\n";
  else print_fit_gpus(train, so, r, *base, pruned);
  std::fflush(stdout);
  if (!r.chosen) fail_no_layout(so, r, options);
  return 0;
}

}  // namespace memplan::cli
