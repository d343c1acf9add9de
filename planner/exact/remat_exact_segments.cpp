// Exact remat with swap over the forward stages (remat_exact_segments.hpp): the model, its evaluator, a brute force
// and the MILP.
#include "planner/exact/remat_exact_segments.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "analysis/graph.hpp"
#include "planner/exact/milp.hpp"

namespace memplan::planner {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();

void check_sizes(const SwapStageModel& m) {
  const std::size_t n = m.size();
  for (std::size_t k :
       {m.boundary.size(), m.moved.size(), m.input.size(), m.extra.size(), m.seconds.size(), m.boundary_seconds.size(),
        m.out_seconds.size(), m.forward_after.size(), m.in_seconds.size(), m.backward_after.size(), m.window.size()})
    if (k != n) fail(ErrorKind::usage, "swap stage model: per-stage vectors of different lengths");
}

}  // namespace

SwapStageModel swap_stage_model(const ForwardStages& s) {
  SwapStageModel m;
  const std::size_t n = s.size();
  for (std::size_t i = 0; i < n; ++i) {
    m.held.push_back(s.held_total(i));
    m.boundary.push_back(s.held_boundary(i));
    m.moved.push_back(0);
    m.input.push_back(s.input_loose(i));
    m.extra.push_back(s.extra_bytes(i));
    m.seconds.push_back(s.flops[i]);
    m.boundary_seconds.push_back(s.boundary_flops[i]);
    m.out_seconds.push_back(0.0);
    m.in_seconds.push_back(0.0);
  }
  m.forward_after.assign(n, 0.0);
  for (std::size_t i = n; i-- > 1;) m.forward_after[i - 1] = m.forward_after[i] + m.seconds[i];
  m.backward_after.assign(n, 0.0);
  m.window.assign(n, 1);
  return m;
}

namespace {

// Backward seconds per stage: an op after the forward counts for the latest stage among the forward activations it
// reads, or for the stage of the op before it.
std::vector<double> backward_seconds(const Graph& g, const std::vector<OpId>& schedule, const ForwardStages& s,
                                     const std::vector<double>& op_seconds) {
  const std::size_t n = s.size();
  std::vector<double> backward(n, 0.0);
  auto latest_stage_read = [&](const analysis::Op& op) {
    std::uint32_t st = kNone;
    for (TensorId t : op.inputs) {
      if (t == analysis::kNoTensor || g.tensors[t].producer == analysis::kNoOp) continue;
      const std::uint32_t k = s.stage_of_op[g.tensors[t].producer];
      if (k != kNone && (st == kNone || k > st)) st = k;
    }
    return st;
  };
  std::uint32_t last = kNone;
  for (OpId o : schedule) {
    const analysis::Op& op = g.ops[o];
    if (op.phase == analysis::Phase::forward || op.phase == analysis::Phase::optimizer) continue;
    std::uint32_t st = latest_stage_read(op);
    if (st == kNone) st = last;
    if (st == kNone || st >= n) continue;
    backward[st] += op_seconds[o];
    last = st;
  }
  return backward;
}

// Which stages can swap over `links`: a stage with saved bytes whose copy back fits in the backward of the stages
// above it (its window, as few stages as cover the copy).
void set_swap_windows(SwapStageModel& m, const ForwardStages& s, const std::vector<double>& backward, SwapLinks links) {
  const std::size_t n = s.size();
  const bool links_ok = links.host_to_device_bytes_per_s > 0.0 && links.device_to_host_bytes_per_s > 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto bytes = static_cast<double>(s.saved_bytes[i]);
    m.moved[i] = 0;
    if (!links_ok || s.saved_bytes[i] == 0 || i + 1 >= n) continue;
    m.in_seconds[i] = bytes / links.host_to_device_bytes_per_s;
    m.out_seconds[i] = bytes / links.device_to_host_bytes_per_s;
    double covered = 0.0;
    std::uint32_t w = 0;
    while (i + w + 1 < n && covered < m.in_seconds[i]) covered += backward[i + ++w];
    if (covered < m.in_seconds[i]) continue;  // cannot hide before the backward starts
    m.window[i] = w;
    m.moved[i] = s.saved_bytes[i];
  }
}

}  // namespace

