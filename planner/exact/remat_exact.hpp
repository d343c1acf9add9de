// Exact rematerialization over the forward stages: a Checkmate-style MILP (Jain et al. 2020) over the backward
// phases of the stage chain, solved with CBC (planner/exact/milp.hpp) when the build found it; a brute force for tests; the gap of the
// segment DP (optimal_segments, strategy `optimal`) to the optimum of this model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/remat_segments.hpp"

namespace memplan::planner {

// The stage chain as the MILP sees it (plain stages: no cheap recomputation, no partial options). Per stage i:
// `inner` its saved bytes but the boundary, `boundary` its boundary's bytes, `boundary_read` whether a backward
// op reads the boundary (else it is held only to rebuild stage i + 1), `extra` its backward bytes, `flops` its
// forward FLOPs, `boundary_flops` those of the op making its boundary (skipped by a rebuild while the boundary
// is held).
struct StageChain {
  std::vector<std::uint64_t> inner, boundary, extra;
  std::vector<bool> boundary_read;
  std::vector<double> flops, boundary_flops;
  std::size_t size() const noexcept { return inner.size(); }
};
StageChain stage_chain(const ForwardStages& s);

// The model. The backward runs in phases t = m-1 .. 0; phase t may rebuild any stages j <= t (in order, each
// from the boundary of j-1, held or rebuilt in the phase; stage 0 from the inputs), then runs stage t's backward,
// which needs stage t's inner bytes, its boundary if read, and the boundary of t-1 if read. Between phases any
// subset of what was held or rebuilt stays (what the forward kept is the choice entering phase m-1). A phase
// holds what it was entered with or passes on; its backward adds stage t's bytes and backward bytes, and a
// rebuild of stage j adds stage j's bytes while it runs. Cost: the FLOPs of every rebuild, less the boundary op
// of a stage rebuilt while its boundary is held. The segment DP's plans are points of this model (each stage
// rebuilt at most once, all of a segment together), so its optimum is never above theirs.
enum class ExactStatus : std::uint8_t { optimal, feasible, infeasible, no_solution, too_large, not_built };
const char* exact_status_name(ExactStatus s) noexcept;

struct ExactRematOptions {
  double seconds = 10.0;            // the solver's time limit (a cap: results differ between machines only past it)
  std::uint64_t max_nodes = 20000;  // branch-and-bound nodes: the deterministic limit
  std::size_t max_stages = 300;
  // Stop once the best plan is within this share of the bound (the status is then feasible, with that gap).
  double relative_gap = 0.0;
  // Plans a training graph can run (strategy `exact`, choice_from_exact): each stage rebuilt at most once, from
  // the boundary before it as the forward kept it or as the same phase rebuilds it.
  bool once = false;
};

struct ExactRematResult {
  ExactStatus status = ExactStatus::not_built;
  double recompute_flops = 0.0;  // the best plan found (optimal or feasible)
  double lower_bound = 0.0;      // no plan of the model recomputes less
  double seconds = 0.0;
  std::uint64_t nodes = 0;
  std::size_t variables = 0, constraints = 0;
  // rebuild[t][j]: stage j is rebuilt in phase t (j <= t); keep_boundary / keep_inner: per stage, kept by the forward.
  std::vector<std::vector<bool>> rebuild;
  std::vector<bool> keep_boundary, keep_inner;
};

// A point of the model: per phase t and stage j <= t, whether j is rebuilt in t, and whether its boundary and its
// inner bytes are held entering t.
struct ChainPoint {
  std::vector<std::vector<bool>> rebuild, held_boundary, held_inner;
};
// A segment plan as a point: recompute segment [r, e] rebuilt in phase e, its read end boundary kept from the
// forward (as the DP keeps it), everything else held from where it is made to its last need and no longer.
ChainPoint chain_point_of_segments(const StageChain& c, const SegmentPlan& plan);
// The recompute FLOPs of a point, infinity where it breaks a need or the budget.
double chain_flops(const StageChain& c, const ChainPoint& p, std::uint64_t budget);

// Whether this build has a MILP solver (CBC; CMake option MEMPLAN_CBC).
bool exact_remat_available() noexcept;
// The least recompute FLOPs of the model with every phase's bytes <= budget. Without CBC: not_built. `start`, a
// point within the budget (the DP's), is the solver's first incumbent: the result is never worse than it.
ExactRematResult exact_remat(const StageChain& c, std::uint64_t budget, const ExactRematOptions& o = {}, const ChainPoint* start = nullptr);
// The same optimum by dynamic programming over the held sets (exponential: at most 5 stages), for tests;
// infinity when no plan meets the budget.
double brute_force_remat(const StageChain& c, std::uint64_t budget);
// The recompute FLOPs of a segment plan in this model's terms (the plan of optimal_segments on the plain
// stages), infinity when it breaks the budget there.
double chain_flops_of_segments(const StageChain& c, const SegmentPlan& plan, std::uint64_t budget);

// A `once` result as per-tensor actions on `g` (s: the stages it was solved on): a stage's saved tensors and its
// boundary are kept where the forward keeps them, else recomputed in the group of the phase rebuilding them.
RematChoice choice_from_exact(const Graph& g, const ForwardStages& s, const ExactRematResult& r);

// The segment DP against the exact model at one budget.
struct RematGap {
  double dp_flops = 0.0;  // optimal_segments on the plain stages (infinity: no plan)
  ExactRematResult exact;
  double gap = 0.0;       // (dp_flops - exact.lower_bound) / dp_flops: the share of the DP's recompute the optimum may save
};
RematGap remat_gap(const ForwardStages& plain, std::uint64_t budget, const ExactRematOptions& o = {});

}  // namespace memplan::planner
