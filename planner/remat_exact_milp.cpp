// The exact remat model (remat_exact.hpp) as a MILP, solved by GLPK's branch and cut when the build found it.
#include <chrono>
#include <cmath>
#include <limits>

#include "planner/remat_exact.hpp"

#ifdef MEMPLAN_HAVE_GLPK
#include <glpk.h>
#endif

namespace memplan::planner {

#ifndef MEMPLAN_HAVE_GLPK

bool exact_remat_available() noexcept { return false; }

ExactRematResult exact_remat(const StageChain&, std::uint64_t, const ExactRematOptions&, const ChainPoint*) { return {}; }

#else

namespace {

// Bytes in KiB and FLOPs in GFLOP: GLPK works in doubles; the scales keep coefficients moderate.
double kib(std::uint64_t b) { return static_cast<double>(b) / 1024.0; }
constexpr double kGiga = 1e9;

class Milp {
 public:
  Milp() : p_(glp_create_prob()) { glp_set_obj_dir(p_, GLP_MIN); }
  ~Milp() { glp_delete_prob(p_); }
  Milp(const Milp&) = delete;
  Milp& operator=(const Milp&) = delete;

  int var(int kind, double lo, double hi, double cost) {
    const int j = glp_add_cols(p_, 1);
    glp_set_col_kind(p_, j, kind);
    glp_set_col_bnds(p_, j, lo == hi ? GLP_FX : GLP_DB, lo, hi);
    glp_set_obj_coef(p_, j, cost);
    return j;
  }
  int binary(double cost = 0.0) { return var(GLP_BV, 0.0, 1.0, cost); }
  int unit(double cost = 0.0) { return var(GLP_CV, 0.0, 1.0, cost); }
  // sum coef * var  (type GLP_UP: <= hi, GLP_LO: >= lo, GLP_FX: = lo)
  void row(const std::vector<std::pair<int, double>>& terms, int type, double bound) {
    const int i = glp_add_rows(p_, 1);
    glp_set_row_bnds(p_, i, type, bound, bound);
    idx_.assign(1, 0);
    val_.assign(1, 0.0);
    for (const auto& [j, v] : terms) idx_.push_back(j), val_.push_back(v);
    glp_set_mat_row(p_, i, static_cast<int>(terms.size()), idx_.data(), val_.data());
  }
  glp_prob* get() { return p_; }

