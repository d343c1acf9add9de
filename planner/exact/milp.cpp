// The neutral MILP (milp.hpp) and its solve through COIN-OR CBC's C interface.
#include "planner/exact/milp.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#ifdef MEMPLAN_HAVE_CBC
#include <Cbc_C_Interface.h>
#endif

namespace memplan::planner {

int Milp::var(double lo, double hi, double cost, bool integer) {
  lo_.push_back(lo);
  hi_.push_back(hi);
  cost_.push_back(cost);
  integer_.push_back(integer);
  return static_cast<int>(cost_.size() - 1);
}

void Milp::row(const std::vector<std::pair<int, double>>& terms, Sense sense, double bound) {
  const int r = static_cast<int>(row_lo_.size());
  row_lo_.push_back(sense == Sense::le ? -kInf : bound);
  row_hi_.push_back(sense == Sense::ge ? kInf : bound);
  for (const auto& [j, v] : terms)
    if (v != 0.0) entries_.push_back({r, j, v});
}

bool Milp::feasible(const std::vector<double>& x, double tol) const {
  if (x.size() != cost_.size()) return false;
  for (std::size_t j = 0; j < x.size(); ++j) {
    if (x[j] < lo_[j] - tol || x[j] > hi_[j] + tol) return false;
    if (integer_[j] && std::abs(x[j] - std::round(x[j])) > tol) return false;
  }
  std::vector<double> act(row_lo_.size(), 0.0);
  for (const Entry& e : entries_) act[static_cast<std::size_t>(e.row)] += e.v * x[static_cast<std::size_t>(e.col)];
  for (std::size_t r = 0; r < act.size(); ++r) {
    const double scale = tol * std::max(1.0, std::max(std::abs(row_lo_[r]) == kInf ? 0.0 : std::abs(row_lo_[r]),
                                                      std::abs(row_hi_[r]) == kInf ? 0.0 : std::abs(row_hi_[r])));
    if (act[r] < row_lo_[r] - scale || act[r] > row_hi_[r] + scale) return false;
  }
  return true;
}

double Milp::objective(const std::vector<double>& x) const {
  double v = 0.0;
  for (std::size_t j = 0; j < cost_.size() && j < x.size(); ++j) v += cost_[j] * x[j];
  return v;
}

#ifndef MEMPLAN_HAVE_CBC

bool Milp::available() noexcept { return false; }
Milp::Result Milp::solve(const Options&, const std::vector<double>*) const { return {}; }

#else

bool Milp::available() noexcept { return true; }

Milp::Result Milp::solve(const Options& o, const std::vector<double>* start) const {
  const auto t0 = std::chrono::steady_clock::now();
  Result res;
  const int n = static_cast<int>(cost_.size());
  // Column-major matrix for Cbc_loadProblem.
  std::vector<CoinBigIndex> col_start(cost_.size() + 1, 0);
  for (const Entry& e : entries_) ++col_start[static_cast<std::size_t>(e.col) + 1];
  for (std::size_t j = 0; j < cost_.size(); ++j) col_start[j + 1] += col_start[j];
  std::vector<int> index(entries_.size());
  std::vector<double> value(entries_.size());
  std::vector<CoinBigIndex> fill(col_start.begin(), col_start.end() - 1);
  for (const Entry& e : entries_) {
    const auto k = static_cast<std::size_t>(fill[static_cast<std::size_t>(e.col)]++);
    index[k] = e.row;
    value[k] = e.v;
  }
  // CBC's infinity is COIN_DBL_MAX.
  auto finite = [](std::vector<double> v) {
    for (double& d : v)
      if (std::isinf(d)) d = d > 0 ? 1e300 : -1e300;
    return v;
  };
  const std::vector<double> lo = finite(lo_), hi = finite(hi_), rlo = finite(row_lo_), rhi = finite(row_hi_);
  Cbc_Model* m = Cbc_newModel();
  Cbc_loadProblem(m, n, static_cast<int>(row_lo_.size()), col_start.data(), index.data(), value.data(), lo.data(), hi.data(),
                  cost_.data(), rlo.data(), rhi.data());
  for (int j = 0; j < n; ++j)
    if (integer_[static_cast<std::size_t>(j)]) Cbc_setInteger(m, j);
  Cbc_setLogLevel(m, 0);
  Cbc_setMaximumSeconds(m, o.seconds);
  Cbc_setMaximumNodes(m, static_cast<int>(std::min<std::uint64_t>(o.max_nodes, 1u << 30)));
  Cbc_setAllowableGap(m, 1e-9);
  Cbc_setAllowableFractionGap(m, std::max(1e-9, o.relative_gap));
  if (start && start->size() == cost_.size()) {
    std::vector<int> idx;
    std::vector<double> val;
    for (int j = 0; j < n; ++j)
      if (integer_[static_cast<std::size_t>(j)]) idx.push_back(j), val.push_back(std::round((*start)[static_cast<std::size_t>(j)]));
    Cbc_setMIPStartI(m, static_cast<int>(idx.size()), idx.data(), val.data());
  }
  Cbc_solve(m);
  res.nodes = static_cast<std::uint64_t>(std::max(0, Cbc_getNodeCount(m)));
  const double* sol = Cbc_bestSolution(m);
  std::vector<double> x;
  if (sol) x.assign(sol, sol + n);
  const bool have = sol && feasible(x, 1e-5);
  const bool proven = Cbc_isProvenOptimal(m) != 0;
  const bool infeasible = Cbc_isProvenInfeasible(m) != 0;
  double bound = Cbc_getBestPossibleObjValue(m);
  Cbc_deleteModel(m);
  if (have) {
    res.x = std::move(x);
    res.objective = objective(res.x);
    // Proven within the allowed gap is optimal only where the bound meets the solution.
    res.bound = std::min(std::isfinite(bound) && bound < 1e299 ? bound : -kInf, res.objective);
    if (proven && o.relative_gap <= 1e-9) res.bound = res.objective;
    res.status = res.bound >= res.objective - 1e-9 * std::max(1.0, std::abs(res.objective)) ? Status::optimal : Status::feasible;
  }
  if (res.x.empty()) {
    res.status = infeasible ? Status::infeasible : Status::no_solution;
    res.bound = std::isfinite(bound) && bound < 1e299 ? bound : -kInf;
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

#endif

}  // namespace memplan::planner
