// Swap placement on a compute timeline and the greedy that swaps the largest tensors at the peak.
#include "planner/swap.hpp"

#include <algorithm>
#include <limits>

#include "analysis/liveness.hpp"

namespace memplan::planner {

using analysis::Phase;

namespace {
constexpr std::uint32_t kNoStep = std::numeric_limits<std::uint32_t>::max();

bool free_on(const std::vector<std::pair<double, double>>& busy, double a, double b) {
  for (const auto& [s, e] : busy)
    if (s < b && a < e) return false;
  return true;
}
void reserve(std::vector<std::pair<double, double>>& busy, double a, double b) {
  busy.emplace_back(a, b);
  std::sort(busy.begin(), busy.end());
}
// Earliest start >= t where [start, start + d) is free.
double earliest_gap(const std::vector<std::pair<double, double>>& busy, double t, double d) {
  for (const auto& [s, e] : busy)
    if (s < t + d && t < e) t = e;
  return t;
}
// Latest start with start + d <= deadline and [start, start + d) free.
double latest_gap(const std::vector<std::pair<double, double>>& busy, double deadline, double d) {
  double t = deadline - d;
  for (auto it = busy.rbegin(); it != busy.rend(); ++it)
    if (it->first < t + d && t < it->second) t = it->first - d;
  return t;
}
}  // namespace

SwapPlanner::SwapPlanner(const Graph& g, const std::vector<OpId>& schedule, const std::vector<double>& op_seconds,
                         SwapLinks links)
    : g_(g), links_(links) {
  step_.assign(g.ops.size(), kNoStep);
  start_.assign(schedule.size() + 1, 0.0);
  for (std::uint32_t s = 0; s < schedule.size(); ++s) {
    step_[schedule[s]] = s;
    start_[s + 1] = start_[s] + op_seconds[schedule[s]];
  }
}

bool SwapPlanner::try_swap(TensorId t, RematChoice& choice, std::uint32_t must_free_at) {
  if (links_.host_to_device_bytes_per_s <= 0.0 || links_.device_to_host_bytes_per_s <= 0.0) return false;
  const auto& x = g_.tensors[t];
  const auto bytes = static_cast<double>(x.bytes());
  const std::uint32_t made = step_[x.producer];
  std::uint32_t last_fwd = made, first_back = kNoStep;
  for (OpId c : x.consumers) {
    if (g_.ops[c].phase == Phase::forward) last_fwd = std::max(last_fwd, step_[c]);
    else first_back = std::min(first_back, step_[c]);
  }
  if (first_back == kNoStep) return false;
  const double out_d = bytes / links_.device_to_host_bytes_per_s, in_d = bytes / links_.host_to_device_bytes_per_s;
  const double out_start = earliest_gap(out_busy_, start_[made + 1], out_d), out_done = out_start + out_d;
  std::uint32_t out_after = last_fwd;
  while (out_after < first_back && start_[out_after + 1] < out_done) ++out_after;
  if (out_after + 1 >= first_back) return false;
  const double in_start = latest_gap(in_busy_, start_[first_back], in_d);
  // The SwapIn op runs at the start of the last step that begins no later than in_start.
  auto it = std::upper_bound(start_.begin(), start_.end() - 1, in_start);
  if (it == start_.begin()) return false;
  const auto in_before = static_cast<std::uint32_t>(it - start_.begin() - 1);
  if (in_before <= out_after || in_before > first_back) return false;
  if (!free_on(in_busy_, start_[in_before], start_[in_before] + in_d)) return false;
  if (must_free_at != kNoStep && !(out_after < must_free_at && must_free_at < in_before)) return false;
  reserve(out_busy_, out_start, out_done);
  reserve(in_busy_, start_[in_before], start_[in_before] + in_d);
  choice.action[t] = RematAction::swap;
  choice.swap_out_after[t] = out_after;
  choice.swap_in_before[t] = in_before;
  return true;
}

RematChoice swap_to_budget(const Graph& g, const std::vector<OpId>& schedule, RematChoice choice,
                           const std::vector<double>& op_seconds, SwapLinks links, std::uint64_t arena_budget,
                           std::uint64_t alignment) {
  SwapPlanner sp(g, schedule, op_seconds, links);
  std::vector<bool> saved(g.tensors.size(), false);
  for (TensorId t : find_saved_for_backward(g)) saved[t] = true;
  std::vector<bool> tried(g.tensors.size(), false);
  for (;;) {
    const RematTransform tr = apply_remat(g, schedule, choice);
    const analysis::Liveness l = analysis::analyze_liveness(tr.graph, tr.schedule, alignment);
    if (l.lower_bound_bytes <= arena_budget) return choice;
    // The original step at the peak: the last original op at or before it in the new schedule.
    std::uint32_t orig = 0;
    for (std::uint32_t s = 0, seen = 0; s <= l.peak_step; ++s)
      if (tr.schedule[s] < g.ops.size()) orig = seen++;
    std::uint64_t freed = 0;
    const std::uint64_t excess = l.lower_bound_bytes - arena_budget;
    bool any = false;
    for (TensorId t : analysis::live_at(l, l.peak_step)) {
      if (t >= g.tensors.size() || !saved[t] || tried[t] || choice.action[t] != RematAction::keep) continue;
      if (!sp.try_swap(t, choice, orig)) continue;
      tried[t] = true;
      any = true;
      freed += l.bytes[t];
      if (freed >= excess) break;
    }
    if (!any) return choice;
  }
}

}  // namespace memplan::planner
