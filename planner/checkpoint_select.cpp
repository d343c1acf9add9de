// Choosing checkpoint segments: sqrt(N) and the budget greedy of Chen et al. 2016, an exact DP, brute force.
#include <algorithm>
#include <cmath>
#include <limits>

#include "planner/remat_segments.hpp"

namespace memplan::planner {

namespace {

SegmentPlan close_by_threshold(const ForwardStages& s, std::uint64_t threshold) {
  SegmentPlan plan;
  std::uint64_t acc = 0;
  std::uint32_t first = 0;
  for (std::uint32_t i = 0; i < s.size(); ++i) {
    acc += s.total_bytes(i);
    if (acc > threshold || i + 1 == s.size()) {
      plan.push_back({first, i, true});
      first = i + 1;
      acc = 0;
    }
  }
  return plan;
}

// One DP state: kept bytes so far, FLOPs so far, and how we got here.
struct State {
  std::uint64_t kept = 0;
  double flops = 0.0;
  std::uint32_t from = 0;       // stage position of the previous state
  std::uint32_t from_idx = 0;   // its index in that position's frontier
  bool recompute = false;
  std::uint32_t option = 0;     // Segment::option
  bool cheap_end = false;       // the boundary here is a kept stage's cheap_end, rebuilt by the cheap pass
};

// Keeps the states no other state with the same cheap_end beats in both kept bytes and FLOPs (ties by
// arrival order): a cheap end costs its bytes again where the next segment's rebuild reads it.
void prune(std::vector<State>& f) {
  std::stable_sort(f.begin(), f.end(), [](const State& a, const State& b) {
    if (a.cheap_end != b.cheap_end) return b.cheap_end;
    return a.kept != b.kept ? a.kept < b.kept : a.flops < b.flops;
  });
  std::vector<State> out;
  for (const auto& st : f)
    if (out.empty() || st.cheap_end != out.back().cheap_end || st.flops < out.back().flops) out.push_back(st);
  f = std::move(out);
}

}  // namespace

SegmentPlan sqrt_segments(const ForwardStages& s) {
  if (s.size() == 0) return {};
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < s.size(); ++i) total += s.total_bytes(i);
  const auto k = std::max<std::size_t>(1, static_cast<std::size_t>(std::llround(std::sqrt(static_cast<double>(s.size())))));
  return close_by_threshold(s, total / k);
}

SegmentPlan greedy_segments(const ForwardStages& s, std::uint64_t threshold) { return close_by_threshold(s, threshold); }

