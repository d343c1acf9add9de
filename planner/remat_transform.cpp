// The recompute and swap graph transforms: clones of forward cones and SwapOut/SwapIn pairs, rewired.
#include <algorithm>
#include <map>

#include "analysis/liveness.hpp"
#include "analysis/ops.hpp"
#include "planner/overwrite_order.hpp"
#include "planner/remat.hpp"

namespace memplan::planner {

using analysis::kNoOp;
using analysis::kNoTensor;
using analysis::Op;
using analysis::Phase;
using analysis::Tensor;

const char* remat_action_name(RematAction a) noexcept {
  switch (a) {
    case RematAction::keep: return "keep";
    case RematAction::recompute: return "recompute";
    case RematAction::swap: return "swap";
  }
  return "?";
}

namespace {

bool read_after_forward(const Graph& g, OpId reader) { return g.ops[reader].phase != Phase::forward; }

constexpr std::uint32_t kNoStep = std::numeric_limits<std::uint32_t>::max();

}  // namespace

bool is_forward_activation(const Graph& g, TensorId t) {
  const Tensor& x = g.tensors[t];
  return analysis::occupies_arena(x) && g.ops[x.producer].phase == Phase::forward;
}

std::vector<TensorId> find_saved_for_backward(const Graph& g) {
  std::vector<TensorId> out;
  for (TensorId t = 0; t < g.tensors.size(); ++t) {
    if (!is_forward_activation(g, t) || g.tensors[t].is_graph_output) continue;
    const auto& cs = g.tensors[t].consumers;
    if (std::any_of(cs.begin(), cs.end(), [&](OpId c) { return read_after_forward(g, c); })) out.push_back(t);
  }
  return out;
}

RematChoice RematChoice::keep_all(const Graph& g) {
  RematChoice c;
  const std::size_t n = g.tensors.size();
  c.action.assign(n, RematAction::keep);
  c.group.assign(n, 0);
  c.swap_out_after.assign(n, kNoStep);
  c.swap_in_before.assign(n, kNoStep);
  std::vector<bool> saved(n, false);
  for (TensorId t : find_saved_for_backward(g)) saved[t] = true;
  for (TensorId t = 0; t < n; ++t)
    if (is_forward_activation(g, t) && !saved[t]) c.action[t] = RematAction::recompute;
  return c;
}

namespace {

struct Builder {
  const Graph& src;
  const std::vector<OpId>& schedule;
  const RematChoice& choice;
  RematTransform out;
  std::vector<std::uint32_t> step;                 // per original op
  std::vector<std::vector<OpId>> before, after;    // new ops around each original step
  std::vector<std::uint32_t> cone_mark;            // per original op: the last cone (counted from 1) that took it
  std::uint32_t cones = 0;

