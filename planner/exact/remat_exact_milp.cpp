// The exact remat model (remat_exact.hpp) as a MILP (planner/exact/milp.hpp), solved by CBC when the build found it.
#include <chrono>
#include <cmath>
#include <limits>

#include "planner/exact/remat_exact.hpp"

#include "planner/exact/milp.hpp"

namespace memplan::planner {

namespace {
// Bytes in KiB and FLOPs in GFLOP: the scales keep coefficients moderate.
double kib(std::uint64_t b) { return static_cast<double>(b) / 1024.0; }
constexpr double kGiga = 1e9;
constexpr auto LE = Milp::Sense::le;
constexpr auto GE = Milp::Sense::ge;
constexpr auto EQ = Milp::Sense::eq;
}  // namespace

bool exact_remat_available() noexcept { return Milp::available(); }


ExactRematResult exact_remat(const StageChain& c, std::uint64_t budget, const ExactRematOptions& o, const ChainPoint* start) {
  ExactRematResult res;
  const std::size_t m = c.size();
  if (m == 0) {
    res.status = ExactStatus::optimal;
    return res;
  }
  if (m > o.max_stages) {
    res.status = ExactStatus::too_large;
    return res;
  }
  if (!Milp::available()) return res;
  Milp milp;
  const double cap = kib(budget);
  auto read = [&](std::size_t j) { return c.boundary_read[j] && c.boundary[j] > 0; };
  // Per phase t and stage j <= t: R rebuild, Sb/Sn held entering, Z boundary op skipped; Ub/Un (j < t) held in
  // the phase; H the phase's held KiB.
  std::vector<std::vector<int>> R(m), Sb(m), Sn(m), Z(m), Ub(m), Un(m);
  for (std::size_t t = 0; t < m; ++t)
    for (std::size_t j = 0; j <= t; ++j) {
      R[t].push_back(milp.binary(c.flops[j] / kGiga));
      Sb[t].push_back(milp.binary());
      Sn[t].push_back(milp.binary());
      Z[t].push_back(milp.unit(-c.boundary_flops[j] / kGiga));
      if (j < t) Ub[t].push_back(milp.unit()), Un[t].push_back(milp.unit());
    }
  if (o.once)
    for (std::size_t j = 0; j < m; ++j) {
      std::vector<std::pair<int, double>> terms;
      for (std::size_t t = j; t < m; ++t) terms.emplace_back(R[t][j], 1.0);
      milp.row(terms, LE, 1.0);
      for (std::size_t t = j; t < m && j >= 1; ++t)  // from the forward's b_{j-1} or the same phase's rebuild
        milp.row({{R[t][j], 1.0}, {Sb[m - 1][j - 1], -1.0}, {R[t][j - 1], -1.0}}, LE, 0.0);
    }
  for (std::size_t t = 0; t < m; ++t) {
    // b_j from this phase: held, or made by a rebuild that runs its boundary op (R - Z).
    auto from_b = [&](std::size_t j) { return std::vector<std::pair<int, double>>{{Sb[t][j], 1.0}, {R[t][j], 1.0}, {Z[t][j], -1.0}}; };
    for (std::size_t j = 0; j <= t; ++j) {
      milp.row({{Z[t][j], 1.0}, {R[t][j], -1.0}}, LE, 0.0);
      if (j >= 1) {  // a rebuild of j reads b_{j-1}
        auto terms = from_b(j - 1);
        terms.emplace_back(R[t][j], -1.0);
        milp.row(terms, GE, 0.0);
      }
      if (t + 1 < m) {  // held entering t: held entering t+1 or made there
        milp.row({{Sb[t][j], 1.0}, {Sb[t + 1][j], -1.0}, {R[t + 1][j], -1.0}, {Z[t + 1][j], 1.0}}, LE, 0.0);
        milp.row({{Sn[t][j], 1.0}, {Sn[t + 1][j], -1.0}, {R[t + 1][j], -1.0}}, LE, 0.0);
      }
    }
    if (c.inner[t] > 0) milp.row({{Sn[t][t], 1.0}, {R[t][t], 1.0}}, GE, 1.0);
    if (read(t)) milp.row(from_b(t), GE, 1.0);
    if (t >= 1 && read(t - 1)) milp.row(from_b(t - 1), GE, 1.0);
    // Held in phase t (j < t): entering, passed on, and b_{t-1} made here for the backward.
    std::vector<std::pair<int, double>> held;
    for (std::size_t j = 0; j < t; ++j) {
      milp.row({{Ub[t][j], 1.0}, {Sb[t][j], -1.0}}, GE, 0.0);
      milp.row({{Ub[t][j], 1.0}, {Sb[t - 1][j], -1.0}}, GE, 0.0);
      milp.row({{Un[t][j], 1.0}, {Sn[t][j], -1.0}}, GE, 0.0);
      milp.row({{Un[t][j], 1.0}, {Sn[t - 1][j], -1.0}}, GE, 0.0);
      if (j + 1 == t && read(j)) milp.row({{Ub[t][j], 1.0}, {R[t][j], -1.0}, {Z[t][j], 1.0}}, GE, 0.0);
      if (c.boundary[j] > 0) held.emplace_back(Ub[t][j], kib(c.boundary[j]));
      if (c.inner[j] > 0) held.emplace_back(Un[t][j], kib(c.inner[j]));
    }
    const int h = milp.continuous(0.0, std::max(0.0, cap));
    held.emplace_back(h, -1.0);
    milp.row(held, EQ, 0.0);
    // The backward of stage t, and each rebuild while it runs.
    const double bwd = kib(c.inner[t]) + (read(t) ? kib(c.boundary[t]) : 0.0) + kib(c.extra[t]);
    milp.row({{h, 1.0}}, LE, cap - bwd);
    // While stage j is rebuilt: before[j] = held in the phase of stages < j, after[j] = held entering of stages
    // j < k < t (running sums), stage j's inner bytes, and W: b_j present (held, or made by the rebuild).
    std::vector<int> before(t + 1), after(t + 1);
    for (std::size_t j = 0; j <= t; ++j) before[j] = milp.continuous(0.0, Milp::kInf), after[j] = milp.continuous(0.0, Milp::kInf);
    milp.row({{before[0], 1.0}}, EQ, 0.0);
    milp.row({{after[t], 1.0}}, EQ, 0.0);
    for (std::size_t j = 0; j < t; ++j) {
      milp.row({{before[j + 1], 1.0}, {before[j], -1.0}, {Ub[t][j], -kib(c.boundary[j])}, {Un[t][j], -kib(c.inner[j])}}, EQ, 0.0);
      if (j + 1 < t)
        milp.row({{after[j], 1.0}, {after[j + 1], -1.0}, {Sb[t][j + 1], -kib(c.boundary[j + 1])}, {Sn[t][j + 1], -kib(c.inner[j + 1])}}, EQ, 0.0);
      else
        milp.row({{after[j], 1.0}}, EQ, 0.0);
    }
    for (std::size_t j = 0; j <= t; ++j) {
      const int w = milp.unit();
      milp.row({{w, 1.0}, {R[t][j], -1.0}, {Z[t][j], 1.0}}, GE, 0.0);
      if (j < t) milp.row({{w, 1.0}, {Ub[t][j], -1.0}}, GE, 0.0);
      // Binding only where j is rebuilt: with R = 0, W = Ub and the left side is part of H, below the budget already.
      milp.row({{before[j], 1.0}, {after[j], 1.0}, {R[t][j], kib(c.inner[j])}, {w, kib(c.boundary[j])}}, LE, cap);
    }
  }
  res.variables = milp.columns();
  res.constraints = milp.rows();
  Milp::Options mo;
  mo.seconds = o.seconds;
  mo.max_nodes = o.max_nodes;
  const Milp::Result r = milp.solve(mo);
  res.seconds = r.seconds;
  res.nodes = r.nodes;
  const double start_flops = start ? chain_flops(c, *start, budget) : std::numeric_limits<double>::infinity();
  if (r.status == Milp::Status::infeasible && !std::isfinite(start_flops)) {
    res.status = ExactStatus::infeasible;
    return res;
  }
  bool solved = r.status == Milp::Status::optimal || r.status == Milp::Status::feasible;
  if (solved) {  // the solution as the model's evaluator sees it (it, not the solver's arithmetic, decides)
    ChainPoint p;
    auto val = [&](int j) { return r.x[static_cast<std::size_t>(j)] > 0.5; };
    p.rebuild.resize(m), p.held_boundary.resize(m), p.held_inner.resize(m);
    for (std::size_t t = 0; t < m; ++t)
      for (std::size_t j = 0; j <= t; ++j) {
        p.rebuild[t].push_back(val(R[t][j]));
        p.held_boundary[t].push_back(val(Sb[t][j]));
        p.held_inner[t].push_back(val(Sn[t][j]));
      }
    const double f = chain_flops(c, p, budget);
    solved = std::isfinite(f) && f <= r.objective * kGiga * (1 + 1e-6) + 1e-3;
  }
  const double bound = std::isfinite(r.bound) ? std::max(0.0, r.bound * kGiga) : 0.0;
  if (solved) {
    res.recompute_flops = std::max(0.0, r.objective * kGiga);
    res.status = r.status == Milp::Status::optimal ? ExactStatus::optimal : ExactStatus::feasible;
    res.lower_bound = res.status == ExactStatus::optimal ? res.recompute_flops : std::min(bound, res.recompute_flops);
    auto val = [&](int j) { return r.x[static_cast<std::size_t>(j)] > 0.5; };
    res.rebuild.assign(m, {});
    for (std::size_t t = 0; t < m; ++t)
      for (std::size_t j = 0; j <= t; ++j) res.rebuild[t].push_back(val(R[t][j]));
    for (std::size_t j = 0; j < m; ++j) {
      res.keep_boundary.push_back(val(Sb[m - 1][j]));
      res.keep_inner.push_back(val(Sn[m - 1][j]));
    }
  }
  // The start point (the DP's plan) where the search stopped above it or found nothing: never worse than it.
  if (std::isfinite(start_flops) && (!solved || start_flops < res.recompute_flops * (1 - 1e-9))) {
    if (!solved) res.lower_bound = std::min(bound, start_flops);
    res.recompute_flops = start_flops;
    res.rebuild = start->rebuild;
    res.keep_boundary = start->held_boundary[m - 1];
    res.keep_inner = start->held_inner[m - 1];
    res.status = res.lower_bound >= start_flops * (1 - 1e-9) ? ExactStatus::optimal : ExactStatus::feasible;
  } else if (!solved) {
    res.status = ExactStatus::no_solution;
    res.lower_bound = bound;
  }
  return res;
}

}  // namespace memplan::planner
