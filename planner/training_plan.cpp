// Planning a training step under a budget: each strategy's choice, calibrated on the real transformed graph.
#include "planner/training_plan.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <utility>

#include "analysis/liveness.hpp"
#include "analysis/ops.hpp"
#include "planner/exact/remat_exact.hpp"
#include "planner/exact/remat_exact_segments.hpp"
#include "planner/remat_segments.hpp"
#include "planner/step_time.hpp"
#include "planner/swap.hpp"

namespace memplan::planner {

using analysis::Phase;
using analysis::TensorRole;

const std::vector<std::string>& training_strategies() {
  static const std::vector<std::string> s{"none", "sqrt", "budget", "optimal", "swap", "auto"};
  return s;
}

namespace {

constexpr std::size_t kMaxModelStages = 128;

std::string gib(std::uint64_t b) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3f GiB", static_cast<double>(b) / 1073741824.0);
  return buf;
}

struct Context {
  const Graph& g;
  std::vector<OpId> schedule;
  std::vector<double> flops, seconds;  // per op
  const TrainingPlanOptions& opts;
  ForwardStages stages, coarse, coarse_cheap;  // coarse_cheap: coarse with cheap recomputation costs
  // With each stage whose boundary no backward reads merged into the next (merge_loose_stages), and the
  // cheap tensors counted live in a kept stage's backward; empty unless that merges an eighth of the stages.
  ForwardStages merged, merged_cheap;
  SwapLinks links;
  std::uint64_t none_arena = 0;
  double none_seconds = 0.0;
  ExactRematReport* exact = nullptr;  // strategy exact's report (the result's)
  bool staged = false;                // find_stages ran
};

struct Evaluated {
  RematChoice choice;
  RematTransform tr;
  analysis::Liveness live;
  Plan plan;  // the packed arena of the transformed graph
  double recompute = 0.0, seconds = 0.0, stall = 0.0;
  std::uint64_t lb() const { return live.lower_bound_bytes; }
  std::uint64_t arena() const { return plan.arena_bytes; }
};
using Maybe = std::optional<Evaluated>;

// The step time of `e`'s plan (its offsets decide which swap-in waits for which bytes to come free): e.seconds, e.stall.
void time_step(const Context& c, Evaluated& e) {
  // Clones cost what their originals cost; swap copies take the host link's time, and the step counts
  // whatever compute waits for them (estimate_step), not the placement's hope that they hide.
  std::vector<double> seconds(e.tr.graph.ops.size(), 0.0);
  for (OpId o = 0; o < e.tr.graph.ops.size(); ++o) {
    const analysis::Op& op = e.tr.graph.ops[o];
    if (op.phase != Phase::swap) {
      seconds[o] = c.seconds[e.tr.origin[o]];
      continue;
    }
    const TensorId t = op.input(0);
    const std::uint64_t bytes = t == analysis::kNoTensor ? 0 : e.tr.graph.tensors[t].bytes();
    seconds[o] = op.type == analysis::memplan_ops::kSwapOut ? analysis::device_to_host_seconds(bytes, c.opts.profile)
                                                            : analysis::host_to_device_seconds(bytes, c.opts.profile);
  }
  const StepEstimate step = estimate_step(e.tr.graph, e.plan, seconds);
  e.seconds = step.step_seconds;
  e.stall = step.stall_seconds;
}

Evaluated evaluate(const Context& c, RematChoice choice) {
  Evaluated e;
  e.tr = apply_remat(c.g, c.schedule, choice);
  e.live = analysis::analyze_liveness(e.tr.graph, e.tr.schedule, c.opts.assign.alignment);
  AssignOptions greedy = c.opts.assign;  // the exact packer runs once, on the plan chosen (plan_training)
  greedy.exact_pack_seconds = 0.0;
  e.plan = assign(e.tr.graph, e.live, greedy);
  e.recompute = recompute_flops(e.tr, c.flops);
  time_step(c, e);
  e.choice = std::move(choice);
  return e;
}

// The segment model counts saved bytes only; its budget starts below the real one by the gap the model
// leaves with everything kept and shrinks by each overshoot until the real lower bound fits. Then it
// bisects back up towards the last model budget that did not fit, keeping the least recompute that fits.
// `cheap`: cheap recomputation (add_cheap_recompute) on top of every segment plan.
// `on`: the stages (without cheap costs) whose segments `choose` returns.
// A model's choice at a model budget (nullopt: no plan within it).
using ChooseAt = std::function<std::optional<RematChoice>(std::uint64_t)>;
// `model_budget`: where given, the model budget of the plan returned and the least model budget found too much.
struct ModelBudget {
  std::uint64_t at = 0, too_much = 0;
};
Maybe fit_choices(const Context& c, std::uint64_t target, const ForwardStages& base, const ChooseAt& choose, ModelBudget* model_budget = nullptr);

Maybe fit_segments(const Context& c, std::uint64_t target, const std::function<SegmentPlan(std::uint64_t)>& choose,
                   bool cheap = false, const ForwardStages* on = nullptr) {
  const ForwardStages& base = on ? *on : c.coarse;
  auto choice_of = [&](const SegmentPlan& plan) {
    RematChoice ch = plan.empty() ? RematChoice::keep_all(c.g) : choice_from_segments(c.g, base, plan);
    return cheap ? add_cheap_recompute(c.g, c.schedule, std::move(ch), c.flops) : ch;
  };
  if (base.size() == 0) return evaluate(c, choice_of({}));
  return fit_choices(c, target, base, [&](std::uint64_t mb) -> std::optional<RematChoice> {
    const SegmentPlan plan = choose(mb);
    if (plan.empty()) return std::nullopt;
    return choice_of(plan);
  });
}

Maybe fit_choices(const Context& c, std::uint64_t target, const ForwardStages& base, const ChooseAt& choose, ModelBudget* model_budget) {
  const auto model_none =
      evaluate_segments(base, {{0, static_cast<std::uint32_t>(base.size() - 1), false}}).peak_bytes;  // all kept, no cheap
  const std::uint64_t gap = c.none_arena > model_none ? c.none_arena - model_none : 0;
  std::uint64_t mb = target > gap ? target - gap : 0, too_much = model_none + 1;
  Maybe found;
  // A model budget below the least model peak has no plan: then bisect between it and the last one too much.
  std::uint64_t no_plan = 0;
  auto close = [&] { return too_much <= no_plan + std::max<std::uint64_t>(1, too_much / 256); };
  for (int iter = 0; iter < 24 && !found; ++iter) {
    std::optional<RematChoice> plan = choose(mb);
    if (!plan) {
      no_plan = mb;
      if (close()) return std::nullopt;
      mb = no_plan + (too_much - no_plan) / 2;
      continue;
    }
    Evaluated e = evaluate(c, std::move(*plan));
    if (e.arena() <= target) {
      found = std::move(e);
      break;
    }
    too_much = mb;
    const std::uint64_t step = std::max(e.arena() - target, mb / 64 + 1);
    if (mb == 0 || close()) return std::nullopt;
    mb = mb > step ? mb - step : 0;
    if (no_plan > 0 && mb <= no_plan) mb = no_plan + (too_much - no_plan) / 2;
  }
  if (!found) return std::nullopt;
  for (int iter = 0; iter < 5 && mb + std::max<std::uint64_t>(1, too_much / 256) < too_much; ++iter) {
    const std::uint64_t mid = mb + (too_much - mb) / 2;
    std::optional<RematChoice> plan = choose(mid);
    if (!plan) break;
    Evaluated e = evaluate(c, std::move(*plan));
    if (e.arena() > target) {
      too_much = mid;
      continue;
    }
    mb = mid;
    if (e.recompute < found->recompute) found = std::move(e);
  }
  if (model_budget) *model_budget = {mb, too_much};
  return found;
}

std::vector<std::uint64_t> greedy_thresholds(const ForwardStages& s) {
  std::uint64_t lo = 1, total = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    lo = std::max(lo, s.saved_bytes[i] + s.boundary_bytes[i]);
    total += s.saved_bytes[i] + s.boundary_bytes[i];
  }
  std::vector<std::uint64_t> out;
  for (int k = 0; k <= 40; ++k)
    out.push_back(static_cast<std::uint64_t>(static_cast<double>(lo) * std::pow(static_cast<double>(total + 1) / static_cast<double>(lo), k / 40.0)));
  return out;
}