SwapStageModel swap_stage_model(const Graph& g, const std::vector<OpId>& schedule, const ForwardStages& s,
                                const std::vector<double>& op_seconds, SwapLinks links) {
  SwapStageModel m = swap_stage_model(s);
  const std::size_t n = s.size();
  std::fill(m.seconds.begin(), m.seconds.end(), 0.0);
  for (OpId o : s.forward)
    if (const std::uint32_t st = s.stage_of_op[o]; st != kNone && st < n) m.seconds[st] += op_seconds[o];
  for (std::size_t i = 0; i < n; ++i) {
    const TensorId b = s.boundary[i];
    m.boundary_seconds[i] =
        b != analysis::kNoTensor && s.boundary_flops[i] > 0.0 ? std::min(m.seconds[i], op_seconds[g.tensors[b].producer]) : 0.0;
  }
  const std::vector<double> backward = backward_seconds(g, schedule, s, op_seconds);
  std::fill(m.forward_after.begin(), m.forward_after.end(), 0.0);
  for (std::size_t i = n; i-- > 1;) m.forward_after[i - 1] = m.forward_after[i] + m.seconds[i];
  for (std::size_t i = n; i-- > 1;) m.backward_after[i - 1] = m.backward_after[i] + backward[i];
  set_swap_windows(m, s, backward, links);
  return m;
}

SwapPlanCost swap_plan_cost(const SwapStageModel& m, const SwapSegmentPlan& p, std::uint64_t budget) {
  check_sizes(m);
  SwapPlanCost c;
  const std::size_t n = m.size();
  auto broken = [&] {
    c.cost = kInf;
    return c;
  };
  if (p.swapped.size() != n) return broken();
  std::uint32_t next = 0;
  for (const Segment& seg : p.segments) {
    if (seg.first != next || seg.last < seg.first || seg.last >= n || seg.option != 0) return broken();
    next = seg.last + 1;
  }
  if (next != n) return broken();
  std::uint64_t below = 0;                           // what the stages below keep
  auto back = [&](std::size_t i) -> std::uint64_t {  // swaps below i whose copy back spans row i
    std::uint64_t b = 0;
    for (std::size_t j = 0; j < i; ++j)
      if (p.swapped[j] && j + m.window[j] >= i) b += m.moved[j];
    return b;
  };
  auto row = [&](std::uint64_t bytes) { c.peak = std::max(c.peak, bytes); };
  for (const Segment& seg : p.segments) {
    if (seg.recompute) {
      std::uint64_t run = m.input[seg.first];
      for (std::uint32_t i = seg.first; i <= seg.last; ++i) {
        if (p.swapped[i]) return broken();
        run += m.held[i];
        row(below + run + m.extra[i] + back(i));
        c.recompute_seconds += m.seconds[i];
      }
      c.recompute_seconds -= m.boundary_seconds[seg.last];
      below += m.input[seg.first] + m.boundary[seg.last];
      continue;
    }
    for (std::uint32_t i = seg.first; i <= seg.last; ++i) {
      if (p.swapped[i] && !m.can_swap(i)) return broken();
      row(below + m.held[i] + m.extra[i] + back(i));
      below += p.swapped[i] ? m.boundary[i] : m.held[i];
      if (p.swapped[i]) c.swap_seconds += m.in_seconds[i], ++c.swaps;
    }
  }
  double out = 0.0, in = 0.0;  // copies of stages >= i: out within the forward after i, back before i's backward
  for (std::size_t i = n; i-- > 0;) {
    if (p.swapped[i]) out += m.out_seconds[i], in += m.in_seconds[i];
    if (out > m.forward_after[i] * (1 + 1e-9) + 1e-15 || in > m.backward_after[i] * (1 + 1e-9) + 1e-15) return broken();
  }
  if (c.peak > budget) return broken();
  c.cost = c.recompute_seconds + m.swap_weight * c.swap_seconds;
  return c;
}

SwapSegmentPlan swap_plan_of_segments(const SwapStageModel& m, const SegmentPlan& plan) {
  SwapSegmentPlan p;
  p.swapped.assign(m.size(), false);
  for (const Segment& seg : plan) {
    std::uint64_t total = 0;
    for (std::uint32_t i = seg.first; i <= seg.last; ++i) total += m.held[i];
    if (seg.recompute && total > m.boundary[seg.last]) {
      p.segments.push_back({seg.first, seg.last, true, 0});
      continue;
    }
    for (std::uint32_t i = seg.first; i <= seg.last; ++i) p.segments.push_back({i, i, false, 0});
  }
  return p;
}

