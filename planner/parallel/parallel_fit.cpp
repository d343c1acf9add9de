// fit --max-gpus: layouts of 1..N GPUs enumerated in order, pruned by model state, planned per rank, the fastest fitting chosen.
#include "planner/parallel/parallel_fit.hpp"

#include <algorithm>
#include <map>

namespace memplan::planner {

namespace {

std::vector<std::int64_t> divisors(std::int64_t n) {
  std::vector<std::int64_t> small, large;
  for (std::int64_t d = 1; d * d <= n; ++d)
    if (n % d == 0) {
      small.push_back(d);
      if (d != n / d) large.push_back(n / d);
    }
  small.insert(small.end(), large.rbegin(), large.rend());
  return small;
}

// Each at least twice the one before, from `from`; the last divisor always closes a ladder without a cap.
std::vector<int> ladder(const std::vector<std::int64_t>& ds, std::int64_t from, std::size_t cap) {
  std::vector<int> out;
  for (std::int64_t d : ds) {
    if (d < from || (!out.empty() && d < 2 * static_cast<std::int64_t>(out.back()))) continue;
    if (out.size() == cap) break;
    out.push_back(static_cast<int>(d));
  }
  return out;
}

// The budget is total device memory: the rank's peak and the libraries beside it.
bool over_budget(std::uint64_t peak, const TrainingPlanOptions& o) {
  return o.budget_bytes && checked_add(peak, o.library_bytes, "total device bytes") > *o.budget_bytes;
}

void fill_from_plan(LayoutCandidate& c, const ParallelPlanResult& r) {
  c.planned = true;
  c.plan_valid = true;
  c.peak_bytes = c.model_state_bytes = c.activation_bytes = c.communication_bytes = 0;
  c.recomputed_tensors = c.swapped_tensors = 0;
  c.costs_time = false;
  c.strategies.clear();
  double overhead = 0.0;
  for (const RankPlan& rp : r.roles) {
    c.peak_bytes = std::max(c.peak_bytes, rp.peak_bytes);
    c.model_state_bytes = std::max(c.model_state_bytes, rp.model_state_bytes);
    c.activation_bytes = std::max(c.activation_bytes, rp.activation_bytes);
    c.communication_bytes = std::max(c.communication_bytes, rp.communication.total());
    c.recomputed_tensors += rp.result.recomputed_tensors;
    c.swapped_tensors += rp.result.swapped_tensors;
    c.plan_valid = c.plan_valid && rp.result.report.valid;
    c.costs_time = c.costs_time || rp.result.estimated_step_seconds > rp.result.keep_all_step_seconds * (1.0 + 1e-9);
    overhead = std::max(overhead, rp.result.recompute_overhead);
    c.strategies += (c.strategies.empty() ? "" : "/") + rp.result.strategy;
  }
  c.step_seconds = r.estimated_step_seconds;
  c.communication_seconds = r.communication_seconds;
  if (c.recomputed_tensors + c.swapped_tensors == 0) {
    c.note = "keeps every saved tensor";
    return;
  }
  c.note.clear();
  if (c.recomputed_tensors)
    c.note = "recomputes " + std::to_string(c.recomputed_tensors) + " tensors (up to +" + std::to_string(static_cast<int>(100.0 * overhead + 0.5)) +
             "% FLOPs on a rank)";
  if (c.swapped_tensors) c.note += (c.note.empty() ? "swaps " : ", swaps ") + std::to_string(c.swapped_tensors);
  if (!c.costs_time) c.note += " (no time lost)";
}

// Fitting candidates of one N: the least step time, then the fewest bytes sent, then the lowest peak.
bool better(const LayoutCandidate& a, const LayoutCandidate& b) {
  if (a.step_seconds != b.step_seconds) return a.step_seconds < b.step_seconds;
  if (a.communication_bytes != b.communication_bytes) return a.communication_bytes < b.communication_bytes;
  return a.peak_bytes < b.peak_bytes;
}

struct Search {
  const std::function<const analysis::Graph&(std::int64_t)>& forward_at;
  const analysis::TrainingOptions& training;
  const TrainingPlanOptions& options;
  const LayoutSearchOptions& s;
  LayoutSearchResult r;
  RolePlanCache cache;
  std::map<std::string, std::string> unusable;  // "tp,sp,pp" -> the usage error that rules it out

  std::int64_t microbatch(int dp, int m) const {
    return s.fixed_microbatch > 0 ? s.fixed_microbatch : s.global_batch / (static_cast<std::int64_t>(dp) * m);
  }