// Chen's greedy at the threshold whose model peak fits `mb` with the least model recompute.
SegmentPlan best_greedy(const Context& c, std::uint64_t mb) {
  SegmentPlan best;
  double best_flops = 0.0;
  for (std::uint64_t th : greedy_thresholds(c.coarse)) {
    SegmentPlan p = greedy_segments(c.coarse, th);
    const SegmentCost sc = evaluate_segments(c.coarse, p);
    if (sc.peak_bytes <= mb && (best.empty() || sc.recompute_flops < best_flops)) {
      best = std::move(p);
      best_flops = sc.recompute_flops;
    }
  }
  return best;
}

// The least-recompute segments alone, and with cheap recomputation on top: the less recompute wins, or
// with `by_time` the faster estimated step (cheap rebuilds are few FLOPs but memory-bound).
Maybe strategy_optimal(const Context& c, std::uint64_t target, bool by_time = false) {
  Maybe plain = fit_segments(c, target, [&](std::uint64_t mb) { return optimal_segments(c.coarse, mb); });
  Maybe cheap = fit_segments(c, target, [&](std::uint64_t mb) { return optimal_segments(c.coarse_cheap, mb); }, true);
  if (c.merged.size() > 0) {
    Maybe m = fit_segments(c, target, [&](std::uint64_t mb) { return optimal_segments(c.merged_cheap, mb); }, true, &c.merged);
    if (m && (!cheap || (by_time ? m->seconds < cheap->seconds : m->recompute < cheap->recompute))) cheap = std::move(m);
  }
  if (!plain || (cheap && (by_time ? cheap->seconds < plain->seconds : cheap->recompute < plain->recompute))) return cheap;
  return plain;
}