SwapSegmentPlan brute_force_swap_plan(const SwapStageModel& m, std::uint64_t budget) {
  const std::size_t n = m.size();
  if (n > 9) fail(ErrorKind::usage, "the swap remat brute force takes at most 9 stages, not " + std::to_string(n));
  SwapSegmentPlan cur, best;
  cur.swapped.assign(n, false);
  double best_cost = kInf;
  auto go = [&](auto&& self, std::uint32_t i) -> void {
    if (i == n) {
      const double c = swap_plan_cost(m, cur, budget).cost;
      if (c < best_cost) best_cost = c, best = cur;
      return;
    }
    for (int mode = 0; mode < 2; ++mode) {  // kept, swapped
      if (mode == 1 && !m.can_swap(i)) continue;
      cur.swapped[i] = mode == 1;
      cur.segments.push_back({i, i, false, 0});
      self(self, i + 1);
      cur.segments.pop_back();
      cur.swapped[i] = false;
    }
    for (std::uint32_t p = i; p < n; ++p) {
      cur.segments.push_back({i, p, true, 0});
      self(self, p + 1);
      cur.segments.pop_back();
    }
  };
  go(go, 0);
  if (!std::isfinite(best_cost)) return {};
  return best;
}

namespace {

// The 0/1 columns of the swap-and-recompute MILP: per stage kept (K) or swapped (S, -1 where it cannot swap), and
// y[r][i - r]: stage i in the recompute segment that starts at r.
struct SwapColumns {
  const std::vector<int>& K;
  const std::vector<int>& S;
  const std::vector<std::vector<int>>& y;
  std::size_t size() const { return K.size(); }
  int Y(std::size_t r, std::size_t i) const { return i >= r && i - r < y[r].size() ? y[r][i - r] : -1; }
};

// `start` as a point of the MILP (its columns set to 1), empty when one of its stages has no column.
std::vector<double> start_point(const SwapSegmentPlan& start, const SwapColumns& c, int columns) {
  std::vector<double> x0(static_cast<std::size_t>(columns), 0.0);
  for (const Segment& seg : start.segments)
    for (std::uint32_t i = seg.first; i <= seg.last; ++i) {
      const int col = seg.recompute ? c.Y(seg.first, i) : start.swapped[i] ? c.S[i] : c.K[i];
      if (col < 0) return {};
      x0[static_cast<std::size_t>(col)] = 1.0;
    }
  return x0;
}

// The solver's point as a plan: stages kept or swapped one by one, recompute segments whole; nullopt when the
// columns set do not form contiguous segments.
std::optional<SwapSegmentPlan> decode(const SwapColumns& c, const std::vector<double>& x) {
  const std::size_t n = c.size();
  SwapSegmentPlan p;
  p.swapped.assign(n, false);
  auto val = [&](int col) { return col >= 0 && x[static_cast<std::size_t>(col)] > 0.5; };
  std::size_t i = 0;
  while (i < n) {
    if (val(c.K[i]) || val(c.S[i])) {
      p.swapped[i] = val(c.S[i]);
      p.segments.push_back({static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i), false, 0});
      ++i;
      continue;
    }
    std::size_t rr = n;
    for (std::size_t q = 0; q <= i; ++q)
      if (val(c.Y(q, i))) rr = q;
    if (rr != i) return std::nullopt;
    std::size_t e = i;
    while (e + 1 < n && val(c.Y(rr, e + 1))) ++e;
    p.segments.push_back({static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(e), true, 0});
    i = e + 1;
  }
  return p;
}

double kib(std::uint64_t b) { return static_cast<double>(b) / 1024.0; }

// Coefficients by column, summed where a column appears twice (a missing column, -1, is dropped).
using Coefs = std::map<int, double>;
void add(Coefs& t, int col, double v) {
  if (col >= 0) t[col] += v;
}

// The MILP of exact_swap_remat (remat_exact_segments.hpp). Columns and rows are added in one fixed order: the
// solver's path, and so the plan it stops at under a node limit, depends on it.
class SwapRematModel {
 public:
  SwapRematModel(const SwapStageModel& m, std::uint64_t budget) : m_(m), n_(m.size()), budget_(budget), cap_(kib(budget)) {
    // Seconds scaled so the longest of a stage's forward and copies is 1000: moderate coefficients.
    double longest = 0.0;
    for (std::size_t i = 0; i < n_; ++i) longest = std::max({longest, m.seconds[i], m.in_seconds[i], m.out_seconds[i]});
    ms_ = longest > 0.0 ? 1e3 / longest : 1.0;
    prefix_.assign(n_ + 1, 0);
    for (std::size_t i = 0; i < n_; ++i) prefix_[i + 1] = prefix_[i] + m.held[i];
    add_mode_columns();
  }

