// The schedule peak model (values, readers, in-place and scratch as assign plans them) and the schedule choice.
#include <algorithm>
#include <chrono>

#include "analysis/liveness.hpp"
#include "analysis/ops.hpp"
#include "planner/overwrite_order.hpp"
#include "planner/schedule.hpp"

namespace memplan::planner {

using analysis::kNoTensor;

const char* schedule_kind_name(ScheduleKind k) noexcept { return k == ScheduleKind::file ? "file" : "memory"; }

std::optional<ScheduleKind> schedule_kind_from_name(std::string_view name) noexcept {
  for (ScheduleKind k : {ScheduleKind::file, ScheduleKind::memory})
    if (name == schedule_kind_name(k)) return k;
  return std::nullopt;
}

namespace {

constexpr std::uint32_t kNone = UINT32_MAX;

bool same_storage_type(const analysis::Op& op, const analysis::Tensor& x, const analysis::Tensor& y) {
  if (x.dtype == y.dtype) return true;
  const analysis::OpInfo* info = analysis::op_registry().find(op);
  return info && info->inplace_across_dtypes && analysis::dtype_bits(x.dtype) == analysis::dtype_bits(y.dtype);
}

void add_unique(std::vector<OpId>& v, OpId o) {
  if (std::find(v.begin(), v.end(), o) == v.end()) v.push_back(o);
}

// Per tensor: the model's value holding its bytes (kNone: none), whether it is a view of bytes outside the arena, and
// whether it takes arena bytes of its own.
struct ValueMap {
  std::vector<std::uint32_t> value_of;
  std::vector<bool> outside, in_arena;
};

// Output 0 of a view op of its input's bytes: the input's value, or outside the arena with it. Returns whether it is.
bool take_view(const Graph& g, const analysis::Op& op, const AssignOptions& o, ValueMap& m) {
  const TensorId out = op.output(0);
  if (out == kNoTensor || !m.in_arena[out] || !o.views || !is_view_op(op)) return false;
  const TensorId in = op.input(0);
  if (in == kNoTensor || !g.tensors[in].shape_known() || g.tensors[in].bytes() != g.tensors[out].bytes()) return false;
  if (m.value_of[in] != kNone) {
    m.value_of[out] = m.value_of[in];
    return true;
  }
  if (m.outside[in] || (!m.in_arena[in] && !g.tensors[in].on_host)) {
    m.outside[out] = true;
    return true;
  }
  return false;
}

// The values output 0 may overwrite, in assign's order: in-place candidates of the same bytes and storage type.
std::vector<std::uint32_t> inplace_values(const Graph& g, const analysis::Op& op, const ValueMap& m) {
  const TensorId out = op.output(0);
  std::vector<std::uint32_t> vs;
  for (std::size_t p : inplace_candidates(op)) {
    const TensorId in = op.input(p);
    if (in == kNoTensor || m.value_of[in] == kNone) continue;
    if (!same_storage_type(op, g.tensors[in], g.tensors[out]) || g.tensors[in].bytes() != g.tensors[out].bytes()) continue;
    if (std::find(vs.begin(), vs.end(), m.value_of[in]) == vs.end()) vs.push_back(m.value_of[in]);
  }
  return vs;
}

}  // namespace

ScheduleModel::ScheduleModel(const Graph& g, const AssignOptions& o) {
  const std::size_t n = g.ops.size(), nt = g.tensors.size();
  const std::uint64_t align = o.alignment == 0 ? 1 : o.alignment;
  ops_.resize(n);
  preds_.resize(n);
  succs_.resize(n);
  ValueMap m{std::vector<std::uint32_t>(nt, kNone), std::vector<bool>(nt, false), std::vector<bool>(nt, false)};
  for (TensorId t = 0; t < nt; ++t) m.in_arena[t] = analysis::occupies_arena(g, t) && align_up(g.tensors[t].bytes(), align) > 0;
  const std::vector<OpId> file = analysis::topological_order(g);
  for (OpId id : file) {
    const analysis::Op& op = g.ops[id];
    OpFacts& f = ops_[id];
    f.scratch = align_up(scratch_request(g, id, o.workspace_limit_bytes), align);
    const bool view = take_view(g, op, o, m);
    for (TensorId t : op.outputs) {
      if (t == kNoTensor || !m.in_arena[t] || m.value_of[t] != kNone || m.outside[t]) continue;
      m.value_of[t] = static_cast<std::uint32_t>(values_.size());
      values_.push_back(Value{align_up(g.tensors[t].bytes(), align), 0, false});
      f.born.push_back(m.value_of[t]);
    }
    const TensorId out = op.output(0);
    if (out != kNoTensor && m.in_arena[out] && !view && o.inplace) {
      f.out0 = m.value_of[out];
      f.inplace = inplace_values(g, op, m);
    }
  }
  link_reads(g, m.value_of);
  order_ops(g, file);
}

// Graph outputs and gradients live to the end; each op's distinct values read, each value's readers, and each op's
// producers before it.
void ScheduleModel::link_reads(const Graph& g, const std::vector<std::uint32_t>& value_of) {
  readers_.resize(values_.size());
  for (TensorId t = 0; t < g.tensors.size(); ++t)
    if (value_of[t] != kNone && (g.tensors[t].is_graph_output || g.tensors[t].role == analysis::TensorRole::gradient))
      values_[value_of[t]].pinned = true;
  for (OpId id = 0; id < g.ops.size(); ++id) {
    for (TensorId t : g.ops[id].inputs) {
      if (t == kNoTensor) continue;
      if (const std::uint32_t v = value_of[t]; v != kNone && std::find(ops_[id].inputs.begin(), ops_[id].inputs.end(), v) == ops_[id].inputs.end()) {
        ops_[id].inputs.push_back(v);
        readers_[v].push_back(id);
      }
      if (const OpId p = g.tensors[t].producer; p != analysis::kNoOp) add_unique(preds_[id], p);
    }
  }
  for (std::uint32_t v = 0; v < values_.size(); ++v) values_[v].readers = static_cast<std::uint32_t>(readers_[v].size());
}

// Write after read: every other reader of storage rewritten in place (through views of it) comes first. Then the
// successors, and the tiers (forward ops 0, an op after a later-tier op in its tier).
void ScheduleModel::order_ops(const Graph& g, const std::vector<OpId>& file) {
  std::vector<std::uint32_t> pos(g.ops.size(), 0);
  for (std::uint32_t i = 0; i < file.size(); ++i) pos[file[i]] = i;
  for (const auto& [reader, rewriter] : overwrite_readers(g))
    if (pos[reader] < pos[rewriter]) add_unique(preds_[rewriter], reader);
  for (OpId id = 0; id < g.ops.size(); ++id) {
    std::sort(preds_[id].begin(), preds_[id].end());
    for (OpId p : preds_[id]) succs_[p].push_back(id);
  }
  for (OpId id : file) {
    ops_[id].tier = g.ops[id].phase == analysis::Phase::forward ? 0 : 1;
    for (OpId p : preds_[id]) ops_[id].tier = std::max(ops_[id].tier, ops_[p].tier);
  }
}

ScheduleModel::Step ScheduleModel::step(OpId o, const std::vector<std::uint32_t>& remaining) const {
  const OpFacts& f = ops_[o];
  Step s;
  s.during = f.scratch;
  if (f.out0 != kNone)
    for (std::uint32_t v : f.inplace)
      if (remaining[v] == 1 && !values_[v].pinned) {
        s.inplace = v;
        break;
      }
  for (std::uint32_t v : f.born) {
    const Value& x = values_[v];
    if (!(v == f.out0 && s.inplace != kNone)) {
      s.during += x.bytes;
      s.after += static_cast<std::int64_t>(x.bytes);
    }
    if (x.readers == 0 && !x.pinned) s.after -= static_cast<std::int64_t>(x.bytes);
  }
  for (std::uint32_t v : f.inputs)
    if (remaining[v] == 1 && !values_[v].pinned && v != s.inplace) s.after -= static_cast<std::int64_t>(values_[v].bytes);
  return s;
}

std::vector<std::uint64_t> ScheduleModel::profile(const std::vector<OpId>& order) const {
  std::vector<std::uint32_t> remaining(values_.size());
  for (std::uint32_t v = 0; v < values_.size(); ++v) remaining[v] = values_[v].readers;
  std::vector<std::uint64_t> out(order.size());
  std::uint64_t cur = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const Step s = step(order[i], remaining);
    out[i] = checked_add(cur, s.during, "live bytes");
    cur = static_cast<std::uint64_t>(static_cast<std::int64_t>(cur) + s.after);
    for (std::uint32_t v : ops_[order[i]].inputs) --remaining[v];
  }
  return out;
}

