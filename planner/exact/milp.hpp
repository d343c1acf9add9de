// A mixed-integer linear program in neutral form, solved by COIN-OR CBC (Debian's coinor-libcbc-dev) when the build
// found it (CMake MEMPLAN_CBC). The exact remat models (remat_exact.hpp, remat_exact_segments.hpp) are built here.
#pragma once

#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace memplan::planner {

class Milp {
 public:
  static constexpr double kInf = std::numeric_limits<double>::infinity();
  enum class Sense : std::uint8_t { le, ge, eq };

  int var(double lo, double hi, double cost, bool integer);
  int binary(double cost = 0.0) { return var(0.0, 1.0, cost, true); }
  int unit(double cost = 0.0) { return var(0.0, 1.0, cost, false); }
  int continuous(double lo, double hi, double cost = 0.0) { return var(lo, hi, cost, false); }
  void set_cost(int j, double cost) { cost_[static_cast<std::size_t>(j)] = cost; }
  // sum coef * var  <= / >= / == bound (zero coefficients dropped)
  void row(const std::vector<std::pair<int, double>>& terms, Sense sense, double bound);
  std::size_t columns() const noexcept { return cost_.size(); }
  std::size_t rows() const noexcept { return row_lo_.size(); }

  struct Options {
    double seconds = 10.0;            // a cap only: results differ between machines past it
    std::uint64_t max_nodes = 20000;  // branch-and-bound nodes: the deterministic limit
    double relative_gap = 0.0;        // stop once the best solution is within this share of the bound
  };
  enum class Status : std::uint8_t { optimal, feasible, infeasible, no_solution, not_built };
  struct Result {
    Status status = Status::not_built;
    double objective = kInf;  // the best solution's (optimal or feasible)
    double bound = -kInf;     // no solution is below it (-infinity: the solver gave none)
    std::vector<double> x;    // the best solution
    std::uint64_t nodes = 0;
    double seconds = 0.0;
  };
  // `start`: a value per column, of which the integer columns' are handed to the solver as its first incumbent
  // (it fills the continuous ones; an infeasible start is ignored). Callers keep their start where the result is
  // worse or missing.
  Result solve(const Options& o, const std::vector<double>* start = nullptr) const;
  // Whether `x` meets every bound and row within `tol`, and its objective.
  bool feasible(const std::vector<double>& x, double tol = 1e-6) const;
  double objective(const std::vector<double>& x) const;

  static bool available() noexcept;

 private:
  std::vector<double> lo_, hi_, cost_;
  std::vector<bool> integer_;
  std::vector<double> row_lo_, row_hi_;
  struct Entry {
    int row, col;
    double v;
  };
  std::vector<Entry> entries_;
};

}  // namespace memplan::planner