// A swap-segment plan on stages `s` as per-tensor actions: segments as choice_from_segments, and every saved tensor
// of a swapped stage but its boundary swapped where the swap planner can hide its copies (kept otherwise).
RematChoice choice_from_swap_plan(const Context& c, const ForwardStages& s, const SwapSegmentPlan& p) {
  RematChoice ch = choice_from_segments(c.g, s, p.segments);
  if (std::none_of(p.swapped.begin(), p.swapped.end(), [](bool b) { return b; })) return ch;
  std::vector<std::vector<TensorId>> saved(s.size());
  for (TensorId t : find_saved_for_backward(c.g)) {
    const std::uint32_t st = s.stage_of_op[c.g.tensors[t].producer];
    if (st < s.size() && p.swapped[st] && t != s.boundary[st] && ch.action[t] == RematAction::keep) saved[st].push_back(t);
  }
  SwapPlanner planner(c.g, c.schedule, c.seconds, c.links);
  for (const auto& ts : saved)
    for (TensorId t : ts) planner.try_swap(t, ch, UINT32_MAX);
  return ch;
}

// Strategy exact's MILP options on `stages` stages.
ExactRematOptions exact_options(const Context& c, std::size_t stages) {
  ExactRematOptions o;
  o.seconds = c.opts.exact_seconds;
  o.max_nodes = c.opts.exact_nodes;
  o.max_stages = std::max(o.max_stages, stages);
  o.relative_gap = c.opts.exact_gap;
  return o;
}

// One model's MILP solves for strategy exact: each at a model budget, started from the segment DP's plan there, its
// figures in `last`, the totals in `rep`.
struct ExactSolver {
  const Context& c;
  const ForwardStages& s;
  const SwapStageModel& model;
  const ExactRematOptions& o;
  ExactRematReport& rep;
  ExactRematReport last = {};  // the latest solve's figures

  // The plan as per-tensor actions, nullopt where the MILP found none.
  std::optional<RematChoice> operator()(std::uint64_t at) {
    const SegmentPlan dp = optimal_segments(s, at);
    const SwapSegmentPlan start = swap_plan_of_segments(model, dp);
    const SwapExactResult r = exact_swap_remat(model, at, o, dp.empty() ? nullptr : &start);
    ++rep.solves;
    rep.seconds += r.seconds;
    rep.nodes += r.nodes;
    last.status = exact_status_name(r.status);
    last.model_budget = at;
    last.variables = r.variables;
    last.dp_cost = dp.empty() ? std::numeric_limits<double>::infinity() : swap_plan_cost(model, start, at).cost;
    last.milp_cost = r.cost;
    last.lower_bound = r.lower_bound;
    last.gap =
        last.dp_cost > 0.0 && std::isfinite(last.dp_cost) ? std::max(0.0, (last.dp_cost - r.lower_bound) / last.dp_cost) : 0.0;
    last.milp_gap = r.cost > 0.0 && std::isfinite(r.cost) ? std::max(0.0, (r.cost - r.lower_bound) / r.cost) : 0.0;
    last.swaps = static_cast<std::size_t>(std::count(r.plan.swapped.begin(), r.plan.swapped.end(), true));
    if (r.status != ExactStatus::optimal && r.status != ExactStatus::feasible) return std::nullopt;
    return choice_from_swap_plan(c, s, r.plan);
  }
};

// Below the DP's reach (swaps can go lower): the calibration runs on the MILP itself, at most 8 solves. `kept`: the
// figures of the solve behind the plan, else of the last one.
Maybe fit_milp_alone(const Context& c, std::uint64_t target, ExactSolver& solve, ExactRematReport& kept) {
  int solves = 0;
  bool planned = false;
  return fit_choices(c, target, solve.s, [&](std::uint64_t at) -> std::optional<RematChoice> {
    if (++solves > 8) return std::nullopt;
    std::optional<RematChoice> ch = solve(at);
    if (ch || !planned) kept = solve.last;
    planned = planned || ch;
    return ch;
  });
}

