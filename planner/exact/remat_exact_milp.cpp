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
using Terms = std::vector<std::pair<int, double>>;

// The model's columns. Per phase t and stage j <= t: R rebuild, Sb/Sn held entering, Z boundary op skipped; Ub/Un
// (j < t) held in the phase.
struct RematColumns {
  std::vector<std::vector<int>> R, Sb, Sn, Z, Ub, Un;
};

// The model as rows over its columns. Columns and rows are added in one fixed order: the solver's path, and so the
// plan it stops at under a node limit, depends on it.
class RematModel {
 public:
  RematModel(const StageChain& c, double cap) : c_(c), m_(c.size()), cap_(cap) { add_columns(); }

  // Each stage rebuilt at most once, from the forward's b_{j-1} or the same phase's rebuild.
  void add_once_rows() {
    for (std::size_t j = 0; j < m_; ++j) {
      Terms terms;
      for (std::size_t t = j; t < m_; ++t) terms.emplace_back(v.R[t][j], 1.0);
      milp.row(terms, LE, 1.0);
      for (std::size_t t = j; t < m_ && j >= 1; ++t)
        milp.row({{v.R[t][j], 1.0}, {v.Sb[m_ - 1][j - 1], -1.0}, {v.R[t][j - 1], -1.0}}, LE, 0.0);
    }
  }

  void add_phase(std::size_t t) {
    add_rebuild_and_carry_rows(t);
    add_backward_needs(t);
    const int h = add_held_in_phase(t);
    // The backward of stage t on top of what the phase holds.
    const double bwd = kib(c_.inner[t]) + (read(t) ? kib(c_.boundary[t]) : 0.0) + kib(c_.extra[t]);
    milp.row({{h, 1.0}}, LE, cap_ - bwd);
    add_rebuild_peaks(t);
  }

  Milp milp;
  RematColumns v;

 private:
  bool read(std::size_t j) const { return c_.boundary_read[j] && c_.boundary[j] > 0; }
  // b_j present in phase t: held, or made by a rebuild that runs its boundary op (R - Z).
  Terms from_b(std::size_t t, std::size_t j) const { return {{v.Sb[t][j], 1.0}, {v.R[t][j], 1.0}, {v.Z[t][j], -1.0}}; }

  void add_columns() {
    v.R.resize(m_), v.Sb.resize(m_), v.Sn.resize(m_), v.Z.resize(m_), v.Ub.resize(m_), v.Un.resize(m_);
    for (std::size_t t = 0; t < m_; ++t)
      for (std::size_t j = 0; j <= t; ++j) {
        v.R[t].push_back(milp.binary(c_.flops[j] / kGiga));
        v.Sb[t].push_back(milp.binary());
        v.Sn[t].push_back(milp.binary());
        v.Z[t].push_back(milp.unit(-c_.boundary_flops[j] / kGiga));
        if (j < t) v.Ub[t].push_back(milp.unit()), v.Un[t].push_back(milp.unit());
      }
  }

  // A boundary op is skipped only by a rebuild, a rebuild of j reads b_{j-1}, and what is held entering t is held
  // entering t+1 or made there.
  void add_rebuild_and_carry_rows(std::size_t t) {
    for (std::size_t j = 0; j <= t; ++j) {
      milp.row({{v.Z[t][j], 1.0}, {v.R[t][j], -1.0}}, LE, 0.0);
      if (j >= 1) {
        auto terms = from_b(t, j - 1);
        terms.emplace_back(v.R[t][j], -1.0);
        milp.row(terms, GE, 0.0);
      }
      if (t + 1 < m_) {
        milp.row({{v.Sb[t][j], 1.0}, {v.Sb[t + 1][j], -1.0}, {v.R[t + 1][j], -1.0}, {v.Z[t + 1][j], 1.0}}, LE, 0.0);
        milp.row({{v.Sn[t][j], 1.0}, {v.Sn[t + 1][j], -1.0}, {v.R[t + 1][j], -1.0}}, LE, 0.0);
      }
    }
  }