 private:
  glp_prob* p_;
  std::vector<int> idx_;
  std::vector<double> val_;
};

struct Limits {
  std::uint64_t max_nodes = 0;
  std::uint64_t nodes = 0;
  double bound = -std::numeric_limits<double>::infinity();
};

void callback(glp_tree* tree, void* info) {
  auto* l = static_cast<Limits*>(info);
  if (glp_ios_reason(tree) != GLP_ISELECT) return;
  int active = 0, total = 0, seen = 0;
  glp_ios_tree_size(tree, &active, &total, &seen);
  l->nodes = static_cast<std::uint64_t>(seen);
  if (const int best = glp_ios_best_node(tree); best != 0) l->bound = glp_ios_node_bound(tree, best);
  if (l->max_nodes > 0 && l->nodes >= l->max_nodes) glp_ios_terminate(tree);
}

}  // namespace

bool exact_remat_available() noexcept { return true; }

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
  const auto start_time = std::chrono::steady_clock::now();
  glp_term_out(GLP_OFF);
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
      milp.row(terms, GLP_UP, 1.0);
      for (std::size_t t = j; t < m && j >= 1; ++t)  // from the forward's b_{j-1} or the same phase's rebuild
        milp.row({{R[t][j], 1.0}, {Sb[m - 1][j - 1], -1.0}, {R[t][j - 1], -1.0}}, GLP_UP, 0.0);
    }
  for (std::size_t t = 0; t < m; ++t) {
    // b_j from this phase: held, or made by a rebuild that runs its boundary op (R - Z).
    auto from_b = [&](std::size_t j) { return std::vector<std::pair<int, double>>{{Sb[t][j], 1.0}, {R[t][j], 1.0}, {Z[t][j], -1.0}}; };
    for (std::size_t j = 0; j <= t; ++j) {
      milp.row({{Z[t][j], 1.0}, {R[t][j], -1.0}}, GLP_UP, 0.0);
      if (j >= 1) {  // a rebuild of j reads b_{j-1}
        auto terms = from_b(j - 1);
        terms.emplace_back(R[t][j], -1.0);
        milp.row(terms, GLP_LO, 0.0);
      }
      if (t + 1 < m) {  // held entering t: held entering t+1 or made there
        milp.row({{Sb[t][j], 1.0}, {Sb[t + 1][j], -1.0}, {R[t + 1][j], -1.0}, {Z[t + 1][j], 1.0}}, GLP_UP, 0.0);
        milp.row({{Sn[t][j], 1.0}, {Sn[t + 1][j], -1.0}, {R[t + 1][j], -1.0}}, GLP_UP, 0.0);
      }
    }
    if (c.inner[t] > 0) milp.row({{Sn[t][t], 1.0}, {R[t][t], 1.0}}, GLP_LO, 1.0);
    if (read(t)) milp.row(from_b(t), GLP_LO, 1.0);
    if (t >= 1 && read(t - 1)) milp.row(from_b(t - 1), GLP_LO, 1.0);
    // Held in phase t (j < t): entering, passed on, and b_{t-1} made here for the backward.
    std::vector<std::pair<int, double>> held;
    for (std::size_t j = 0; j < t; ++j) {
      milp.row({{Ub[t][j], 1.0}, {Sb[t][j], -1.0}}, GLP_LO, 0.0);
      milp.row({{Ub[t][j], 1.0}, {Sb[t - 1][j], -1.0}}, GLP_LO, 0.0);
      milp.row({{Un[t][j], 1.0}, {Sn[t][j], -1.0}}, GLP_LO, 0.0);
      milp.row({{Un[t][j], 1.0}, {Sn[t - 1][j], -1.0}}, GLP_LO, 0.0);
      if (j + 1 == t && read(j)) milp.row({{Ub[t][j], 1.0}, {R[t][j], -1.0}, {Z[t][j], 1.0}}, GLP_LO, 0.0);
      if (c.boundary[j] > 0) held.emplace_back(Ub[t][j], kib(c.boundary[j]));
      if (c.inner[j] > 0) held.emplace_back(Un[t][j], kib(c.inner[j]));
    }
    const int h = milp.var(GLP_CV, 0.0, std::max(0.0, cap), 0.0);
    held.emplace_back(h, -1.0);
    milp.row(held, GLP_FX, 0.0);
    // The backward of stage t, and each rebuild while it runs.
    const double bwd = kib(c.inner[t]) + (read(t) ? kib(c.boundary[t]) : 0.0) + kib(c.extra[t]);
    milp.row({{h, 1.0}}, GLP_UP, cap - bwd);
    // While stage j is rebuilt: before[j] = held in the phase of stages < j, after[j] = held entering of stages
    // j < k < t (running sums), stage j's inner bytes, and W: b_j present (held, or made by the rebuild).
    std::vector<int> before(t + 1), after(t + 1);
    for (std::size_t j = 0; j <= t; ++j) before[j] = milp.var(GLP_CV, 0.0, 1e18, 0.0), after[j] = milp.var(GLP_CV, 0.0, 1e18, 0.0);
    milp.row({{before[0], 1.0}}, GLP_FX, 0.0);
    milp.row({{after[t], 1.0}}, GLP_FX, 0.0);
    for (std::size_t j = 0; j < t; ++j) {
      milp.row({{before[j + 1], 1.0}, {before[j], -1.0}, {Ub[t][j], -kib(c.boundary[j])}, {Un[t][j], -kib(c.inner[j])}}, GLP_FX, 0.0);
      if (j + 1 < t)
        milp.row({{after[j], 1.0}, {after[j + 1], -1.0}, {Sb[t][j + 1], -kib(c.boundary[j + 1])}, {Sn[t][j + 1], -kib(c.inner[j + 1])}}, GLP_FX, 0.0);
      else
        milp.row({{after[j], 1.0}}, GLP_FX, 0.0);
    }
    for (std::size_t j = 0; j <= t; ++j) {
      const int w = milp.unit();
      milp.row({{w, 1.0}, {R[t][j], -1.0}, {Z[t][j], 1.0}}, GLP_LO, 0.0);
      if (j < t) milp.row({{w, 1.0}, {Ub[t][j], -1.0}}, GLP_LO, 0.0);
      // Binding only where j is rebuilt: with R = 0, W = Ub and the left side is part of H, below the budget already.
      milp.row({{before[j], 1.0}, {after[j], 1.0}, {R[t][j], kib(c.inner[j])}, {w, kib(c.boundary[j])}}, GLP_UP, cap);
    }
  }
  res.variables = static_cast<std::size_t>(glp_get_num_cols(milp.get()));
  res.constraints = static_cast<std::size_t>(glp_get_num_rows(milp.get()));
  Limits lim;
  lim.max_nodes = o.max_nodes;
  glp_iocp parm;
  glp_init_iocp(&parm);
  parm.presolve = GLP_ON;
  parm.msg_lev = GLP_MSG_OFF;
  parm.tm_lim = static_cast<int>(std::min(o.seconds * 1000.0, 2.0e9));
  parm.cb_func = callback;
  parm.cb_info = &lim;
  if (o.cuts) parm.gmi_cuts = parm.mir_cuts = parm.cov_cuts = parm.clq_cuts = GLP_ON;
  if (o.pump) parm.fp_heur = GLP_ON;
  const int rc = glp_intopt(milp.get(), &parm);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
  res.nodes = lim.nodes;
  const int st = glp_mip_status(milp.get());
  const double start_flops = start ? chain_flops(c, *start, budget) : std::numeric_limits<double>::infinity();
  if ((rc == GLP_ENOPFS || rc == GLP_ENODFS || st == GLP_NOFEAS) && !std::isfinite(start_flops)) {
    res.status = ExactStatus::infeasible;
    return res;
  }
  const bool solved = st == GLP_OPT || st == GLP_FEAS;
  const double bound = std::isfinite(lim.bound) ? std::max(0.0, lim.bound * kGiga) : 0.0;
  if (solved) {
    res.recompute_flops = std::max(0.0, glp_mip_obj_val(milp.get()) * kGiga);
    res.status = st == GLP_OPT && rc == 0 ? ExactStatus::optimal : ExactStatus::feasible;
    res.lower_bound = res.status == ExactStatus::optimal ? res.recompute_flops : std::min(bound, res.recompute_flops);
    res.rebuild.assign(m, {});
    for (std::size_t t = 0; t < m; ++t)
      for (std::size_t j = 0; j <= t; ++j) res.rebuild[t].push_back(glp_mip_col_val(milp.get(), R[t][j]) > 0.5);
    for (std::size_t j = 0; j < m; ++j) {
      res.keep_boundary.push_back(glp_mip_col_val(milp.get(), Sb[m - 1][j]) > 0.5);
      res.keep_inner.push_back(glp_mip_col_val(milp.get(), Sn[m - 1][j]) > 0.5);
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

#endif

}  // namespace memplan::planner