// From the model budget the DP was calibrated at: the MILP solved there, lowered by any overshoot (at most 2 solves),
// then once halfway towards the budget found too much. `kept`: the figures of the solve behind the plan.
Maybe fit_milp_from(const Context& c, std::uint64_t target, ModelBudget mb, ExactSolver& solve, ExactRematReport& kept) {
  auto attempt = [&](std::uint64_t at) -> Maybe {
    std::optional<RematChoice> ch = solve(at);
    if (!ch) return std::nullopt;
    return evaluate(c, std::move(*ch));
  };
  Maybe here;
  std::uint64_t at = mb.at, too_much = mb.too_much;
  for (int k = 0; k < 2 && !here; ++k) {
    Maybe e = attempt(at);
    kept = solve.last;
    if (!e) break;
    if (e->arena() <= target) {
      here = std::move(e);
      break;
    }
    too_much = at;
    const std::uint64_t step = std::max(e->arena() - target, at / 64 + 1);
    if (at <= step) break;
    at -= step;
  }
  if (here && at + std::max<std::uint64_t>(1, too_much / 256) < too_much) {
    const std::uint64_t mid = at + (too_much - at) / 2;
    Maybe e = attempt(mid);
    if (e && e->arena() <= target && e->seconds < here->seconds) here = std::move(e), kept = solve.last;
  }
  return here;
}

// The figures of the solve behind strategy exact's plan.
void take_solve_figures(ExactRematReport& rep, const ExactRematReport& f) {
  rep.status = f.status, rep.model_budget = f.model_budget, rep.dp_cost = f.dp_cost;
  rep.variables = f.variables, rep.milp_cost = f.milp_cost, rep.lower_bound = f.lower_bound;
  rep.gap = f.gap, rep.milp_gap = f.milp_gap, rep.swaps = f.swaps;
}

// Exact remat with swap (remat_exact_segments.hpp): the MILP over the plain stages coarsened to at most
// opts.exact_stages, keep / swap / recompute segment per stage, the least estimated seconds, started from the segment
// DP's plan on the same stages (never worse than it in the model). The model budget comes from calibrating that DP on
// the packed arena (fit_milp_from); where the DP reaches no plan under the target, from the MILP itself
// (fit_milp_alone). Where the plan swaps, the same runs without swaps (the swap planner's placement and the step
// estimate's copy waits can make a swap the model counts as hidden stall) and the faster plan is kept. `optimal`'s own
// plan (cheap recomputation, partial stages) is planned too; the MILP's plan is used where its estimated step is faster.
Maybe strategy_exact(const Context& c, std::uint64_t target) {
  if (!exact_remat_available()) fail(ErrorKind::unsupported, "strategy exact: this build has no MILP solver (CBC, CMake MEMPLAN_CBC)");
  Maybe dp_best = strategy_optimal(c, target);
  ExactRematReport& rep = *c.exact;
  rep = {};
  rep.ran = true;
  rep.optimal_recompute_flops = dp_best ? dp_best->recompute : std::numeric_limits<double>::infinity();
  rep.optimal_step_seconds = dp_best ? dp_best->seconds : std::numeric_limits<double>::infinity();
  const ForwardStages s = coarsen_stages(c.stages, std::max<std::size_t>(1, c.opts.exact_stages));
  rep.stages = s.size();
  if (s.size() == 0) return dp_best;
  const SwapStageModel with_swaps = swap_stage_model(c.g, c.schedule, s, c.seconds, c.links);
  for (std::size_t i = 0; i < with_swaps.size(); ++i) rep.swappable += with_swaps.can_swap(i) ? 1 : 0;
  SwapStageModel recompute_only = with_swaps;
  std::fill(recompute_only.moved.begin(), recompute_only.moved.end(), 0);
  const ExactRematOptions o = exact_options(c, s.size());
  ModelBudget mb;
  const Maybe dp_here = fit_choices(
      c, target, s,
      [&](std::uint64_t at) -> std::optional<RematChoice> {
        const SegmentPlan plan = optimal_segments(s, at);
        if (plan.empty()) return std::nullopt;
        return choice_from_segments(c.g, s, plan);
      },
      &mb);
  Maybe found;
  ExactRematReport found_rep;
  for (const SwapStageModel* model : {&with_swaps, static_cast<const SwapStageModel*>(&recompute_only)}) {
    if (model == &recompute_only && (rep.swappable == 0 || (found && found_rep.swaps == 0))) break;
    ExactSolver solve{c, s, *model, o, rep, {}};
    ExactRematReport kept;  // the figures of the solve behind this model's plan
    Maybe here = dp_here ? fit_milp_from(c, target, mb, solve, kept) : fit_milp_alone(c, target, solve, kept);
    if (here && (!found || here->seconds < found->seconds)) {
      found = std::move(here);
      found_rep = kept;
    } else if (!found) {
      found_rep = kept;  // report the last solve where nothing fitted
    }
  }
  take_solve_figures(rep, found_rep);
  if (found) rep.exact_step_seconds = found->seconds;
  if (found && (!dp_best || found->seconds < dp_best->seconds * (1 - 1e-9))) {
    rep.used = true;
    return found;
  }
  return dp_best;
}

