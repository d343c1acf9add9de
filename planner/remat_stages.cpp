// Forward stages between articulation tensors, their coarsening, and segment plans turned into choices.
#include <algorithm>
#include <unordered_map>

#include "analysis/liveness.hpp"
#include "planner/assign.hpp"
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
// A recompute segment skips the op that makes its boundary, unless that op has other saved outputs
// (BatchNormalization's saved mean and variance): then the rebuild runs it too.
double boundary_op_flops(const Graph& g, TensorId boundary, const std::vector<std::uint64_t>& saved_b,
                         const std::vector<double>& op_flops) {
  const OpId p = g.tensors[boundary].producer;
  for (TensorId out : g.ops[p].outputs)
    if (out != kNoTensor && out != boundary && saved_b[out] > 0) return 0.0;
  return op_flops[p];
}

std::vector<std::uint64_t> backward_bytes(const Graph& g, const std::vector<OpId>& schedule, const ForwardStages& s,
                                          std::uint64_t alignment, std::uint64_t workspace_limit,
                                          const WorkspaceQuery& query) {
  std::vector<std::uint64_t> out(s.size(), 0);
  if (s.size() == 0) return out;
  const analysis::Liveness l = analysis::analyze_liveness(g, schedule, alignment);
  // Live bytes per step of everything but forward activations, by a difference array over intervals.
  std::vector<std::int64_t> diff(schedule.size() + 1, 0);
  for (TensorId t = 0; t < g.tensors.size(); ++t) {
    if (!l.in_arena[t] || forward_activation(g, t)) continue;
    diff[l.interval[t].first] += static_cast<std::int64_t>(l.bytes[t]);
    diff[l.interval[t].last + 1] -= static_cast<std::int64_t>(l.bytes[t]);
  }
  std::vector<std::uint64_t> other(schedule.size(), 0);
  std::int64_t acc = 0;
  for (std::size_t i = 0; i < schedule.size(); ++i) {  // with the op's sure scratch (a convolution's workspace)
    other[i] = static_cast<std::uint64_t>(acc += diff[i]);
    other[i] = checked_add(other[i], align_up(scratch_request(g, schedule[i], workspace_limit, query), alignment), "backward bytes");
  }
  for (TensorId t = 0; t < g.tensors.size(); ++t) {
    if (!forward_activation(g, t)) continue;
    const std::uint32_t st = s.stage_of_op[g.tensors[t].producer];
    if (st == kNone) continue;
    for (OpId c : g.tensors[t].consumers)
      if (g.ops[c].phase != Phase::forward && l.step_of_op[c] < other.size())
        out[st] = std::max(out[st], other[l.step_of_op[c]]);
  }
  return out;
}

// Where the forward can be cut: after position b of the forward ops when at most one forward activation crosses
// (that one the stage's boundary, kNoTensor where none does); the last cut ends the forward. Crossing counts per
// boundary by difference arrays; the id sum names the tensor where exactly one crosses.
std::vector<std::pair<std::uint32_t, TensorId>> forward_cuts(const Graph& g, const std::vector<std::uint32_t>& pos,
                                                             std::size_t n) {
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
  cuts.emplace_back(n == 0 ? 0 : static_cast<std::uint32_t>(n - 1), kNoTensor);
  return cuts;
}

// Appends the stage of forward positions [start, end] with boundary t: its ops' stage, saved bytes (but the
// boundary's), FLOPs, and its boundary's bytes and op.
void add_stage(const Graph& g, ForwardStages& s, std::uint32_t start, std::uint32_t end, TensorId t,
               const std::vector<std::uint64_t>& saved_b, const std::vector<double>& op_flops, std::uint64_t alignment) {
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
  s.loose_bytes.push_back(t == kNoTensor || saved_b[t] > 0 ? 0 : s.boundary_bytes.back());
  s.flops.push_back(flops);
  s.boundary_flops.push_back(t == kNoTensor ? 0.0 : boundary_op_flops(g, t, saved_b, op_flops));
}

}  // namespace

ForwardStages find_forward_stages(const Graph& g, const std::vector<OpId>& schedule, const std::vector<double>& op_flops,
                                  std::uint64_t alignment, std::uint64_t workspace_limit, const WorkspaceQuery& workspace_query) {
  ForwardStages s;
  std::vector<std::uint32_t> pos(g.ops.size(), kNone);
  for (OpId o : schedule)
    if (g.ops[o].phase == Phase::forward) {
      pos[o] = static_cast<std::uint32_t>(s.forward.size());
      s.forward.push_back(o);
    }
  const std::size_t n = s.forward.size();
  const auto cuts = forward_cuts(g, pos, n);
  std::vector<std::uint64_t> saved_b(g.tensors.size(), 0);
  for (TensorId t : find_saved_for_backward(g)) saved_b[t] = align_up(g.tensors[t].bytes(), alignment);
  s.stage_of_op.assign(g.ops.size(), kNone);
  std::uint32_t start = 0;
  for (const auto& [end, t] : cuts) {
    if (n == 0) break;
    add_stage(g, s, start, end, t, saved_b, op_flops, alignment);
    start = end + 1;
  }
  s.backward_bytes = backward_bytes(g, schedule, s, alignment, workspace_limit, workspace_query);
  return s;
}

