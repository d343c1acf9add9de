// Forward stages between articulation tensors, their coarsening, and segment plans turned into choices.
#include <algorithm>
#include <unordered_map>

#include "analysis/liveness.hpp"
#include "planner/remat_segments.hpp"

namespace memplan::planner {

using analysis::kNoTensor;
using analysis::Phase;

namespace {
constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();

bool forward_activation(const Graph& g, TensorId t) {
  const auto& x = g.tensors[t];
  return analysis::occupies_arena(x) && g.ops[x.producer].phase == Phase::forward;
}
}  // namespace

ForwardStages find_forward_stages(const Graph& g, const std::vector<OpId>& schedule, const std::vector<double>& op_flops,
                                  std::uint64_t alignment) {
  ForwardStages s;
  std::vector<std::uint32_t> pos(g.ops.size(), kNone);
  for (OpId o : schedule)
    if (g.ops[o].phase == Phase::forward) {
      pos[o] = static_cast<std::uint32_t>(s.forward.size());
      s.forward.push_back(o);
    }
  const std::size_t n = s.forward.size();
  // Crossing counts per boundary (after position b) by difference arrays; the id sum names the tensor
  // where exactly one crosses.
  std::vector<std::int64_t> count(n + 1, 0);
  std::vector<std::uint64_t> idsum(n + 1, 0);
  for (TensorId t = 0; t < g.tensors.size(); ++t) {
    if (!forward_activation(g, t)) continue;
    const auto& x = g.tensors[t];
    std::uint32_t p = pos[x.producer], q = p;
    for (auto c : x.consumers)
      if (pos[c] != kNone) q = std::max(q, pos[c]);
    if (x.is_graph_output && n > 0) q = static_cast<std::uint32_t>(n - 1);
    if (q == p) continue;
    ++count[p];
    --count[q];
    idsum[p] += t;
    idsum[q] -= t;
  }
  std::vector<std::pair<std::uint32_t, TensorId>> cuts;  // (position, tensor)
  std::int64_t c = 0;
  std::uint64_t ids = 0;
  for (std::uint32_t b = 0; b + 1 < n; ++b) {
    c += count[b];
    ids += idsum[b];
    if (c > 1) continue;
    const TensorId t = c == 1 ? static_cast<TensorId>(ids) : kNoTensor;
    // A tensor crossing several boundaries alone: cut at the last one only, so it ends the stage that makes it.
    if (t != kNoTensor && !cuts.empty() && cuts.back().second == t) cuts.back().first = b;
    else cuts.emplace_back(b, t);
  }
  std::vector<std::uint64_t> saved_b(g.tensors.size(), 0);
  for (TensorId t : find_saved_for_backward(g)) saved_b[t] = align_up(g.tensors[t].bytes(), alignment);
  s.stage_of_op.assign(g.ops.size(), kNone);
  std::uint32_t start = 0;
  cuts.emplace_back(n == 0 ? 0 : static_cast<std::uint32_t>(n - 1), kNoTensor);
  for (const auto& [end, t] : cuts) {
    if (n == 0) break;
    const auto stage = static_cast<std::uint32_t>(s.boundary.size());
    std::uint64_t saved = 0;
    double flops = 0.0;
    for (std::uint32_t p = start; p <= end; ++p) {
      const OpId o = s.forward[p];
      s.stage_of_op[o] = stage;
      flops += op_flops[o];
      for (TensorId out : g.ops[o].outputs)
        if (out != kNoTensor && out != t) saved = checked_add(saved, saved_b[out], "saved bytes");
    }
    s.boundary.push_back(t);
    s.saved_bytes.push_back(saved);
    s.boundary_bytes.push_back(t == kNoTensor ? 0 : align_up(g.tensors[t].bytes(), alignment));
    s.flops.push_back(flops);
    s.boundary_flops.push_back(t == kNoTensor ? 0.0 : op_flops[g.tensors[t].producer]);
    start = end + 1;
  }
  return s;
}

ForwardStages coarsen_stages(const ForwardStages& s, std::size_t max_stages) {
  if (s.size() <= max_stages || max_stages == 0) return s;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < s.size(); ++i) total += s.saved_bytes[i] + s.boundary_bytes[i];
  const std::uint64_t target = total / max_stages + 1;
  ForwardStages c;
  c.forward = s.forward;
  std::vector<std::uint32_t> map(s.size());
  std::uint64_t acc = 0, saved = 0, cheap = 0;
  double flops = 0.0, cheap_flops = 0.0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    map[i] = static_cast<std::uint32_t>(c.boundary.size());
    acc += s.total_bytes(i);
    saved += s.saved_bytes[i];
    flops += s.flops[i];
    cheap += s.total_bytes(i) - s.kept_bytes(i);
    cheap_flops += s.kept_flops(i);
    const bool last = i + 1 == s.size();
    if (acc >= target || last) {
      c.boundary.push_back(s.boundary[i]);
      c.saved_bytes.push_back(saved);
      c.boundary_bytes.push_back(s.boundary_bytes[i]);
      c.flops.push_back(flops);
      c.boundary_flops.push_back(s.boundary_flops[i]);
      if (!s.cheap_bytes.empty()) {
        c.cheap_bytes.push_back(cheap);
        c.cheap_flops.push_back(cheap_flops);
      }
      acc = saved = cheap = 0;
      flops = cheap_flops = 0.0;
    } else {
      saved += s.boundary_bytes[i];  // an inner boundary is an ordinary saved tensor of the merged stage
    }
  }
  c.stage_of_op = s.stage_of_op;
  for (auto& st : c.stage_of_op)
    if (st != kNone) st = map[st];
  return c;
}

SegmentCost evaluate_segments(const ForwardStages& s, const SegmentPlan& plan) {
  SegmentCost cost;
  std::uint64_t kept = 0;
  for (const auto& seg : plan) {
    std::uint64_t total = 0, kept_total = 0;
    double flops = 0.0, kept_flops = 0.0;
    for (std::uint32_t i = seg.first; i <= seg.last; ++i) {
      total += s.total_bytes(i);
      kept_total += s.kept_bytes(i);
      flops += s.flops[i];
      kept_flops += s.kept_flops(i);
    }
    if (seg.recompute) {
      cost.peak_bytes = std::max(cost.peak_bytes, kept + total);
      kept += s.boundary_bytes[seg.last];
      if (total > s.boundary_bytes[seg.last]) cost.recompute_flops += flops - s.boundary_flops[seg.last];
    } else {
      cost.peak_bytes = std::max(cost.peak_bytes, kept + kept_total);
      kept += kept_total;
      cost.recompute_flops += kept_flops;
    }
  }
  return cost;
}

RematChoice choice_from_segments(const Graph& g, const ForwardStages& s, const SegmentPlan& plan) {
  RematChoice c = RematChoice::keep_all(g);
  std::vector<std::uint32_t> seg_of_stage(s.size(), kNone);
  for (std::uint32_t k = 0; k < plan.size(); ++k) {
    for (std::uint32_t i = plan[k].first; i <= plan[k].last; ++i) seg_of_stage[i] = k;
    if (TensorId b = s.boundary[plan[k].last]; b != kNoTensor) c.action[b] = RematAction::keep;
  }
  for (TensorId t : find_saved_for_backward(g)) {
    const std::uint32_t st = s.stage_of_op[g.tensors[t].producer];
    if (st == kNone) continue;
    const std::uint32_t k = seg_of_stage[st];
    if (!plan[k].recompute || t == s.boundary[plan[k].last]) continue;
    c.action[t] = RematAction::recompute;
    c.group[t] = k;
  }
  return c;
}

}  // namespace memplan::planner