Maybe strategy_swap(const Context& c, const RematChoice& start, std::uint64_t target) {
  Evaluated e = evaluate(c, swap_to_budget(c.g, c.schedule, start, c.seconds, c.links, target, c.opts.assign.alignment));
  if (e.arena() <= target) return e;
  return std::nullopt;
}

// Keep, recompute or swap per tensor: recompute-optimal plans for looser budgets finished by swaps,
// against each pure strategy; the fastest estimated step wins.
Maybe strategy_auto(const Context& c, std::uint64_t target) {
  Maybe best;
  auto consider = [&](Maybe e) {
    if (e && (!best || e->seconds < best->seconds)) best = std::move(e);
  };
  consider(strategy_optimal(c, target, true));
  consider(strategy_swap(c, RematChoice::keep_all(c.g), target));
  if (c.none_arena > target)
    for (double r : {0.25, 0.5, 0.75}) {
      const auto relaxed = target + static_cast<std::uint64_t>(r * static_cast<double>(c.none_arena - target));
      if (Maybe e = strategy_optimal(c, relaxed, true)) consider(strategy_swap(c, e->choice, target));
    }
  return best;
}

// The strategy's plan whose activation lower bound is at most `target`; none for no such plan.
Maybe run_strategy(const Context& c, const std::string& s, std::uint64_t target) {
  if (s == "none") return evaluate(c, RematChoice::keep_all(c.g));
  if (s == "sqrt") return evaluate(c, choice_from_segments(c.g, c.stages, sqrt_segments(c.stages)));
  if (s == "budget") return fit_segments(c, target, [&](std::uint64_t mb) { return best_greedy(c, mb); });
  if (s == "optimal") return strategy_optimal(c, target);
  if (s == "exact") return strategy_exact(c, target);
  if (s == "swap") return strategy_swap(c, RematChoice::keep_all(c.g), target);
  if (s == "auto") return strategy_auto(c, target);
  fail(ErrorKind::usage, "unknown strategy '" + s + "' (none, sqrt, budget, optimal, swap, auto)");
}

// The least activation lower bound a strategy reaches (for infeasible budgets and unbudgeted plans).
Evaluated least_memory(const Context& c, const std::string& s) {
  if (s == "none" || s == "sqrt") return *run_strategy(c, s, 0);
  if (s == "exact") return least_memory(c, "optimal");  // the least memory: the DP's least-peak plans
  if (s == "budget") {
    Maybe best;
    for (std::uint64_t th : greedy_thresholds(c.coarse)) {
      Evaluated e = evaluate(c, choice_from_segments(c.g, c.coarse, greedy_segments(c.coarse, th)));
      if (!best || e.arena() < best->arena()) best = std::move(e);
    }
    return std::move(*best);
  }
  // The least model peak, with and without the backward bytes, loose boundaries and partial options:
  // those make the model follow the real peak under a budget, but can hide the plan that packs smallest.
  auto bare = [](ForwardStages s) {
    s.backward_bytes.clear();
    s.loose_bytes.clear();
    s.partial.clear();
    return s;
  };
  std::optional<Evaluated> opt;
  for (const ForwardStages& s : {c.coarse, c.coarse_cheap, bare(c.coarse), bare(c.coarse_cheap)}) {
    RematChoice ch = choice_from_segments(c.g, c.coarse, optimal_segments(s, min_segment_peak(s)));
    if (!s.cheap_bytes.empty()) ch = add_cheap_recompute(c.g, c.schedule, std::move(ch), c.flops);
    Evaluated e = evaluate(c, std::move(ch));
    if (!opt || e.arena() < opt->arena()) opt = std::move(e);
  }
  if (s == "optimal") return std::move(*opt);
  Evaluated sw = evaluate(c, swap_to_budget(c.g, c.schedule, RematChoice::keep_all(c.g), c.seconds, c.links, 0, c.opts.assign.alignment));
  if (s == "swap") return sw;
  Evaluated both = evaluate(c, swap_to_budget(c.g, c.schedule, opt->choice, c.seconds, c.links, 0, c.opts.assign.alignment));
  for (Evaluated* e : {&*opt, &sw})
    if (e->arena() < both.arena()) both = std::move(*e);
  return both;
}

// An unmet budget, with the least total device memory each strategy reaches (training_strategies() order).
struct Infeasible {
  std::string why;
  std::uint64_t persistent = 0, inputs = 0, libraries = 0, budget = 0;
  std::vector<std::uint64_t> totals;
};