namespace {

// Merges runs of consecutive stages; `close[i]`: stage i ends a merged stage. A merged stage keeps the
// last boundary; the inner boundaries become saved bytes.
// `tight`: a merged stage's backward bytes are the most any inner stage's backward adds to the bytes held
// up to it, less the merged stage's held bytes (the later inner stages' are freed by then).
ForwardStages merge_runs(const ForwardStages& s, const std::vector<bool>& close, bool tight) {
  ForwardStages c;
  c.forward = s.forward;
  std::vector<std::uint32_t> map(s.size());
  std::uint64_t saved = 0, cheap = 0, backward = 0, held = 0;
  double flops = 0.0, cheap_flops = 0.0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    map[i] = static_cast<std::uint32_t>(c.boundary.size());
    held += s.held_total(i);
    backward = std::max(backward, s.extra_bytes(i) + (tight ? held : 0));
    saved += s.saved_bytes[i];
    flops += s.flops[i];
    cheap += s.total_bytes(i) - s.kept_bytes(i) - s.cheap_end(i);
    cheap_flops += s.kept_flops(i);
    if (close[i] || i + 1 == s.size()) {
      c.boundary.push_back(s.boundary[i]);
      c.saved_bytes.push_back(saved);
      c.boundary_bytes.push_back(s.boundary_bytes[i]);
      c.flops.push_back(flops);
      c.boundary_flops.push_back(s.boundary_flops[i]);
      if (!s.backward_bytes.empty()) c.backward_bytes.push_back(tight ? backward - held : backward);
      if (!s.loose_bytes.empty()) c.loose_bytes.push_back(s.loose_bytes[i]);
      if (!s.cheap_bytes.empty()) {
        c.cheap_bytes.push_back(cheap + s.cheap_end(i));
        c.cheap_flops.push_back(cheap_flops);
        c.cheap_boundary_bytes.push_back(s.cheap_end(i));
      }
      saved = cheap = backward = held = 0;
      flops = cheap_flops = 0.0;
    } else {
      saved += s.held_boundary(i);  // an inner boundary is an ordinary saved tensor of the merged stage, if saved
      cheap += s.cheap_end(i);      // and stays cheap to rebuild
    }
  }
  c.stage_of_op = s.stage_of_op;  // partial options are per stage: with_partial_options on the result
  for (auto& st : c.stage_of_op)
    if (st != kNone) st = map[st];
  return c;
}

}  // namespace

ForwardStages coarsen_stages(const ForwardStages& s, std::size_t max_stages) {
  if (s.size() <= max_stages || max_stages == 0) return s;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < s.size(); ++i) total += s.saved_bytes[i] + s.boundary_bytes[i];
  const std::uint64_t target = total / max_stages + 1;
  std::vector<bool> close(s.size(), false);
  std::uint64_t acc = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    acc += s.total_bytes(i);
    if (acc >= target) {
      close[i] = true;
      acc = 0;
    }
  }
  return merge_runs(s, close, false);
}

ForwardStages merge_loose_stages(const ForwardStages& s) {
  std::vector<bool> close(s.size(), true);
  for (std::size_t i = 0; i < s.size(); ++i) close[i] = s.loose(i) == 0;
  return merge_runs(s, close, true);
}

SegmentCost evaluate_segments(const ForwardStages& s, const SegmentPlan& plan) {
  SegmentCost cost;
  std::uint64_t kept = 0, pin = 0;
  for (const auto& seg : plan) {
    // Most bytes at one stage's backward within the segment, all rebuilt or as kept.
    std::uint64_t total = 0, kept_total = 0, rebuilt_peak = 0, kept_peak = 0;
    double flops = 0.0, kept_flops = 0.0;
    for (std::uint32_t i = seg.first; i <= seg.last; ++i) {
      total += s.held_total(i);
      // A kept stage's cheap tensors are rebuilt for its backward: all of it is live there.
      kept_peak = std::max(kept_peak, kept_total + s.held_at_backward(i) + s.extra_bytes(i));
      kept_total += s.held_kept(i);
      rebuilt_peak = std::max(rebuilt_peak, total + s.extra_bytes(i));
      flops += s.flops[i];
      kept_flops += s.kept_flops(i);
    }
    const std::uint64_t input = s.input_loose(seg.first);
    if (seg.option > 0) {
      const StageOption& o = s.partial[seg.first][seg.option - 1];
      const std::uint64_t p = o.reads_input ? pin : 0;
      cost.peak_bytes = std::max(cost.peak_bytes, kept + p + input + rebuilt_peak);
      kept += p + o.kept_bytes;
      cost.recompute_flops += o.flops;
      pin = 0;
    } else if (seg.recompute) {
      cost.peak_bytes = std::max(cost.peak_bytes, kept + pin + input + rebuilt_peak);
      kept += pin + input + s.held_boundary(seg.last);
      if (total > s.held_boundary(seg.last)) cost.recompute_flops += flops - s.boundary_flops[seg.last];
      pin = 0;
    } else {
      cost.peak_bytes = std::max(cost.peak_bytes, kept + kept_peak);
      kept += kept_total;
      cost.recompute_flops += kept_flops;
      pin = s.cheap_end(seg.last);  // kept after all where the next segment's rebuild reads it
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
    if (plan[k].option == 0) continue;
    for (TensorId t : s.partial[plan[k].first][plan[k].option - 1].dropped) {
      c.action[t] = RematAction::recompute;
      c.group[t] = k;
    }
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