  bool is_source(TensorId t) const {
    return !is_forward_activation(src, t) || choice.action[t] == RematAction::keep;
  }
  std::uint32_t first_backward_read(TensorId t) const {
    std::uint32_t s = kNoStep;
    for (OpId c : src.tensors[t].consumers)
      if (read_after_forward(src, c)) s = std::min(s, step[c]);
    return s;
  }
  TensorId add_copy_tensor(TensorId of, const std::string& suffix, bool on_host) {
    Tensor x = src.tensors[of];
    x.name += suffix;
    x.producer = kNoOp;
    x.consumers.clear();
    x.is_graph_output = false;
    x.on_host = on_host;
    x.role = analysis::TensorRole::activation;
    return out.graph.add_tensor(std::move(x));
  }
  OpId add_op(Op op, OpId origin) {
    auto id = static_cast<OpId>(out.graph.ops.size());
    out.graph.ops.push_back(std::move(op));
    out.origin.push_back(origin);
    return id;
  }
  void rewire_backward_readers(TensorId from, TensorId to) {
    for (OpId c : src.tensors[from].consumers)
      if (read_after_forward(src, c))
        for (auto& in : out.graph.ops[c].inputs)
          if (in == from) in = to;
  }
  void recompute_group(std::uint32_t group, const std::vector<TensorId>& targets);
  void swap(TensorId t);
};

void Builder::recompute_group(std::uint32_t group, const std::vector<TensorId>& targets) {
  std::uint32_t at = kNoStep;
  for (TensorId t : targets) at = std::min(at, first_backward_read(t));
  // The cone: producers of non-source tensors reachable backwards from the targets.
  std::vector<OpId> cone;
  std::vector<TensorId> stack(targets.begin(), targets.end());
  // Marks are stamped per cone, so a cone costs its own size only.
  cone_mark.resize(src.ops.size(), 0);
  ++cones;
  while (!stack.empty()) {
    TensorId t = stack.back();
    stack.pop_back();
    if (is_source(t)) continue;
    OpId p = src.tensors[t].producer;
    if (cone_mark[p] == cones) continue;
    cone_mark[p] = cones;
    cone.push_back(p);
    for (TensorId in : src.ops[p].inputs)
      if (in != kNoTensor) stack.push_back(in);
  }
  std::sort(cone.begin(), cone.end(), [&](OpId a, OpId b) { return step[a] < step[b]; });
  const std::string suffix = "@recompute" + std::to_string(group);
  std::map<TensorId, TensorId> clone_of;
  for (OpId p : cone) {
    Op op = src.ops[p];
    op.name += suffix;
    op.phase = Phase::recompute;
    for (auto& in : op.inputs)
      if (in != kNoTensor && !is_source(in)) in = clone_of.at(in);
    for (auto& o : op.outputs)
      if (o != kNoTensor) o = clone_of[o] = add_copy_tensor(o, suffix, false);
    before[at].push_back(add_op(std::move(op), p));
    ++out.recompute_ops;
  }
  for (TensorId t : targets) rewire_backward_readers(t, clone_of.at(t));
}

void Builder::swap(TensorId t) {
  const Tensor& x = src.tensors[t];
  const std::uint32_t out_after = choice.swap_out_after[t], in_before = choice.swap_in_before[t];
  std::uint32_t last_forward = step[x.producer];
  for (OpId c : x.consumers)
    if (!read_after_forward(src, c)) last_forward = std::max(last_forward, step[c]);
  const std::uint32_t first_back = first_backward_read(t);
  if (out_after == kNoStep || in_before == kNoStep || out_after < last_forward || in_before > first_back ||
      out_after >= in_before)
    fail(ErrorKind::invalid_graph, "swap of tensor '" + x.name + "': SwapOut after step " + std::to_string(out_after) +
                                       " and SwapIn before step " + std::to_string(in_before) +
                                       " do not lie between its last forward use (step " + std::to_string(last_forward) +
                                       ") and its first backward use (step " + std::to_string(first_back) + ")");
  TensorId host = add_copy_tensor(t, "@host", true);
  TensorId back = add_copy_tensor(t, "@swapin", false);
  Op so;
  so.name = x.name + "@swapout";
  so.type = analysis::memplan_ops::kSwapOut;
  so.domain = analysis::kMemplanDomain;
  so.phase = Phase::swap;
  so.inputs = {t};
  so.outputs = {host};
  Op si = so;
  si.name = x.name + "@swapin_op";
  si.type = analysis::memplan_ops::kSwapIn;
  si.inputs = {host};
  si.outputs = {back};
  after[out_after].push_back(add_op(std::move(so), static_cast<OpId>(out.graph.ops.size())));
  // SwapIns go first among the ops inserted before a step: their transfer is already under way.
  before[in_before].insert(before[in_before].begin(), add_op(std::move(si), static_cast<OpId>(out.graph.ops.size())));
  rewire_backward_readers(t, back);
  out.swap_ops += 2;
  out.swap_bytes = checked_add(out.swap_bytes, x.bytes(), "swap bytes");
}

}  // namespace

RematTransform apply_remat(const Graph& g, const std::vector<OpId>& schedule, const RematChoice& choice) {
  if (!analysis::is_topological(g, schedule))
    fail(ErrorKind::invalid_graph, "remat: the schedule is not a topological order of all ops");
  if (choice.action.size() != g.tensors.size())
    fail(ErrorKind::invalid_graph, "remat: the choice covers " + std::to_string(choice.action.size()) +
                                       " tensors, the graph has " + std::to_string(g.tensors.size()));
  Builder b{g, schedule, choice, {}, {}, {}, {}, {}, 0};
  b.out.graph = g;
  b.out.origin.resize(g.ops.size());
  for (OpId o = 0; o < g.ops.size(); ++o) b.out.origin[o] = o;
  b.step.assign(g.ops.size(), kNoStep);
  for (std::uint32_t s = 0; s < schedule.size(); ++s) b.step[schedule[s]] = s;
  b.before.resize(schedule.size());
  b.after.resize(schedule.size());

  std::map<std::uint32_t, std::vector<TensorId>> groups;
  for (TensorId t : find_saved_for_backward(g)) {
    if (choice.action[t] == RematAction::recompute) groups[choice.group[t]].push_back(t);
    else if (choice.action[t] == RematAction::swap) b.swap(t);
  }
  for (const auto& [group, targets] : groups) b.recompute_group(group, targets);

  b.out.schedule.reserve(b.out.graph.ops.size());
  for (std::uint32_t s = 0; s < schedule.size(); ++s) {
    b.out.schedule.insert(b.out.schedule.end(), b.before[s].begin(), b.before[s].end());
    b.out.schedule.push_back(schedule[s]);
    b.out.schedule.insert(b.out.schedule.end(), b.after[s].begin(), b.after[s].end());
  }
  b.out.graph.relink();
  // A clone may read a weight that the order updates in place before the clone's step (a memory order can put an
  // optimizer update early): the update waits for every reader, clones and swap copies included.
  b.out.schedule = order_reads_before_overwrites(b.out.graph, std::move(b.out.schedule));
  return std::move(b.out);
}

double recompute_flops(const RematTransform& t, const std::vector<double>& op_flops) {
  double f = 0.0;
  for (OpId o = 0; o < t.origin.size(); ++o)
    if (t.graph.ops[o].phase == Phase::recompute) f += op_flops[t.origin[o]];
  return f;
}

}  // namespace memplan::planner
