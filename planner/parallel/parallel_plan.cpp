// Per-rank plans: one training graph per rank role (pipeline stage), sharded, planned under the per-GPU budget.
#include <algorithm>
#include <limits>
#include <set>

#include "analysis/liveness.hpp"
#include "analysis/ops.hpp"
#include "planner/parallel/parallel.hpp"

namespace memplan::planner {

void check_parallel_options(const ParallelOptions& o) {
  const std::string range = " is outside the accepted range 1 .. " + std::to_string(kMaxGpus);
  if (o.tp < 1 || o.tp > kMaxGpus) fail(ErrorKind::usage, "--tp " + std::to_string(o.tp) + range);
  if (o.pp < 1 || o.pp > kMaxGpus) fail(ErrorKind::usage, "--pp " + std::to_string(o.pp) + range);
  if (o.gpus < 1 || o.gpus > kMaxGpus) fail(ErrorKind::usage, "--gpus " + std::to_string(o.gpus) + range);
  if (o.microbatches < 1) fail(ErrorKind::usage, "--microbatches must be 1 or more");
  if (o.zero < 0 || o.zero > 3) fail(ErrorKind::usage, "--zero " + std::to_string(o.zero) + " is not one of 0, 1, 2, 3");
  // Both degrees are at most kMaxGpus, so their product fits in 64 bits; one beyond --gpus cannot divide it.
  const std::int64_t degrees = static_cast<std::int64_t>(o.tp) * o.pp;
  if (degrees > o.gpus || o.gpus % degrees != 0)
    fail(ErrorKind::usage, "--gpus " + std::to_string(o.gpus) + " is not a multiple of --tp " + std::to_string(o.tp) + " x --pp " +
                               std::to_string(o.pp) + " (gpus = data parallel x tp x pp)");
  if (o.sequence_parallel && o.tp < 2) fail(ErrorKind::usage, "--sequence-parallel needs --tp 2 or more");
}

std::uint64_t saved_activation_bytes(const analysis::TrainingGraph& tg) {
  const analysis::Graph& g = tg.graph;
  // A view's bytes are its source's: count each storage once.
  std::set<TensorId> roots;
  for (TensorId t : tg.saved_for_backward) {
    if (!analysis::occupies_arena(g, t)) continue;
    TensorId r = t;
    for (;;) {
      const OpId p = g.tensors[r].producer;
      if (p == analysis::kNoOp) break;
      const auto* info = analysis::op_registry().find(g.ops[p]);
      if (!info || info->kind != analysis::OpKind::view || g.ops[p].inputs.empty()) break;
      const TensorId src = g.ops[p].inputs[0];
      if (!analysis::occupies_arena(g, src)) break;
      r = src;
    }
    roots.insert(r);
  }
  std::uint64_t bytes = 0;
  for (TensorId r : roots) bytes = checked_add(bytes, g.tensors[r].bytes(), "saved activation bytes");
  return bytes;
}

namespace {

std::uint64_t planned_bytes(const std::vector<PlannedTensor>& v) {
  std::uint64_t b = 0;
  for (const auto& p : v) b += p.bytes;
  return b;
}

std::uint64_t trainable_elements(const analysis::Graph& g, const analysis::TrainingOptions& to) {
  const std::vector<bool> trains = analysis::trainable_weights(g, to);
  std::uint64_t n = 0;
  for (TensorId t = 0; t < g.tensors.size(); ++t)
    if (trains[t]) n += g.tensors[t].element_count();
  return n;
}

}  // namespace

std::string rank_role_name(const ParallelOptions& par, int stage) {
  if (par.gpus <= 1) return "single GPU";
  std::string name;
  auto part = [&](const std::string& p) { name += (name.empty() ? "" : ", ") + p; };
  if (par.pp > 1) part("stage " + std::to_string(stage) + " of " + std::to_string(par.pp));
  if (par.tp > 1) part("tp ranks 0-" + std::to_string(par.tp - 1) + " of " + std::to_string(par.tp) + (par.sequence_parallel ? " (sequence parallel)" : ""));
  const int dp = par.data_parallel();
  if (dp > 1) part("data parallel x" + std::to_string(dp) + (par.zero > 0 ? " (ZeRO-" + std::to_string(par.zero) + ")" : ""));
  return name;
}

namespace {

// A rank role's training graph, sharded, before planning.
struct PreparedRole {
  analysis::TrainingGraph tg;
  CommunicationBytes tp_bytes;  // one microbatch's tensor-parallel collectives
  RankPlan rp;                  // ranks, role, stage, in_flight, zero, saved_bytes_per_microbatch, forward_ops
};

struct PreparedLayout {
  analysis::Graph forward;  // tensor-parallel sharded when tp > 1
  TensorParallelReport tensor_parallel;
  std::vector<PipelineStage> stages;
};

PreparedLayout prepare_layout(const analysis::Graph& shaped_forward, const TrainingPlanOptions& options, const ParallelOptions& par) {
  check_parallel_options(par);
  PreparedLayout L;
  L.forward = par.tp > 1 ? shard_tensor_parallel(shaped_forward, par.tp, par.sequence_parallel, L.tensor_parallel) : shaped_forward;
  L.stages = pipeline_cuts(L.forward, par.pp, options.profile);
  return L;
}

PreparedRole prepare_role(const PreparedLayout& L, std::size_t i, const analysis::TrainingOptions& training, const ParallelOptions& par) {
  const bool last = i + 1 == L.stages.size();
  const analysis::Graph stage_graph = par.pp > 1 ? pipeline_stage_graph(L.forward, L.stages[i], last) : L.forward;
  analysis::TrainingOptions to = training;
  to.microbatches = 1;
  if (!last) to.loss = analysis::Loss::none;
  // A stage before the last receives its outputs' gradients from the next: with integer outputs only there are none
  // (pipeline_cuts cuts only where a float activation crosses; one may still reach past a stage untouched).
  if (!last && std::none_of(stage_graph.outputs.begin(), stage_graph.outputs.end(),
                            [&](TensorId t) { return analysis::dtype_is_float(stage_graph.tensors[t].dtype); }))
    fail(ErrorKind::usage, "--pp " + std::to_string(par.pp) + ": stage " + std::to_string(i) + " would send only integer activations to the next "
                           "stage, which sends no gradient back (no layout with this cut)");
  PreparedRole p{analysis::build_training_graph(stage_graph, to), {}, {}};
  p.tp_bytes = insert_tensor_parallel_collectives(p.tg, L.tensor_parallel, par.tp, par.sequence_parallel);
  RankPlan& rp = p.rp;
  const int dp = par.data_parallel();
  rp.stage = static_cast<int>(i);
  rp.role = rank_role_name(par, rp.stage);
  for (int d = 0; d < dp; ++d)
    for (int t = 0; t < par.tp; ++t) rp.ranks.push_back(static_cast<int>(i) * dp * par.tp + d * par.tp + t);
  rp.in_flight = par.pp > 1 ? in_flight_microbatches(par.pp_schedule, par.pp, rp.stage, par.microbatches) : 1;
  rp.zero = shard_data_parallel(p.tg, dp, par.zero);
  rp.saved_bytes_per_microbatch = saved_activation_bytes(p.tg);
  for (const auto& op : stage_graph.ops) rp.forward_ops += op.phase == analysis::Phase::forward ? 1 : 0;
  return p;
}

// plan_training, or the cache's plan of the same graph under the same budget.
TrainingPlanResult plan_role(const analysis::TrainingGraph& tg, const TrainingPlanOptions& po, const ParallelOptions& par, int stage,
                             RolePlanCache* cache) {
  if (!cache) return plan_training(tg, po);
  const std::string key = tg.graph.fingerprint() + "|tp" + std::to_string(par.tp) + (par.sequence_parallel ? "sp" : "") + "|pp" +
                          std::to_string(par.pp) + "." + std::to_string(stage) + "|zero" + std::to_string(par.zero) + "|" +
                          (po.budget_bytes ? std::to_string(*po.budget_bytes) : "-") + "|" + po.strategy;
  if (auto it = cache->entries.find(key); it != cache->entries.end()) {
    ++cache->hits;
    if (it->second.infeasible) fail(ErrorKind::infeasible, it->second.message);
    return it->second.result;
  }
  ++cache->misses;
  RolePlanCache::Entry e;
  try {
    e.result = plan_training(tg, po);
  } catch (const Error& err) {
    if (err.kind() != ErrorKind::infeasible) throw;
    e.infeasible = true;
    e.message = err.what();
    cache->entries.emplace(key, std::move(e));
    throw;
  }
  return cache->entries.emplace(key, std::move(e)).first->second.result;
}

}  // namespace

ParallelLowerBounds parallel_lower_bounds(const analysis::Graph& shaped_forward, const analysis::TrainingOptions& training,
                                          const TrainingPlanOptions& options, const ParallelOptions& par) {
  PreparedLayout L = prepare_layout(shaped_forward, options, par);
  ParallelLowerBounds out;
  for (std::size_t i = 0; i < L.stages.size(); ++i) {
    const PreparedRole p = prepare_role(L, i, training, par);
    std::uint64_t b = checked_add(p.rp.zero.weight_bytes, p.rp.zero.gradient_bytes, "model state bytes");
    b = checked_add(b, p.rp.zero.optimizer_state_bytes, "model state bytes");
    for (const auto& t : p.tg.graph.tensors)
      if (t.role == analysis::TensorRole::input) b = checked_add(b, t.bytes(), "input bytes");
    out.peak_bytes.push_back(b);
  }
  out.tensor_parallel = std::move(L.tensor_parallel);
  return out;
}

namespace {

// A role's planning options: the file order (the order the parallel transforms lay out: ZeRO-3 gathers one unit ahead,
// reductions after each unit; the peak model prices no overlap of communication, so a memory order would move each
// gather to its first use), and the budget less the other microbatches' saved activations (none where they alone
// pass it and `least_where_over_budget`: the role is then planned for its least memory).
TrainingPlanOptions role_options(const TrainingPlanOptions& options, RankPlan& rp, bool least_where_over_budget) {
  TrainingPlanOptions po = options;
  po.schedule.kind = ScheduleKind::file;
  // Past 2^64 bytes no budget holds them, and without one the figure cannot be stated (ErrorKind::overflow), never wrapped.
  const auto count = static_cast<std::uint64_t>(rp.in_flight - 1), bytes = rp.saved_bytes_per_microbatch;
  const bool wraps = bytes != 0 && count > std::numeric_limits<std::uint64_t>::max() / bytes;
  if (wraps && !po.budget_bytes)
    fail(ErrorKind::overflow,
         rp.role + ": the " + std::to_string(count) + " microbatches in flight hold more than 2^64 bytes of saved activations");
  const std::uint64_t others = wraps ? std::numeric_limits<std::uint64_t>::max() : count * bytes;
  if (!po.budget_bytes) return po;
  if (*po.budget_bytes > others) {
    *po.budget_bytes -= others;
  } else if (least_where_over_budget) {
    po.budget_bytes.reset();
    rp.least_memory = true;
  } else {
    fail(ErrorKind::infeasible,
         rp.role + ": the " + std::to_string(rp.in_flight - 1) + " other microbatches in flight alone hold more than the budget");
  }
  return po;
}

// The role's plan, and its memory figures with the other microbatches in flight. An infeasible budget with
// `least_where_over_budget`: the least the role's strategy reaches.
void plan_rank_role(const PreparedRole& p, TrainingPlanOptions po, const ParallelOptions& par, RolePlanCache* cache,
                    bool least_where_over_budget, RankPlan& rp) {
  try {
    rp.result = plan_role(p.tg, po, par, rp.stage, cache);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::infeasible || !least_where_over_budget || !po.budget_bytes) throw;
    po.budget_bytes.reset();
    rp.least_memory = true;
    rp.result = plan_role(p.tg, po, par, rp.stage, cache);
  }
  const std::uint64_t dropped = planned_bytes(rp.result.recomputed) + planned_bytes(rp.result.swapped);
  const std::uint64_t kept = rp.saved_bytes_per_microbatch > dropped ? rp.saved_bytes_per_microbatch - dropped : 0;
  const std::string& role = rp.role;
  rp.activation_bytes = checked_mul(kept, static_cast<std::uint64_t>(rp.in_flight), role + ": activation bytes in flight");
  rp.peak_bytes =
      checked_add(rp.result.peak_bytes, checked_mul(kept, static_cast<std::uint64_t>(rp.in_flight - 1), role + ": peak bytes"),
                  role + ": peak bytes");
  rp.model_state_bytes = checked_add(checked_add(rp.zero.weight_bytes, rp.zero.gradient_bytes, role + ": model state bytes"),
                                     rp.zero.optimizer_state_bytes, role + ": model state bytes");
  rp.flops = rp.result.training_flops;
  rp.compute_seconds = rp.result.estimated_step_seconds;
}

// The bytes stage i's rank sends per step. ZeRO 0/1 reduce the accumulated gradients once; 2/3 keep no unsharded
// gradients between microbatches, so they reduce (and 3 gathers) once per microbatch. Tensor parallel: the stage's own
// collectives (forward and backward), once per microbatch; pipeline: activations forward, their gradients back.
CommunicationBytes role_communication(const PreparedLayout& L, std::size_t i, const PreparedRole& p, const ParallelOptions& par) {
  CommunicationBytes c = p.rp.zero.communication;
  const auto m = static_cast<std::uint64_t>(par.microbatches);
  const std::string sent = p.rp.role + ": bytes sent per step";
  auto per_step = [&](std::uint64_t total, std::uint64_t per_microbatch) {
    return checked_add(total, checked_mul(per_microbatch, m, sent), sent);
  };
  if (par.zero >= 2) {
    c.reduce_scatter = checked_mul(c.reduce_scatter, m, sent);
    c.all_gather = par.zero == 3 ? checked_mul(c.all_gather, m, sent) : c.all_gather;
  }
  c.all_reduce = per_step(c.all_reduce, p.tp_bytes.all_reduce);
  c.reduce_scatter = per_step(c.reduce_scatter, p.tp_bytes.reduce_scatter);
  c.all_gather = per_step(c.all_gather, p.tp_bytes.all_gather);
  if (par.pp > 1) {
    const std::uint64_t out = L.stages[i].boundary_bytes, in = i > 0 ? L.stages[i - 1].boundary_bytes : 0;
    c.send_recv = per_step(0, checked_add(out, in, sent));
  }
  checked_add(checked_add(c.all_reduce, c.reduce_scatter, sent), checked_add(c.all_gather, c.send_recv, sent), sent);  // total()
  return c;
}

}  // namespace

