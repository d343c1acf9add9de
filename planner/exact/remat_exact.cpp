// Exact rematerialization over the stage chain: the model's evaluator, a brute force, and the gap of the segment DP.
// The MILP (CBC) is in remat_exact_milp.cpp.
#include "planner/exact/remat_exact.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace memplan::planner {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

bool read_b(const StageChain& c, std::size_t j) { return c.boundary_read[j] && c.boundary[j] > 0; }

// What phase t is entered with (hb, hn: per stage j <= t), rebuilds (r: per stage j <= t) and passes on (pb, pn:
// per stage j < t).
struct PhaseChoice {
  const std::vector<bool>& hb;
  const std::vector<bool>& hn;
  const std::vector<bool>& r;
  const std::vector<bool>& pb;
  const std::vector<bool>& pn;
};

// b_j made by the rebuild (its boundary op run) when something uses it from there: the rebuild of j + 1, stage t's
// backward, or the next phase.
std::vector<bool> made_boundaries(const StageChain& c, std::size_t t, const PhaseChoice& p) {
  std::vector<bool> made(t + 1, false);
  for (std::size_t j = 0; j <= t; ++j) {
    if (!p.r[j] || p.hb[j]) continue;
    made[j] =
        (j + 1 <= t && p.r[j + 1]) || (j == t && read_b(c, t)) || (t >= 1 && j == t - 1 && read_b(c, j)) || (j < t && p.pb[j]);
  }
  return made;
}

// Whether the phase has what it reads: b_{j-1} for a rebuild of j, stage t's inner bytes and read boundaries for its
// backward, and everything it passes on.
bool needs_met(const StageChain& c, std::size_t t, const PhaseChoice& p, const std::vector<bool>& made) {
  auto has_b = [&](std::size_t j) { return p.hb[j] || made[j]; };
  auto has_n = [&](std::size_t j) { return p.hn[j] || p.r[j]; };
  for (std::size_t j = 1; j <= t; ++j)
    if (p.r[j] && !has_b(j - 1)) return false;
  if (c.inner[t] > 0 && !has_n(t)) return false;
  if (read_b(c, t) && !has_b(t)) return false;
  if (t >= 1 && read_b(c, t - 1) && !has_b(t - 1)) return false;
  for (std::size_t j = 0; j < t; ++j)
    if ((p.pb[j] && !has_b(j)) || (p.pn[j] && !has_n(j))) return false;
  return true;
}

// Whether the phase holds b_j (j < t) throughout: entered with, passed on, or b_{t-1} made for the backward.
bool boundary_held(const StageChain& c, std::size_t t, const PhaseChoice& p, const std::vector<bool>& made, std::size_t j) {
  return j < t && (p.hb[j] || p.pb[j] || (j + 1 == t && read_b(c, j) && made[j]));
}

// The bytes the phase holds of each stage j < t throughout (0 for stage t).
std::vector<std::uint64_t> held_bytes(const StageChain& c, std::size_t t, const PhaseChoice& p, const std::vector<bool>& made) {
  std::vector<std::uint64_t> own(t + 1, 0);
  for (std::size_t j = 0; j < t; ++j)
    own[j] = (boundary_held(c, t, p, made, j) ? c.boundary[j] : 0) + (p.hn[j] || p.pn[j] ? c.inner[j] : 0);
  return own;
}

// The FLOPs of the phase's rebuilds, infinity when one passes the budget. While stage j is rebuilt (in order): what
// the phase holds of the stages before j, what it was entered with of the stages after j, stage j's inner bytes, and
// its boundary when held or made.
double rebuild_flops(const StageChain& c, std::size_t t, const PhaseChoice& p, const std::vector<bool>& made,
                     const std::vector<std::uint64_t>& own, std::uint64_t budget) {
  double flops = 0.0;
  std::uint64_t before = 0;
  for (std::size_t j = 0; j <= t; ++j) {
    std::uint64_t after = 0;
    for (std::size_t k = j + 1; k < t; ++k) after += (p.hb[k] ? c.boundary[k] : 0) + (p.hn[k] ? c.inner[k] : 0);
    const bool b_present = boundary_held(c, t, p, made, j) || made[j];
    const bool fits = before + after + c.inner[j] + (b_present ? c.boundary[j] : 0) <= budget;
    before += own[j];
    if (!p.r[j]) continue;
    if (!fits) return kInf;
    flops += c.flops[j] - (made[j] ? 0.0 : c.boundary_flops[j]);
  }
  return flops;
}

// One phase t of the model (PhaseChoice). Returns the FLOPs, or infinity when a need is unmet or the bytes pass the
// budget. A rebuild skips its boundary op when the boundary is held or unused.
double phase_cost(const StageChain& c, std::size_t t, const std::vector<bool>& hb, const std::vector<bool>& hn,
                  const std::vector<bool>& r, const std::vector<bool>& pb, const std::vector<bool>& pn, std::uint64_t budget) {
  const PhaseChoice p{hb, hn, r, pb, pn};
  const std::vector<bool> made = made_boundaries(c, t, p);
  if (!needs_met(c, t, p, made)) return kInf;
  const std::vector<std::uint64_t> own = held_bytes(c, t, p, made);
  std::uint64_t held = 0;
  for (std::uint64_t b : own) held += b;
  const std::uint64_t bwd = held + c.inner[t] + (read_b(c, t) ? c.boundary[t] : 0) + c.extra[t];
  if (bwd > budget) return kInf;
  return rebuild_flops(c, t, p, made, own, budget);
}