  // Stage t's backward reads its inner bytes, its boundary if read and the boundary of t-1 if read.
  void add_backward_needs(std::size_t t) {
    if (c_.inner[t] > 0) milp.row({{v.Sn[t][t], 1.0}, {v.R[t][t], 1.0}}, GE, 1.0);
    if (read(t)) milp.row(from_b(t, t), GE, 1.0);
    if (t >= 1 && read(t - 1)) milp.row(from_b(t, t - 1), GE, 1.0);
  }

  // Held in phase t (j < t): entering, passed on, and b_{t-1} made here for the backward. Returns the column of the
  // phase's held KiB.
  int add_held_in_phase(std::size_t t) {
    Terms held;
    for (std::size_t j = 0; j < t; ++j) {
      milp.row({{v.Ub[t][j], 1.0}, {v.Sb[t][j], -1.0}}, GE, 0.0);
      milp.row({{v.Ub[t][j], 1.0}, {v.Sb[t - 1][j], -1.0}}, GE, 0.0);
      milp.row({{v.Un[t][j], 1.0}, {v.Sn[t][j], -1.0}}, GE, 0.0);
      milp.row({{v.Un[t][j], 1.0}, {v.Sn[t - 1][j], -1.0}}, GE, 0.0);
      if (j + 1 == t && read(j)) milp.row({{v.Ub[t][j], 1.0}, {v.R[t][j], -1.0}, {v.Z[t][j], 1.0}}, GE, 0.0);
      if (c_.boundary[j] > 0) held.emplace_back(v.Ub[t][j], kib(c_.boundary[j]));
      if (c_.inner[j] > 0) held.emplace_back(v.Un[t][j], kib(c_.inner[j]));
    }
    const int h = milp.continuous(0.0, std::max(0.0, cap_));
    held.emplace_back(h, -1.0);
    milp.row(held, EQ, 0.0);
    return h;
  }

  // While stage j is rebuilt: before[j] = held in the phase of stages < j, after[j] = held entering of stages
  // j < k < t (running sums), stage j's inner bytes, and W: b_j present (held, or made by the rebuild).
  void add_rebuild_peaks(std::size_t t) {
    std::vector<int> before(t + 1), after(t + 1);
    for (std::size_t j = 0; j <= t; ++j)
      before[j] = milp.continuous(0.0, Milp::kInf), after[j] = milp.continuous(0.0, Milp::kInf);
    milp.row({{before[0], 1.0}}, EQ, 0.0);
    milp.row({{after[t], 1.0}}, EQ, 0.0);
    for (std::size_t j = 0; j < t; ++j) {
      milp.row({{before[j + 1], 1.0}, {before[j], -1.0}, {v.Ub[t][j], -kib(c_.boundary[j])}, {v.Un[t][j], -kib(c_.inner[j])}}, EQ,
               0.0);
      if (j + 1 < t)
        milp.row({{after[j], 1.0},
                  {after[j + 1], -1.0},
                  {v.Sb[t][j + 1], -kib(c_.boundary[j + 1])},
                  {v.Sn[t][j + 1], -kib(c_.inner[j + 1])}},
                 EQ, 0.0);
      else
        milp.row({{after[j], 1.0}}, EQ, 0.0);
    }
    for (std::size_t j = 0; j <= t; ++j) {
      const int w = milp.unit();
      milp.row({{w, 1.0}, {v.R[t][j], -1.0}, {v.Z[t][j], 1.0}}, GE, 0.0);
      if (j < t) milp.row({{w, 1.0}, {v.Ub[t][j], -1.0}}, GE, 0.0);
      // Binding only where j is rebuilt: with R = 0, W = Ub and the left side is part of H, below the budget already.
      milp.row({{before[j], 1.0}, {after[j], 1.0}, {v.R[t][j], kib(c_.inner[j])}, {w, kib(c_.boundary[j])}}, LE, cap_);
    }
  }

  const StageChain& c_;
  std::size_t m_;
  double cap_;
};