  void add_rows() {
    std::vector<int> Q(n_ + 1);  // Q[i]: what the stages below i keep (KiB)
    for (std::size_t i = 0; i <= n_; ++i) Q[i] = milp.continuous(0.0, i == 0 ? 0.0 : Milp::kInf);
    for (std::size_t i = 0; i < n_; ++i) {
      add_kept_below(Q, i);
      add_one_mode(i);
      add_backward_row(Q, i);
    }
    add_link_windows();
    for (const auto& [col, v] : objective()) milp.set_cost(col, v);
  }

  SwapColumns columns() const { return {K_, S_, y_}; }
  // Solver units (scaled milliseconds) per second.
  double ms_per_second() const { return ms_; }

  Milp milp;

 private:
  int Y(std::size_t r, std::size_t i) const { return i >= r && i - r < y_[r].size() ? y_[r][i - r] : -1; }
  void emit(const Coefs& t, Milp::Sense s, double b) { milp.row(std::vector<std::pair<int, double>>(t.begin(), t.end()), s, b); }

  void add_mode_columns() {
    K_.assign(n_, -1), S_.assign(n_, -1), y_.assign(n_, {});
    for (std::size_t i = 0; i < n_; ++i) {
      K_[i] = milp.binary();
      if (m_.can_swap(i)) S_[i] = milp.binary(ms_ * m_.swap_weight * m_.in_seconds[i]);
    }
    for (std::size_t r = 0; r < n_; ++r)
      for (std::size_t i = r; i < n_; ++i) {
        // A row of the segment alone: what it holds up to i, its loose input and i's backward bytes.
        if (prefix_[i + 1] - prefix_[r] + m_.input[r] + m_.extra[i] > budget_) break;
        y_[r].push_back(milp.binary());
      }
  }

  // The rebuild seconds of segment stages, less the boundary op of each segment's end.
  Coefs objective() const {
    Coefs obj;
    for (std::size_t r = 0; r < n_; ++r)
      for (std::size_t i = r; i < r + y_[r].size(); ++i) {
        add(obj, Y(r, i), ms_ * m_.seconds[i]);
        add(obj, Y(r, i), -ms_ * m_.boundary_seconds[i]);     // ends at i ...
        add(obj, Y(r, i + 1), ms_ * m_.boundary_seconds[i]);  // ... unless it goes on
      }
    return obj;
  }

  // Q[i + 1] = Q[i] + what stage i keeps: all of it kept, its boundary swapped, a segment's loose input where it
  // starts and its end boundary where it ends.
  void add_kept_below(const std::vector<int>& Q, std::size_t i) {
    Coefs t;
    add(t, Q[i + 1], 1.0);
    add(t, Q[i], -1.0);
    add(t, K_[i], -kib(m_.held[i]));
    add(t, S_[i], -kib(m_.boundary[i]));
    add(t, Y(i, i), -kib(m_.input[i]));
    for (std::size_t r = 0; r <= i; ++r) {
      add(t, Y(r, i), -kib(m_.boundary[i]));
      add(t, Y(r, i + 1), kib(m_.boundary[i]));
    }
    emit(t, Milp::Sense::eq, 0.0);
  }

  // One mode per stage; segments contiguous.
  void add_one_mode(std::size_t i) {
    Coefs part;
    add(part, K_[i], 1.0);
    add(part, S_[i], 1.0);
    for (std::size_t r = 0; r <= i; ++r) add(part, Y(r, i), 1.0);
    emit(part, Milp::Sense::eq, 1.0);
    for (std::size_t r = 0; r < i; ++r)
      if (Y(r, i) >= 0) emit({{Y(r, i), 1.0}, {Y(r, i - 1), -1.0}}, Milp::Sense::le, 0.0);
  }

  // Row i: what the stages below keep, stage i's own bytes (a segment's stages r..i and its loose input), the swaps
  // below whose copy back spans it, and its backward bytes.
  void add_backward_row(const std::vector<int>& Q, std::size_t i) {
    Coefs rw;
    add(rw, Q[i], 1.0);
    add(rw, Y(i, i), kib(m_.input[i]));
    for (std::size_t r = 0; r <= i; ++r) add(rw, Y(r, i), kib(prefix_[i + 1] - prefix_[r]));
    add(rw, K_[i], kib(m_.held[i]));
    add(rw, S_[i], kib(m_.held[i]));
    for (std::size_t j = 0; j < i; ++j)
      if (S_[j] >= 0 && j + m_.window[j] >= i) add(rw, S_[j], kib(m_.moved[j]));
    emit(rw, Milp::Sense::le, cap_ - kib(m_.extra[i]));
  }