// Names the strategy whose least total comes closest to the budget, and by how much it is over.
Error infeasible_error(const Infeasible& inf) {
  std::string msg = inf.why + ": weights and optimizer state take " + gib(inf.persistent) + ", graph inputs " + gib(inf.inputs) +
                    " and libraries " + gib(inf.libraries) +
                    "; the least total device memory each strategy reaches (with its planned arena):";
  const auto& names = training_strategies();
  std::size_t closest = 0;
  for (std::size_t i = 0; i < names.size(); ++i) {
    msg += " " + names[i] + " " + gib(inf.totals[i]) + ",";
    if (inf.totals[i] < inf.totals[closest]) closest = i;
  }
  msg.back() = ';';
  const std::uint64_t total = inf.totals[closest], over = total > inf.budget ? total - inf.budget : 0;
  char pct[32];
  std::snprintf(pct, sizeof pct, "%.1f%%", inf.budget ? 100.0 * static_cast<double>(over) / static_cast<double>(inf.budget) : 100.0);
  return Error(ErrorKind::infeasible, msg + " closest: " + names[closest] + " at " + gib(total) + ", " + gib(over) + " (" + pct +
                                          ") over the budget");
}

// The forward's stages, for the strategies that recompute or swap and for an unmet budget's report (once); keep-all
// needs none of them (nor a search: its plan is `none`).
void find_stages(Context& c) {
  if (std::exchange(c.staged, true)) return;
  const Graph& g = c.g;
  c.stages = find_forward_stages(g, c.schedule, c.flops, c.opts.assign.alignment, c.opts.assign.workspace_limit_bytes,
                                 c.opts.assign.workspace_query);
  c.coarse = with_partial_options(g, coarsen_stages(c.stages, kMaxModelStages), c.flops, c.opts.assign.alignment);
  c.coarse_cheap = coarsen_stages(with_cheap_costs(g, c.schedule, c.stages, c.flops, c.opts.assign.alignment), kMaxModelStages);
  c.coarse_cheap.partial = c.coarse.partial;  // coarsening cuts by total bytes, which cheap costs leave alone
  // Only where many stages end at a loose boundary (residual blocks ending in a ReLU after the Add): elsewhere
  // the third run would repeat the cheap one at the cost of a whole calibration.
  if (const ForwardStages merged = merge_loose_stages(c.stages); merged.size() + c.stages.size() / 8 < c.stages.size()) {
    c.merged = with_partial_options(g, coarsen_stages(merged, kMaxModelStages), c.flops, c.opts.assign.alignment);
    c.merged_cheap = coarsen_stages(with_cheap_costs(g, c.schedule, merged, c.flops, c.opts.assign.alignment), kMaxModelStages);
    c.merged_cheap.partial = c.merged.partial;
    c.merged_cheap.cheap_live_in_backward = true;
  }
}

// FLOPs and estimated seconds per op (for the strategies) and the step's totals.
void count_costs(Context& c, TrainingPlanResult& r) {
  const Graph& g = c.g;
  c.flops.resize(g.ops.size());
  c.seconds.resize(g.ops.size());
  for (OpId o = 0; o < g.ops.size(); ++o) {
    const analysis::OpCost oc = analysis::op_cost(g, o);
    c.flops[o] = oc.flops;
    c.seconds[o] = analysis::op_seconds(g, o, oc, c.opts.profile);
    r.training_flops += oc.flops;
    if (g.ops[o].phase == Phase::forward) r.forward_flops += oc.flops;
  }
}

// The bytes held for the whole step: graph inputs, and the persistent tensors (weights, optimizer state, gradients
// without a producer), a tensor updated in place counted as its source.
void count_held_bytes(const Graph& g, TrainingPlanResult& r) {
  for (TensorId id = 0; id < g.tensors.size(); ++id) {
    const auto& t = g.tensors[id];
    if (t.role == TensorRole::input) r.input_bytes = checked_add(r.input_bytes, t.bytes(), "input bytes");
    else if (analysis::rewritten_source(g, id) != analysis::kNoTensor) continue;  // updated in place: its source's bytes
    else if (t.role != TensorRole::activation && !(t.role == TensorRole::gradient && t.producer != analysis::kNoOp))
      r.persistent_bytes = checked_add(r.persistent_bytes, t.bytes(), "persistent bytes");
    if (t.role == TensorRole::weight) r.weight_bytes = checked_add(r.weight_bytes, t.bytes(), "weight bytes");
    if (t.role == TensorRole::optimizer_state) r.optimizer_state_bytes = checked_add(r.optimizer_state_bytes, t.bytes(), "optimizer state bytes");
  }
}