SegmentPlan optimal_segments(const ForwardStages& s, std::uint64_t budget, std::size_t max_frontier) {
  const std::size_t m = s.size();
  if (m == 0) return {};
  // Bytes are exact until a frontier grows past max_frontier; then kept bytes round up to a quantum,
  // which only ever overestimates memory, so every plan found still meets the budget.
  std::uint64_t quantum = 1;
  std::vector<std::vector<State>> frontier(m + 1);
  auto shrink = [&](std::vector<State>& f) {
    prune(f);
    if (f.size() <= max_frontier) return;
    quantum = std::max<std::uint64_t>(quantum, budget / max_frontier + 1);
    for (auto& st : f) st.kept = (st.kept + quantum - 1) / quantum * quantum;
    prune(f);
  };
  auto push = [&](std::uint32_t e, State st) {
    frontier[e].push_back(st);
    if (frontier[e].size() > 4 * max_frontier) shrink(frontier[e]);
  };
  frontier[0].push_back({});
  for (std::uint32_t r = 0; r < m; ++r) {
    shrink(frontier[r]);
    const auto& f = frontier[r];
    for (std::uint32_t idx = 0; idx < f.size(); ++idx) {
      const State st = f[idx];
      const std::uint64_t extra = s.extra_bytes(r), input = s.input_loose(r);
      // The cheap pass keeps a cheap boundary before r after all where the rebuild of the segment from r reads it.
      const std::uint64_t pin = st.cheap_end ? s.cheap_end(r - 1) : 0;
      if (st.kept + s.held_at_backward(r) + extra <= budget)  // its cheap tensors are rebuilt for its backward
        push(r + 1, {st.kept + s.held_kept(r), st.flops + s.kept_flops(r), r, idx, false, 0, s.cheap_end(r) > 0});
      if (!s.partial.empty())
        for (std::uint32_t k = 0; k < s.partial[r].size(); ++k) {
          const StageOption& o = s.partial[r][k];
          const std::uint64_t p = o.reads_input ? pin : 0;
          if (st.kept + p + input + s.held_total(r) + extra <= budget)
            push(r + 1, {st.kept + p + o.kept_bytes, st.flops + o.flops, r, idx, false, k + 1});
        }
      // Recompute segments [r, e]: the bytes of stage e's backward grow with e, so stop at the first too many.
      std::uint64_t total = 0, need = 0;
      double flops = 0.0;
      for (std::uint32_t e = r; e < m; ++e) {
        total += s.held_total(e);
        need = std::max(need, total + s.extra_bytes(e));
        flops += s.flops[e];
        if (st.kept + pin + input + need > budget) break;
        const double more = total > s.held_boundary(e) ? flops - s.boundary_flops[e] : 0.0;
        push(e + 1, {st.kept + pin + input + s.held_boundary(e), st.flops + more, r, idx, true});
      }
    }
  }
  auto& last = frontier[m];
  if (last.empty()) return {};
  prune(last);
  std::uint32_t best = 0;
  for (std::uint32_t i = 1; i < last.size(); ++i)
    if (last[i].flops < last[best].flops) best = i;
  SegmentPlan plan;
  std::uint32_t pos = static_cast<std::uint32_t>(m), idx = best;
  while (pos > 0) {
    const State& st = frontier[pos][idx];
    plan.push_back({st.from, pos - 1, st.recompute, st.option});
    pos = st.from;
    idx = st.from_idx;
  }
  std::reverse(plan.begin(), plan.end());
  return plan;
}

SegmentPlan brute_force_segments(const ForwardStages& s, std::uint64_t budget) {
  const std::size_t m = s.size();
  if (m == 0) return {};
  if (m > 16) fail(ErrorKind::usage, "brute force over " + std::to_string(m) + " stages is too large (16 at most)");
  auto options = [&](std::uint32_t i) { return s.partial.empty() ? 0u : static_cast<std::uint32_t>(s.partial[i].size()); };
  SegmentPlan best;
  double best_flops = std::numeric_limits<double>::infinity();
  for (std::uint32_t cuts = 0; cuts < (1u << (m - 1)); ++cuts) {
    SegmentPlan plan;
    std::uint32_t first = 0;
    for (std::uint32_t i = 0; i < m; ++i)
      if (i + 1 == m || (cuts >> i & 1u)) {
        plan.push_back({first, i, false});
        first = i + 1;
      }
    // Modes per segment, counted like an odometer: 0 kept, 1 recompute, 1 + k partial option k.
    std::vector<std::uint32_t> mode(plan.size(), 0);
    for (;;) {
      for (std::size_t k = 0; k < plan.size(); ++k) {
        plan[k].recompute = mode[k] == 1;
        plan[k].option = mode[k] > 1 ? mode[k] - 1 : 0;
      }
      const SegmentCost c = evaluate_segments(s, plan);
      if (c.peak_bytes <= budget && c.recompute_flops < best_flops) {
        best_flops = c.recompute_flops;
        best = plan;
      }
      std::size_t k = 0;
      for (; k < plan.size(); ++k) {
        const std::uint32_t modes = 2 + (plan[k].first == plan[k].last ? options(plan[k].first) : 0);
        if (++mode[k] < modes) break;
        mode[k] = 0;
      }
      if (k == plan.size()) break;
    }
  }
  return best;
}

std::uint64_t min_segment_peak(const ForwardStages& s) {
  std::uint64_t lo = 0, hi = 0, extra = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    lo = std::max(lo, s.held_total(i) + s.extra_bytes(i));
    hi += s.total_bytes(i);
    extra = std::max(extra, s.extra_bytes(i));
  }
  hi += extra;
  // Feasibility is monotone in the budget: bisect to within 0.5%.
  while (lo < hi && hi - lo > std::max<std::uint64_t>(1, hi / 200)) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    if (optimal_segments(s, mid, 512).empty()) lo = mid + 1;
    else hi = mid;
  }
  return hi;
}

}  // namespace memplan::planner