std::vector<bool> bits(std::uint64_t mask, std::size_t n) {
  std::vector<bool> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = (mask >> i & 1u) != 0;
  return v;
}

}  // namespace

const char* exact_status_name(ExactStatus s) noexcept {
  switch (s) {
    case ExactStatus::optimal:
      return "optimal";
    case ExactStatus::feasible:
      return "feasible";
    case ExactStatus::infeasible:
      return "infeasible";
    case ExactStatus::no_solution:
      return "no_solution";
    case ExactStatus::too_large:
      return "too_large";
    case ExactStatus::not_built:
      return "not_built";
  }
  return "not_built";
}

StageChain stage_chain(const ForwardStages& s) {
  StageChain c;
  for (std::size_t i = 0; i < s.size(); ++i) {
    c.inner.push_back(s.saved_bytes[i]);
    c.boundary.push_back(s.boundary_bytes[i]);
    c.boundary_read.push_back(s.loose(i) == 0);
    c.extra.push_back(s.extra_bytes(i));
    c.flops.push_back(s.flops[i]);
    c.boundary_flops.push_back(s.boundary_flops[i]);
  }
  return c;
}

double brute_force_remat(const StageChain& c, std::uint64_t budget) {
  const std::size_t m = c.size();
  if (m == 0) return 0.0;
  if (m > 5) fail(ErrorKind::usage, "the remat brute force takes at most 5 stages, not " + std::to_string(m));
  // best[t][held mask entering t]: least FLOPs of phases t .. 0. Mask bits: b_j at j, n_j at t + 1 + j.
  std::vector<std::map<std::uint64_t, double>> memo(m);
  auto go = [&](auto&& self, std::size_t t, std::uint64_t mask) -> double {
    if (auto it = memo[t].find(mask); it != memo[t].end()) return it->second;
    const std::vector<bool> hb = bits(mask, t + 1), hn = bits(mask >> (t + 1), t + 1);
    double best = kInf;
    for (std::uint64_t rm = 0; rm < (1ull << (t + 1)); ++rm) {
      const std::vector<bool> r = bits(rm, t + 1);
      for (std::uint64_t pm = 0; pm < (1ull << (2 * t)); ++pm) {
        const std::vector<bool> pb = bits(pm, t), pn = bits(pm >> t, t);
        const double f = phase_cost(c, t, hb, hn, r, pb, pn, budget);
        if (f == kInf) continue;
        const double rest = t == 0 ? 0.0 : self(self, t - 1, pm);
        best = std::min(best, f + rest);
      }
    }
    memo[t][mask] = best;
    return best;
  };
  double best = kInf;
  for (std::uint64_t mask = 0; mask < (1ull << (2 * m)); ++mask) best = std::min(best, go(go, m - 1, mask));
  return best;
}

namespace {

using BoolMatrix = std::vector<std::vector<bool>>;

// r[t][j]: stage j rebuilt in phase t. A recompute segment is rebuilt in the phase of its last stage; as the DP, a
// segment holding nothing but its kept end boundary rebuilds nothing.
BoolMatrix segment_rebuilds(const StageChain& c, const SegmentPlan& plan) {
  const std::size_t m = c.size();
  BoolMatrix r(m, std::vector<bool>(m, false));
  for (const Segment& seg : plan) {
    std::uint64_t total = 0;
    for (std::uint32_t j = seg.first; j <= seg.last; ++j) total += c.inner[j] + (read_b(c, j) ? c.boundary[j] : 0);
    if (seg.recompute && total > (read_b(c, seg.last) ? c.boundary[seg.last] : 0))
      for (std::uint32_t j = seg.first; j <= seg.last; ++j) r[seg.last][j] = true;
  }
  return r;
}

// What each phase t needs held of stage j: n_t, read boundaries b_t and b_{t-1}, and b_{j-1} for a rebuild of j whose
// stage j-1 the phase does not rebuild; as the DP, a recompute segment's read end boundary is kept from the forward
// (its rebuild skips that op).
struct PhaseNeeds {
  BoolMatrix b, n;
};
PhaseNeeds phase_needs(const StageChain& c, const SegmentPlan& plan, const BoolMatrix& r) {
  const std::size_t m = c.size();
  PhaseNeeds need{BoolMatrix(m, std::vector<bool>(m, false)), BoolMatrix(m, std::vector<bool>(m, false))};
  for (const Segment& seg : plan)
    if (seg.recompute && read_b(c, seg.last) && r[seg.last][seg.last]) need.b[seg.last][seg.last] = true;
  for (std::size_t t = 0; t < m; ++t) {
    if (c.inner[t] > 0 && !r[t][t]) need.n[t][t] = true;
    if (read_b(c, t) && !r[t][t]) need.b[t][t] = true;
    if (t >= 1 && read_b(c, t - 1) && !r[t][t - 1]) need.b[t][t - 1] = true;
    for (std::size_t j = 1; j <= t; ++j)
      if (r[t][j] && !r[t][j - 1]) need.b[t][j - 1] = true;
  }
  return need;
}

// Least holdings of stage j: held entering phase t when some phase t' <= t needs it and nothing rebuilds it in
// phases t'+1 .. t (an ascending scan).
void hold_least(ChainPoint& p, const BoolMatrix& r, const PhaseNeeds& need, std::size_t j) {
  bool pend_b = false, pend_n = false;
  for (std::size_t t = j; t < r.size(); ++t) {
    if (r[t][j] && !need.b[t][j]) {
      pend_b = pend_n = false;
      continue;
    }
    if (r[t][j]) {  // rebuilt, but its boundary held from above (a recompute segment's end)
      p.held_boundary[t][j] = pend_b = true;
      pend_n = false;
      continue;
    }
    p.held_boundary[t][j] = pend_b = pend_b || need.b[t][j];
    p.held_inner[t][j] = pend_n = pend_n || need.n[t][j];
  }
}

}  // namespace