// The chosen plan's figures into `r`: what it recomputes and swaps (largest first), its costs, its graph and plan.
void take_chosen(const Context& c, Evaluated& chosen, TrainingPlanResult& r) {
  const Graph& g = c.g;
  r.lower_bound_bytes = chosen.lb();
  r.swap_bytes = chosen.tr.swap_bytes;
  r.recompute_ops = chosen.tr.recompute_ops;
  for (TensorId t : find_saved_for_backward(g)) {
    const RematAction act = chosen.choice.action[t];
    if (act != RematAction::recompute && act != RematAction::swap) continue;
    const analysis::Tensor& x = g.tensors[t];
    const bool made = x.producer != analysis::kNoOp;
    (act == RematAction::recompute ? r.recomputed : r.swapped)
        .push_back({x.name, made ? g.ops[x.producer].name : "", made ? g.ops[x.producer].type : "", x.bytes()});
  }
  for (auto* list : {&r.recomputed, &r.swapped})
    std::sort(list->begin(), list->end(), [](const PlannedTensor& a, const PlannedTensor& b) {
      return a.bytes != b.bytes ? a.bytes > b.bytes : a.tensor < b.tensor;
    });
  r.recomputed_tensors = r.recomputed.size();
  r.swapped_tensors = r.swapped.size();
  r.recompute_flops = chosen.recompute;
  r.recompute_overhead = r.training_flops > 0 ? r.recompute_flops / r.training_flops : 0.0;
  r.estimated_step_seconds = chosen.seconds;
  r.swap_stall_seconds = chosen.stall;
  r.keep_all_step_seconds = c.none_seconds;
  r.graph = std::move(chosen.tr.graph);
  r.plan = std::move(chosen.plan);
}

// Where the budget cannot be met: throws Infeasible, with what each strategy reaches at least where `name_totals`
// (infeasible_error names the closest).
[[noreturn]] void throw_infeasible(Context& c, const TrainingPlanResult& r, std::uint64_t fixed, bool name_totals,
                                   const std::string& why) {
  find_stages(c);
  Infeasible inf{why, r.persistent_bytes, r.input_bytes, r.library_bytes, *c.opts.budget_bytes, {}};
  if (name_totals)
    for (const auto& s : training_strategies())
      inf.totals.push_back(checked_add(fixed, least_memory(c, s).arena(), "total device bytes"));
  throw inf;
}

// The strategy's least-memory plan where the search missed `arena_budget` (the searches steer by models and lower
// bounds), packed exactly where allowed (the searches see greedy arenas); nullopt where it does not fit either.
Maybe least_memory_within(const Context& c, Maybe chosen, std::uint64_t arena_budget) {
  if (c.opts.strategy != "none") chosen = least_memory(c, c.opts.strategy);
  if (chosen->arena() <= arena_budget) return chosen;
  if (c.opts.assign.exact_pack_seconds > 0.0 && !chosen->plan.arena_optimal) {
    chosen->plan = assign(chosen->tr.graph, chosen->live, c.opts.assign);
    time_step(c, *chosen);
    if (chosen->arena() <= arena_budget) return chosen;
  }
  return std::nullopt;
}

// The strategy's plan within `arena_budget`, nullopt where none fits. swap_to_budget bounds the lower bound, not the
// packed arena: the target is tightened by any overshoot (at most 6 runs).
Maybe plan_within(const Context& c, Evaluated& none, std::uint64_t arena_budget) {
  const bool keep_all = c.opts.strategy == "none";
  std::uint64_t target = arena_budget;
  for (int attempt = 0;; ++attempt) {
    Maybe chosen = keep_all ? std::move(none) : run_strategy(c, c.opts.strategy, target);
    if (chosen && chosen->arena() <= arena_budget) return chosen;
    if (keep_all || !chosen || attempt == 5 || chosen->arena() - arena_budget >= target)
      return least_memory_within(c, std::move(chosen), arena_budget);
    target -= chosen->arena() - arena_budget;
  }
}

// The chosen plan packed exactly where allowed, verified, and its totals checked against the budget.
void finish_plan(const Context& c, Evaluated& chosen, std::uint64_t held, TrainingPlanResult& r) {
  const TrainingPlanOptions& options = c.opts;
  if (options.assign.exact_pack_seconds > 0.0 && !chosen.plan.arena_optimal) {
    chosen.plan = assign(chosen.tr.graph, chosen.live, options.assign);  // never larger: the greedy packing is its start
    time_step(c, chosen);                                                // new offsets: swap-ins may wait on other bytes
  }
  Plan& plan = chosen.plan;
  r.report = verify_plan(chosen.tr.graph, plan);
  if (!r.report.valid) fail(ErrorKind::verification, "the training plan (" + options.strategy + ") failed the verifier");
  r.activation_arena_bytes = plan.arena_bytes;
  r.peak_bytes = checked_add(held, plan.arena_bytes, "peak bytes");
  r.total_device_bytes = checked_add(r.peak_bytes, r.library_bytes, "total device bytes");
  if (options.budget_bytes && r.total_device_bytes > *options.budget_bytes)
    fail(ErrorKind::verification,
         "total device memory " + gib(r.total_device_bytes) + " exceeds the budget " + gib(*options.budget_bytes));
}