  // Plans one layout; false when the enumeration must stop (max_planned).
  bool try_layout(const ParallelOptions& par, std::int64_t b, LayoutCandidate& c, bool& skip) {
    c.layout = par;
    c.microbatch = b;
    const std::string key = std::to_string(par.tp) + (par.sequence_parallel ? "sp" : "") + "," + std::to_string(par.pp);
    if (unusable.count(key)) {
      skip = true;
      return true;
    }
    const analysis::Graph& fwd = forward_at(b);
    ParallelLowerBounds lb;
    try {
      lb = parallel_lower_bounds(fwd, training, options, par);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::usage) throw;
      unusable[key] = e.what();
      skip = true;
      return true;
    }
    if (par.tp > 1 && lb.tensor_parallel.column_ops == 0) {
      unusable[key] = "--tp " + std::to_string(par.tp) + ": no column/row-parallel matmul pairs found (every weight would be replicated)";
      skip = true;
      return true;
    }
    if (par.sequence_parallel && lb.tensor_parallel.sequence_parallel_ops.empty()) {
      unusable[key] = "--sequence-parallel with --tp " + std::to_string(par.tp) + ": no op between the pairs works row by row (the same plans as without)";
      skip = true;
      return true;
    }
    const std::uint64_t bound = *std::max_element(lb.peak_bytes.begin(), lb.peak_bytes.end());
    if (over_budget(bound, options)) {
      c.peak_bytes = bound;
      c.peak_is_lower_bound = true;
      c.note = "model state and inputs alone exceed the budget (not planned)";
      return true;
    }
    if (r.planned == s.max_planned) {
      r.capped = true;
      return false;
    }
    ++r.planned;
    // A role whose budget cannot be met is planned for the least its strategy reaches: the layout's peak.
    const ParallelPlanResult pr = plan_parallel(fwd, training, options, par, &cache, true);
    fill_from_plan(c, pr);
    c.fits = !over_budget(c.peak_bytes, options);
    std::size_t least = 0;
    for (const RankPlan& rp : pr.roles) least += rp.least_memory ? 1 : 0;
    if (c.fits && least) {
      // The budget's share for the other microbatches in flight assumed they keep every saved tensor; they keep less.
      c.least_memory_plans = true;
      c.note += " (least-memory plans)";
    } else if (!c.fits) {
      c.note = "over budget: " + std::to_string(least) + " of " + std::to_string(pr.roles.size()) + " role(s) planned for their least memory";
    }
    if (c.fits) keep_if_best(c, pr);
    return true;
  }

  std::optional<LayoutCandidate> best;
  void keep_if_best(const LayoutCandidate& c, const ParallelPlanResult& pr) {
    if (best && !better(c, *best)) return;
    best = c;
    r.chosen = r.candidates.size();  // c is appended next
    r.chosen_plan = pr;
  }

  // Every layout of n GPUs; false when the enumeration must stop.
  bool gpus(int n) {
    for (int tp = 1; tp <= std::min(n, s.max_tp); ++tp) {
      if (n % tp) continue;
      for (int pp = 1; pp <= n / tp; ++pp) {
        if ((n / tp) % pp) continue;
        const int dp = n / (tp * pp);
        const std::vector<int> ms = microbatch_choices(s, dp, pp);
        for (int zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero)
          for (int sp = 0; sp <= (tp > 1 ? 1 : 0); ++sp)
            for (int m : ms) {
              ParallelOptions par;
              par.gpus = n;
              par.tp = tp;
              par.pp = pp;
              par.zero = zero;
              par.sequence_parallel = sp == 1;
              par.microbatches = m;
              LayoutCandidate c;
              bool skip = false;
              if (!try_layout(par, microbatch(dp, m), c, skip)) return false;
              if (skip) break;
              // Without a pipeline, more microbatches of fewer samples never estimate faster (the same FLOPs,
              // the weights read once more per microbatch, ZeRO-2/3 reducing per microbatch): past one that
              // fits at its keep-all time, none can win.
              const bool done = pp == 1 && c.fits && !c.costs_time;
              r.candidates.push_back(std::move(c));
              if (done) break;
            }
      }
    }
    return true;
  }
};

}  // namespace

std::vector<int> microbatch_choices(const LayoutSearchOptions& s, int dp, int pp) {
  if (dp < 1 || pp < 1 || s.global_batch < 1 || s.global_batch % dp) return {};
  const std::int64_t per_rank = s.global_batch / dp;
  if (s.fixed_microbatch > 0) {
    if (per_rank % s.fixed_microbatch || per_rank / s.fixed_microbatch > (1 << 20)) return {};
    return {static_cast<int>(per_rank / s.fixed_microbatch)};
  }
  if (per_rank > (1 << 20)) return {};
  const std::vector<std::int64_t> ds = divisors(per_rank);
  if (pp == 1) {
    std::vector<int> out = ladder(ds, 1, ds.size());
    if (out.back() != per_rank) out.push_back(static_cast<int>(per_rank));  // one sample per microbatch: the least memory
    return out;
  }
  // A pipeline wants M >= P (fewer leave stages idle); a batch with no such divisor gets its largest M.
  const std::int64_t from = ds.back() >= pp ? pp : ds.back();
  return ladder(ds, from, static_cast<std::size_t>(std::max(1, s.max_microbatch_choices)));
}

LayoutSearchResult search_layouts(const std::function<const analysis::Graph&(std::int64_t)>& forward_at,
                                  const analysis::TrainingOptions& training, const TrainingPlanOptions& options,
                                  const LayoutSearchOptions& search) {
  if (search.max_gpus < 1) fail(ErrorKind::usage, "--max-gpus must be 1 or more");
  if (search.global_batch < 1) fail(ErrorKind::usage, "the global batch must be 1 or more");
  if (!options.budget_bytes) fail(ErrorKind::usage, "fit --max-gpus needs --budget (per GPU)");
  Search S{forward_at, training, options, search, {}, {}, {}, {}};
  for (int n = 1; n <= search.max_gpus; ++n) {
    S.r.searched_gpus = n;
    if (!S.gpus(n) || S.best) break;
  }
  LayoutSearchResult r = std::move(S.r);
  r.role_plans_reused = S.cache.hits;
  for (const auto& kv : S.unusable)
    if (std::find(r.not_applicable.begin(), r.not_applicable.end(), kv.second) == r.not_applicable.end()) r.not_applicable.push_back(kv.second);
  for (std::size_t i = 0; i < r.candidates.size(); ++i) {
    const LayoutCandidate& c = r.candidates[i];
    if (!r.least) {
      r.least = i;
      continue;
    }
    const LayoutCandidate& l = r.candidates[*r.least];
    // A planned peak before a lower bound; then the smaller.
    if (l.peak_is_lower_bound != c.peak_is_lower_bound ? l.peak_is_lower_bound : c.peak_bytes < l.peak_bytes) r.least = i;
  }
  return r;
}

}  // namespace memplan::planner