ChainPoint chain_point_of_segments(const StageChain& c, const SegmentPlan& plan) {
  const std::size_t m = c.size();
  const BoolMatrix r = segment_rebuilds(c, plan);
  const PhaseNeeds need = phase_needs(c, plan, r);
  ChainPoint p;
  p.rebuild.resize(m), p.held_boundary.resize(m), p.held_inner.resize(m);
  for (std::size_t t = 0; t < m; ++t) {
    p.rebuild[t].assign(r[t].begin(), r[t].begin() + static_cast<std::ptrdiff_t>(t + 1));
    p.held_boundary[t].assign(t + 1, false);
    p.held_inner[t].assign(t + 1, false);
  }
  for (std::size_t j = 0; j < m; ++j) hold_least(p, r, need, j);
  return p;
}

double chain_flops(const StageChain& c, const ChainPoint& p, std::uint64_t budget) {
  double flops = 0.0;
  for (std::size_t t = c.size(); t-- > 0;) {
    std::vector<bool> pb(t), pn(t);
    for (std::size_t j = 0; j < t; ++j) pb[j] = p.held_boundary[t - 1][j], pn[j] = p.held_inner[t - 1][j];
    const double f = phase_cost(c, t, p.held_boundary[t], p.held_inner[t], p.rebuild[t], pb, pn, budget);
    if (f == kInf) return kInf;
    flops += f;
  }
  return flops;
}

double chain_flops_of_segments(const StageChain& c, const SegmentPlan& plan, std::uint64_t budget) {
  return c.size() == 0 ? 0.0 : chain_flops(c, chain_point_of_segments(c, plan), budget);
}

RematChoice choice_from_exact(const Graph& g, const ForwardStages& s, const ExactRematResult& r) {
  RematChoice c = RematChoice::keep_all(g);
  const std::size_t m = s.size();
  if (r.rebuild.size() != m || r.keep_boundary.size() != m || r.keep_inner.size() != m) return c;
  std::vector<std::uint32_t> phase(m, UINT32_MAX);  // the phase rebuilding each stage
  for (std::size_t t = 0; t < m; ++t)
    for (std::size_t j = 0; j <= t && j < r.rebuild[t].size(); ++j)
      if (r.rebuild[t][j] && phase[j] == UINT32_MAX) phase[j] = static_cast<std::uint32_t>(t);
  for (std::size_t j = 0; j < m; ++j)
    if (const TensorId b = s.boundary[j]; b != analysis::kNoTensor) {
      if (r.keep_boundary[j] || phase[j] == UINT32_MAX)
        c.action[b] = RematAction::keep;  // kept, or a rebuild's source
      else
        c.action[b] = RematAction::recompute, c.group[b] = phase[j];
    }
  for (TensorId t : find_saved_for_backward(g)) {
    const std::uint32_t st = s.stage_of_op[g.tensors[t].producer];
    if (st == UINT32_MAX || t == s.boundary[st] || r.keep_inner[st] || phase[st] == UINT32_MAX) continue;
    c.action[t] = RematAction::recompute;
    c.group[t] = phase[st];
  }
  return c;
}

RematGap remat_gap(const ForwardStages& plain, std::uint64_t budget, const ExactRematOptions& o) {
  RematGap g;
  const SegmentPlan dp = optimal_segments(plain, budget);
  g.dp_flops = dp.empty() ? kInf : evaluate_segments(plain, dp).recompute_flops;
  const StageChain chain = stage_chain(plain);
  const ChainPoint start = chain_point_of_segments(chain, dp);
  g.exact = exact_remat(chain, budget, o, dp.empty() ? nullptr : &start);
  if (std::isfinite(g.dp_flops) && g.dp_flops > 0.0 &&
      (g.exact.status == ExactStatus::optimal || g.exact.status == ExactStatus::feasible))
    g.gap = std::max(0.0, (g.dp_flops - g.exact.lower_bound) / g.dp_flops);
  return g;
}

}  // namespace memplan::planner