TrainingPlanResult plan_on(const analysis::TrainingGraph& tg, const TrainingPlanOptions& options, const ScheduleResult& schedule,
                           bool name_totals = true) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto& names = training_strategies();
  if (std::find(names.begin(), names.end(), options.strategy) == names.end() && options.strategy != "exact")
    fail(ErrorKind::usage, "unknown strategy '" + options.strategy + "' (none, sqrt, budget, optimal, swap, auto)");
  const Graph& g = tg.graph;
  TrainingPlanResult r;
  r.schedule = schedule;
  Context c{g, r.schedule.order, {}, {}, options, {}, {}, {}, {}, {}, {}, 0, 0.0, &r.exact};
  r.strategy = options.strategy;
  count_costs(c, r);
  count_held_bytes(g, r);
  r.library_bytes = options.library_bytes;
  const std::uint64_t held = checked_add(r.persistent_bytes, r.input_bytes, "persistent bytes");
  const std::uint64_t fixed = checked_add(held, r.library_bytes, "persistent bytes and libraries");
  c.links = {options.profile.host_to_device_bytes_per_s, options.profile.device_to_host_bytes_per_s};
  const bool keep_all = options.strategy == "none";
  if (!keep_all) find_stages(c);
  Evaluated none = evaluate(c, RematChoice::keep_all(g));
  c.none_arena = none.arena();
  c.none_seconds = none.seconds;
  Maybe chosen;
  if (!options.budget_bytes) {
    chosen = keep_all ? std::move(none) : least_memory(c, options.strategy);
  } else {
    const std::string budget = "budget " + gib(*options.budget_bytes);
    if (*options.budget_bytes < fixed)
      throw_infeasible(c, r, fixed, name_totals, budget + " is below the persistent memory, inputs and libraries");
    chosen = plan_within(c, none, *options.budget_bytes - fixed);
    if (!chosen) throw_infeasible(c, r, fixed, name_totals, budget + " cannot be met by strategy " + options.strategy);
  }
  finish_plan(c, *chosen, held, r);
  take_chosen(c, *chosen, r);
  r.plan_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// Which of two plans of one strategy to keep: under a budget (both meet it) the faster estimated step, then the lower
// peak; without one the lower peak (the strategy's least memory), then the faster step. `a` on ties.
bool better_or_equal(const TrainingPlanResult& a, const TrainingPlanResult& b, bool budgeted) {
  // One step summed along two orders differs in the last bits: that is a tie.
  const double tol = 1e-9 * std::max(a.estimated_step_seconds, b.estimated_step_seconds);
  const double ta = a.estimated_step_seconds, tb = b.estimated_step_seconds;
  const bool faster = ta < tb - tol, slower = tb < ta - tol;
  if (budgeted && (faster || slower)) return faster;
  if (a.total_device_bytes != b.total_device_bytes) return a.total_device_bytes < b.total_device_bytes;
  return !slower;
}

}  // namespace

// With the memory schedule, every strategy plans on both the memory order and the file order and keeps the better
// plan (better_or_equal, the file order on ties): the remat and swap searches read the forward's stages along the
// order, and a memory order can leave fewer single-tensor cuts, so the memory order's plan is not always the better.
// An unmet budget names what each strategy reaches at least on either order.
TrainingPlanResult plan_training(const analysis::TrainingGraph& tg, const TrainingPlanOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  const ScheduleResult memory = choose_schedule(tg.graph, options.assign, options.schedule);
  ScheduleResult file = memory;
  if (options.schedule.kind == ScheduleKind::memory) {
    file.order = analysis::topological_order(tg.graph);
    file.peak_bytes = file.file_peak_bytes;
    file.method = "file";
    file.proven_optimal = memory.proven_optimal && memory.peak_bytes == memory.file_peak_bytes;
  }
  if (memory.order == file.order) try {
      return plan_on(tg, options, memory);
    } catch (const Infeasible& inf) {
      throw infeasible_error(inf);
    }
  // What each strategy reaches at least is searched for only when neither order meets the budget.
  std::optional<TrainingPlanResult> on_file, on_memory;
  try {
    on_file = plan_on(tg, options, file, false);
  } catch (const Infeasible&) {
  }
  try {
    on_memory = plan_on(tg, options, memory, false);
  } catch (const Infeasible&) {
  }
  if (!on_file && !on_memory) {
    std::optional<Infeasible> both;
    for (const ScheduleResult* order : std::array<const ScheduleResult*, 2>{&file, &memory}) try {
        return plan_on(tg, options, *order);  // the same search again (deterministic), throwing with the totals
      } catch (const Infeasible& inf) {
        if (!both) both = inf;
        for (std::size_t i = 0; i < both->totals.size(); ++i) both->totals[i] = std::min(both->totals[i], inf.totals[i]);
      }
    throw infeasible_error(*both);
  }
  TrainingPlanResult r = !on_memory || (on_file && better_or_equal(*on_file, *on_memory, options.budget_bytes.has_value()))
                             ? std::move(*on_file)
                             : std::move(*on_memory);
  r.plan_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace memplan::planner