// The solver's solution as a point of the model.
ChainPoint point_of(const Milp::Result& r, const RematColumns& v, std::size_t m) {
  auto val = [&](int j) { return r.x[static_cast<std::size_t>(j)] > 0.5; };
  ChainPoint p;
  p.rebuild.resize(m), p.held_boundary.resize(m), p.held_inner.resize(m);
  for (std::size_t t = 0; t < m; ++t)
    for (std::size_t j = 0; j <= t; ++j) {
      p.rebuild[t].push_back(val(v.R[t][j]));
      p.held_boundary[t].push_back(val(v.Sb[t][j]));
      p.held_inner[t].push_back(val(v.Sn[t][j]));
    }
  return p;
}

// Whether the model's evaluator accepts the solver's solution at its objective (it, not the solver's arithmetic,
// decides).
bool solution_holds(const StageChain& c, std::uint64_t budget, const Milp::Result& r, const ChainPoint& p) {
  const double f = chain_flops(c, p, budget);
  return std::isfinite(f) && f <= r.objective * kGiga * (1 + 1e-6) + 1e-3;
}

void take_solution(ExactRematResult& res, const Milp::Result& r, const ChainPoint& p, double bound) {
  const std::size_t m = p.rebuild.size();
  res.recompute_flops = std::max(0.0, r.objective * kGiga);
  res.status = r.status == Milp::Status::optimal ? ExactStatus::optimal : ExactStatus::feasible;
  res.lower_bound = res.status == ExactStatus::optimal ? res.recompute_flops : std::min(bound, res.recompute_flops);
  res.rebuild = p.rebuild;
  for (std::size_t j = 0; j < m; ++j) {
    res.keep_boundary.push_back(p.held_boundary[m - 1][j]);
    res.keep_inner.push_back(p.held_inner[m - 1][j]);
  }
}

// The start point (the DP's plan) where the search stopped above it or found nothing: never worse than it.
void take_start(ExactRematResult& res, const ChainPoint& start, double start_flops, bool solved, double bound) {
  const std::size_t m = start.rebuild.size();
  if (!solved) res.lower_bound = std::min(bound, start_flops);
  res.recompute_flops = start_flops;
  res.rebuild = start.rebuild;
  res.keep_boundary = start.held_boundary[m - 1];
  res.keep_inner = start.held_inner[m - 1];
  res.status = res.lower_bound >= start_flops * (1 - 1e-9) ? ExactStatus::optimal : ExactStatus::feasible;
}
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
  RematModel model(c, kib(budget));
  if (o.once) model.add_once_rows();
  for (std::size_t t = 0; t < m; ++t) model.add_phase(t);
  res.variables = model.milp.columns();
  res.constraints = model.milp.rows();
  Milp::Options mo;
  mo.seconds = o.seconds;
  mo.max_nodes = o.max_nodes;
  const Milp::Result r = model.milp.solve(mo);
  res.seconds = r.seconds;
  res.nodes = r.nodes;
  const double start_flops = start ? chain_flops(c, *start, budget) : std::numeric_limits<double>::infinity();
  if (r.status == Milp::Status::infeasible && !std::isfinite(start_flops)) {
    res.status = ExactStatus::infeasible;
    return res;
  }
  const bool has_x = r.status == Milp::Status::optimal || r.status == Milp::Status::feasible;
  const ChainPoint p = has_x ? point_of(r, model.v, m) : ChainPoint{};
  const bool solved = has_x && solution_holds(c, budget, r, p);
  const double bound = std::isfinite(r.bound) ? std::max(0.0, r.bound * kGiga) : 0.0;
  if (solved) take_solution(res, r, p, bound);
  if (std::isfinite(start_flops) && (!solved || start_flops < res.recompute_flops * (1 - 1e-9))) {
    take_start(res, *start, start_flops, solved, bound);
  } else if (!solved) {
    res.status = ExactStatus::no_solution;
    res.lower_bound = bound;
  }
  return res;
}

}  // namespace memplan::planner