std::uint64_t ScheduleModel::peak(const std::vector<OpId>& order) const {
  const auto p = profile(order);
  return p.empty() ? 0 : *std::max_element(p.begin(), p.end());
}

bool ScheduleModel::respects_dependencies(const std::vector<OpId>& order) const {
  if (order.size() != size()) return false;
  std::vector<std::uint32_t> pos(size(), kNone);
  for (std::uint32_t i = 0; i < order.size(); ++i) {
    if (order[i] >= size() || pos[order[i]] != kNone) return false;
    pos[order[i]] = i;
  }
  std::uint32_t last_tier0 = 0, first_tier1 = kNone;
  for (std::uint32_t i = 0; i < order.size(); ++i) {
    if (ops_[order[i]].tier == 0) last_tier0 = i;
    else first_tier1 = std::min(first_tier1, i);
    for (OpId p : preds_[order[i]])
      if (pos[p] >= i) return false;
  }
  return first_tier1 == kNone || last_tier0 < first_tier1;
}

ScheduleResult choose_schedule(const Graph& g, const AssignOptions& a, const ScheduleOptions& s) {
  const auto t0 = std::chrono::steady_clock::now();
  ScheduleResult r;
  const std::vector<OpId> file = analysis::topological_order(g);
  r.order = file;
  if (s.kind == ScheduleKind::file) {
    r.peak_bytes = r.file_peak_bytes = ScheduleModel(g, a).peak(file);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }
  const ScheduleModel m(g, a);
  r.kind = ScheduleKind::memory;
  r.peak_bytes = r.file_peak_bytes = m.peak(file);
  auto consider = [&](std::vector<OpId> order, const std::string& method) {
    // The heuristics keep forward ops before backward ones (tiers); a graph whose file order interleaves them
    // (ops built by hand) gets candidates that break that rule: they are not taken, the file order stays.
    if (!m.respects_dependencies(order)) return;
    const std::uint64_t p = m.peak(order);
    if (p < r.peak_bytes) r.order = std::move(order), r.peak_bytes = p, r.method = method;
  };
  consider(m.least_peak_first(file), "least_peak_first");
  consider(m.breadth_first(file), "breadth_first");
  consider(m.depth_first(file), "depth_first");
  const std::uint64_t evaluations = std::min<std::uint64_t>(s.local_search_evaluations, s.local_search_work / std::max<std::size_t>(m.size(), 1));
  consider(m.local_search(r.order, s.local_search_seconds, static_cast<std::uint32_t>(evaluations)), r.method + "+local");
  if (m.size() <= s.exact_max_ops)
    if (auto best = m.exact(file, s.exact_max_states, s.exact_seconds, s.exact_work)) {
      consider(std::move(*best), "exact");
      r.proven_optimal = true;  // the DP's peak is the least: whatever order was kept has it
    }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace memplan::planner