  // The links: copies out of stages >= i within the forward after stage i, copies back before its backward (prefix
  // sums, milliseconds).
  void add_link_windows() {
    for (const bool out : {true, false}) {
      int above = -1;
      for (std::size_t i = n_; i-- > 0;) {
        if (S_[i] < 0 && above < 0) continue;
        const double window = out ? m_.forward_after[i] : m_.backward_after[i];
        const int oi = milp.continuous(0.0, ms_ * window * (1 + 1e-9) + 1e-12);
        Coefs t;
        add(t, oi, 1.0);
        add(t, above, -1.0);
        add(t, S_[i], -ms_ * (out ? m_.out_seconds[i] : m_.in_seconds[i]));
        emit(t, Milp::Sense::eq, 0.0);
        above = oi;
      }
    }
  }

  const SwapStageModel& m_;
  std::size_t n_;
  std::uint64_t budget_;
  double cap_;
  double ms_ = 1.0;
  std::vector<std::uint64_t> prefix_;  // held bytes of stages < i
  std::vector<int> K_, S_;
  std::vector<std::vector<int>> y_;
};

// The solver's plan where the evaluator accepts it (it, not the solver's arithmetic, decides): its cost, infinity
// where there is none.
double take_solution(SwapExactResult& res, const SwapStageModel& m, std::uint64_t budget, const SwapColumns& cols,
                     const Milp::Result& r, double bound) {
  if (r.status != Milp::Status::optimal && r.status != Milp::Status::feasible) return kInf;
  std::optional<SwapSegmentPlan> p = decode(cols, r.x);
  const double found = p ? swap_plan_cost(m, *p, budget).cost : kInf;
  if (!std::isfinite(found)) return kInf;
  res.plan = std::move(*p);
  res.cost = found;
  res.status = r.status == Milp::Status::optimal ? ExactStatus::optimal : ExactStatus::feasible;
  res.lower_bound = res.status == ExactStatus::optimal ? found : std::min(bound, found);
  return found;
}

// The start point (the DP's plan) where the search stopped above it or found nothing: never worse than it.
void keep_start(SwapExactResult& res, const SwapSegmentPlan& start, double start_cost, double bound) {
  res.plan = start;
  res.cost = start_cost;
  res.lower_bound = std::min(bound, start_cost);
  res.status = res.lower_bound >= start_cost * (1 - 1e-9) ? ExactStatus::optimal : ExactStatus::feasible;
}

}  // namespace

SwapExactResult exact_swap_remat(const SwapStageModel& m, std::uint64_t budget, const ExactRematOptions& o,
                                 const SwapSegmentPlan* start) {
  check_sizes(m);
  SwapExactResult res;
  const std::size_t n = m.size();
  if (n == 0) {
    res.status = ExactStatus::optimal;
    return res;
  }
  if (n > o.max_stages) {
    res.status = ExactStatus::too_large;
    return res;
  }
  const double start_cost = start ? swap_plan_cost(m, *start, budget).cost : kInf;
  if (!Milp::available()) {
    res.status = ExactStatus::not_built;
    return res;
  }
  SwapRematModel model(m, budget);
  model.add_rows();
  res.variables = model.milp.columns();
  res.constraints = model.milp.rows();
  const SwapColumns cols = model.columns();
  const std::vector<double> x0 =
      std::isfinite(start_cost) ? start_point(*start, cols, model.milp.columns()) : std::vector<double>{};
  Milp::Options mo;
  mo.seconds = o.seconds;
  mo.max_nodes = o.max_nodes;
  mo.relative_gap = o.relative_gap;
  const Milp::Result r = model.milp.solve(mo, x0.empty() ? nullptr : &x0);
  res.seconds = r.seconds;
  res.nodes = r.nodes;
  const double bound = std::isfinite(r.bound) ? std::max(0.0, r.bound / model.ms_per_second()) : 0.0;
  const double found = take_solution(res, m, budget, cols, r, bound);
  if (std::isfinite(start_cost) && (!std::isfinite(found) || start_cost < found * (1 - 1e-9))) {
    keep_start(res, *start, start_cost, std::isfinite(found) ? res.lower_bound : bound);
  } else if (!std::isfinite(found)) {
    res.status = r.status == Milp::Status::infeasible ? ExactStatus::infeasible : ExactStatus::no_solution;
    res.lower_bound = res.status == ExactStatus::infeasible ? kInf : bound;
  }
  return res;
}

}  // namespace memplan::planner
