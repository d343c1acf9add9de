// Per-rank timelines: rank-plan files read back, or rank roles planned, as one panel each.
#include "cli/viz_ranks.hpp"

#include "analysis/import.hpp"
#include "analysis/json_read.hpp"
#include "planner/plan_json.hpp"
#include "planner/verify.hpp"
#include "viz/svg.hpp"

namespace memplan::cli {
namespace {

// What a rank role's panel states beside its plan.
struct RoleFacts {
  std::vector<int> ranks;
  std::string role;
  std::uint64_t peak = 0, model_state = 0, activations = 0, persistent = 0, inputs = 0;
  int in_flight = 1;
  std::string strategy;
};

PlannedModel rank_panel(analysis::Graph graph, planner::Plan plan, const RoleFacts& f, std::uint64_t budget, std::uint64_t library) {
  PlannedModel m;
  m.graph = std::move(graph);
  m.plan = std::move(plan);
  m.title = (f.ranks.size() == 1 ? "rank " : "ranks ") + ranks_text(f.ranks) + " \u00b7 " + f.role;
  m.peak_bytes = f.peak;
  m.lower_bound_bytes = m.plan.aliased_lower_bound_bytes;
  m.note = "peak " + human_bytes(f.peak) + " \u00b7 model state " + human_bytes(f.model_state) + " \u00b7 activations " +
           human_bytes(f.activations) + " (" + std::to_string(f.in_flight) + " microbatch(es) in flight) \u00b7 arena " +
           human_bytes(m.plan.arena_bytes) + (f.strategy.empty() ? "" : " \u00b7 strategy " + f.strategy);
  if (budget) {
    // The arena's share: the budget less the libraries, what persists, the inputs and the other microbatches in flight.
    const std::uint64_t held = library + f.persistent + f.inputs + (f.peak > f.persistent + f.inputs + m.plan.arena_bytes
                                                                         ? f.peak - f.persistent - f.inputs - m.plan.arena_bytes : 0);
    m.budget = budget;
    m.arena_budget = budget > held ? budget - held : 0;
    m.budget_label = "budget " + viz::bytes_label(budget) + " per GPU: " + viz::bytes_label(m.arena_budget) + " left for the arena";
    m.over_budget = f.peak + library > budget;
  }
  return m;
}

// Optional fields of a rank plan's JSON: their value where present and of the right type, else the fallback.
std::uint64_t u64_or(const nlohmann::json& j, const char* key, std::uint64_t fallback = 0) {
  return j.contains(key) && j[key].is_number_unsigned() ? j[key].get<std::uint64_t>() : fallback;
}
int int_or(const nlohmann::json& j, const char* key, int fallback) {
  return j.contains(key) && j[key].is_number_integer() ? j[key].get<int>() : fallback;
}
std::string string_or(const nlohmann::json& j, const char* key, const std::string& fallback) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : fallback;
}

// What plan `index` of a rank-plans file states of its role (its index where it names no ranks or role).
RoleFacts role_facts(const nlohmann::json& pj, std::size_t index) {
  RoleFacts f;
  if (pj.contains("ranks") && pj["ranks"].is_array())
    for (const auto& r : pj["ranks"])
      if (r.is_number_integer()) f.ranks.push_back(r.get<int>());
  if (f.ranks.empty()) f.ranks.push_back(static_cast<int>(index));
  f.role = string_or(pj, "role", "rank role " + std::to_string(index));
  f.peak = u64_or(pj, "peak_bytes");
  f.model_state = u64_or(pj, "model_state_bytes");
  f.activations = u64_or(pj, "activation_bytes");
  f.persistent = u64_or(pj, "persistent_bytes");
  f.inputs = u64_or(pj, "input_bytes");
  f.in_flight = int_or(pj, "in_flight_microbatches", 1);
  f.strategy = string_or(pj, "strategy", "");
  return f;
}

}  // namespace

std::optional<std::vector<PlannedModel>> load_rank_plans(const std::string& path) {
  const nlohmann::json doc = analysis::read_json_file(path, "plan");
  if (!doc.is_object() || !doc.contains("schema") || doc["schema"] != "memplan-rank-plans") return std::nullopt;
  if (!doc.contains("version") || doc["version"] != 1)
    fail(ErrorKind::plan_mismatch, "rank plans '" + path + "' have a version other than 1");
  if (!doc.contains("plans") || !doc["plans"].is_array() || doc["plans"].empty())
    fail(ErrorKind::plan_mismatch, "rank plans '" + path + "' hold no plans");
  const std::uint64_t budget = u64_or(doc, "budget_bytes"), library = u64_or(doc, "library_bytes");
  std::vector<PlannedModel> out;
  for (const nlohmann::json& pj : doc["plans"]) {
    if (!pj.is_object() || !pj.contains("graph"))
      fail(ErrorKind::plan_mismatch, "rank plans '" + path + "': plan " + std::to_string(out.size()) + " has no embedded graph");
    analysis::Graph g = analysis::import_json(pj["graph"], path);
    planner::Plan plan = planner::plan_from_json(g, pj);
    planner::require_valid(g, plan);
    const RoleFacts f = role_facts(pj, out.size());
    out.push_back(rank_panel(std::move(g), std::move(plan), f, budget, library));
  }
  return out;
}

std::vector<PlannedModel> plan_rank_models(const TrainingArgs& train, const ParallelArgs& par) {
  RankPlans planned = plan_rank_roles(train, par);
  const auto& opts = planned.setup.options;
  std::vector<PlannedModel> out;
  for (auto& rp : planned.result.roles) {
    auto& t = rp.result;
    const RoleFacts f{rp.ranks, rp.role, rp.peak_bytes, rp.model_state_bytes, rp.activation_bytes, t.persistent_bytes, t.input_bytes, rp.in_flight, t.strategy};
    PlannedModel m = rank_panel(std::move(t.graph), std::move(t.plan), f, opts.budget_bytes.value_or(0), opts.library_bytes);
    m.estimated_step_seconds = t.estimated_step_seconds;
    m.keep_all_step_seconds = t.keep_all_step_seconds;
    if (out.empty()) m.fusion = planned.setup.fusion;  // one model, fused once: stated once
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace memplan::cli