ParallelPlanResult plan_parallel(const analysis::Graph& shaped_forward, const analysis::TrainingOptions& training,
                                 const TrainingPlanOptions& options, const ParallelOptions& par, RolePlanCache* cache,
                                 bool least_where_over_budget) {
  PreparedLayout L = prepare_layout(shaped_forward, options, par);
  ParallelPlanResult R;
  R.options = par;
  R.unsharded_parameters = trainable_elements(shaped_forward, training);
  double slowest = 0.0;
  for (std::size_t i = 0; i < L.stages.size(); ++i) {
    PreparedRole p = prepare_role(L, i, training, par);
    RankPlan& rp = p.rp;
    plan_rank_role(p, role_options(options, rp, least_where_over_budget), par, cache, least_where_over_budget, rp);
    rp.communication = role_communication(L, i, p, par);
    slowest = std::max(slowest, rp.compute_seconds);
    R.communication_seconds = std::max(R.communication_seconds, communication_seconds(rp.communication, options.profile));
    if (options.budget_bytes &&
        checked_add(rp.peak_bytes, options.library_bytes, rp.role + ": total device bytes") > *options.budget_bytes)
      R.fits = false;
    R.roles.push_back(std::move(rp));
  }
  R.stages = std::move(L.stages);
  R.tensor_parallel = std::move(L.tensor_parallel);
  // A pipeline of P stages runs M + P - 1 slots of its slowest stage (the bubble); without one, M micro-steps.
  R.estimated_step_seconds = slowest * static_cast<double>(par.microbatches + par.pp - 1) + R.communication_seconds;
  return R;
}

}  // namespace memplan::planner
