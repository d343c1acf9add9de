// Liveness intervals by one pass over the schedule; live bytes per step by a difference array.
#include "analysis/liveness.hpp"

#include <algorithm>

#include "analysis/ops.hpp"

namespace memplan::analysis {

bool occupies_arena(const Tensor& t) noexcept {
  return (t.role == TensorRole::activation || t.role == TensorRole::gradient) && t.producer != kNoOp && !t.on_host;
}

bool occupies_arena(const Graph& g, TensorId t) {
  if (!occupies_arena(g.tensors[t])) return false;
  const TensorId src = rewritten_source(g, t);
  return src == kNoTensor || occupies_arena(g, src);
}

Liveness analyze_liveness(const Graph& g, const std::vector<OpId>& schedule, std::uint64_t alignment) {
  if (!is_topological(g, schedule))
    fail(ErrorKind::invalid_graph, "the schedule is not a topological order of all " + std::to_string(g.ops.size()) + " ops");
  Liveness l;
  l.schedule = schedule;
  l.alignment = alignment == 0 ? 1 : alignment;
  const std::size_t nt = g.tensors.size();
  const auto nsteps = static_cast<std::uint32_t>(schedule.size());
  l.in_arena.assign(nt, false);
  l.interval.assign(nt, Interval{});
  l.bytes.assign(nt, 0);
  l.step_of_op.assign(g.ops.size(), kNoOp);
  for (std::uint32_t s = 0; s < nsteps; ++s) l.step_of_op[schedule[s]] = s;

  std::vector<std::int64_t> delta(static_cast<std::size_t>(nsteps) + 1, 0);
  std::vector<std::uint64_t> added(static_cast<std::size_t>(nsteps) + 1, 0), removed(static_cast<std::size_t>(nsteps) + 1, 0);
  for (TensorId t = 0; t < nt; ++t) {
    const Tensor& x = g.tensors[t];
    if (!occupies_arena(g, t)) continue;
    const std::uint64_t b = align_up(x.bytes(), l.alignment);
    if (b == 0) continue;
    Interval iv;
    iv.first = l.step_of_op[x.producer];
    iv.last = iv.first;
    for (OpId c : x.consumers) iv.last = std::max(iv.last, l.step_of_op[c]);
    if (x.is_graph_output || x.role == TensorRole::gradient) iv.last = nsteps - 1;  // step results
    l.in_arena[t] = true;
    l.interval[t] = iv;
    l.bytes[t] = b;
    added[iv.first] = checked_add(added[iv.first], b, "live bytes");
    removed[iv.last + 1] = checked_add(removed[iv.last + 1], b, "live bytes");
  }
  l.live_bytes.assign(nsteps, 0);
  std::uint64_t live = 0;
  for (std::uint32_t s = 0; s < nsteps; ++s) {
    live = checked_add(live - removed[s], added[s], "live bytes");
    l.live_bytes[s] = live;
    if (live > l.lower_bound_bytes) {
      l.lower_bound_bytes = live;
      l.peak_step = s;
    }
  }
  return l;
}

std::vector<TensorId> live_at(const Liveness& l, std::uint32_t step) {
  std::vector<TensorId> out;
  for (TensorId t = 0; t < l.in_arena.size(); ++t)
    if (l.in_arena[t] && l.interval[t].first <= step && step <= l.interval[t].last) out.push_back(t);
  std::stable_sort(out.begin(), out.end(), [&](TensorId a, TensorId b) { return l.bytes[a] > l.bytes[b]; });
  return out;
}

}  // namespace memplan::analysis
