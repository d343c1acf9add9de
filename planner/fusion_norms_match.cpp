// Matching helpers of the norm and GELU passes: who produces and reads a tensor, products, reduce axes.
#include "planner/fusion_norms_match.hpp"

#include <algorithm>

#include "planner/graph_rewrite.hpp"

namespace memplan::planner::norm_match {

bool is(const Graph& g, OpId o, std::string_view type) {
  if (o == kNoOp) return false;
  const Op& op = g.ops[o];
  return (op.domain.empty() || op.domain == "ai.onnx") && op.type == type;
}

OpId made_by(const Graph& g, TensorId t, std::string_view type) {
  if (t == kNoTensor) return kNoOp;
  const OpId p = g.tensors[t].producer;
  return is(g, p, type) ? p : kNoOp;
}

OpId sole_reader(const Graph& g, TensorId t, std::string_view type) {
  if (t == kNoTensor) return kNoOp;
  const auto& x = g.tensors[t];
  if (x.is_graph_output || x.consumers.size() != 1) return kNoOp;
  return is(g, x.consumers[0], type) ? x.consumers[0] : kNoOp;
}

TensorId other_input(const Op& op, TensorId t) {
  if (op.inputs.size() != 2) return kNoTensor;
  if (op.inputs[0] == t) return op.inputs[1];
  if (op.inputs[1] == t) return op.inputs[0];
  return kNoTensor;
}

bool split_constant(const Graph& g, const Op& op, double v, double tol, TensorId& rest) {
  if (op.inputs.size() != 2) return false;
  for (int k = 0; k < 2; ++k)
    if (is_scalar_constant(g, op.inputs[static_cast<std::size_t>(k)], v, tol)) {
      rest = op.inputs[static_cast<std::size_t>(1 - k)];
      return true;
    }
  return false;
}

std::vector<TensorId> product_factors(const Graph& g, TensorId t, int max_muls, std::vector<OpId>& muls) {
  std::vector<TensorId> out;
  const OpId p = made_by(g, t, "Mul");
  if (p == kNoOp || static_cast<int>(muls.size()) >= max_muls || g.ops[p].inputs.size() != 2) return {t};
  muls.push_back(p);
  for (TensorId in : g.ops[p].inputs) {
    const auto& x = g.tensors[in];
    const bool open = x.consumers.size() == 1 && !x.is_graph_output && made_by(g, in, "Mul") != kNoOp;
    if (!open) {
      out.push_back(in);
      continue;
    }
    for (TensorId f : product_factors(g, in, max_muls, muls)) out.push_back(f);
  }
  return out;
}

std::optional<std::vector<std::int64_t>> reduce_mean_axes(const Graph& g, OpId o) {
  if (!is(g, o, "ReduceMean")) return std::nullopt;
  const Op& op = g.ops[o];
  if (op.attr_int("keepdims", 1) != 1 || op.input(0) == kNoTensor) return std::nullopt;
  const auto& x = g.tensors[op.inputs[0]];
  if (!x.shape_known()) return std::nullopt;
  std::vector<std::int64_t> raw = op.attr_ints("axes");
  if (op.input(1) != kNoTensor) {
    const auto& a = g.tensors[op.inputs[1]];
    if (!a.data) return std::nullopt;
    raw = a.data->as_int64();
  }
  const auto rank = static_cast<std::int64_t>(x.dims.size());
  if (raw.empty()) {
    if (op.attr_int("noop_with_empty_axes", 0) != 0) return std::nullopt;
    for (std::int64_t k = 0; k < rank; ++k) raw.push_back(k);
  }
  std::vector<std::int64_t> axes;
  for (auto a : raw) {
    if (a < -rank || a >= rank) return std::nullopt;
    axes.push_back(a < 0 ? a + rank : a);
  }
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return axes;
}

std::optional<std::int64_t> trailing_axis(const std::vector<std::int64_t>& axes, std::size_t rank) {
  if (axes.empty()) return std::nullopt;
  const auto first = static_cast<std::int64_t>(rank) - static_cast<std::int64_t>(axes.size());
  for (std::size_t k = 0; k < axes.size(); ++k)
    if (axes[k] != first + static_cast<std::int64_t>(k)) return std::nullopt;
  return first;
}

bool fits_normalized(const Graph& g, TensorId w, TensorId x, std::int64_t axis) {
  if (w == kNoTensor || x == kNoTensor || !g.tensors[w].shape_known() || !g.tensors[x].shape_known()) return false;
  if (g.tensors[w].dtype != g.tensors[x].dtype) return false;
  std::vector<std::int64_t> ws = g.tensors[w].shape();
  const auto xs = g.tensors[x].shape();
  const std::vector<std::int64_t> tail(xs.begin() + axis, xs.end());
  while (!ws.empty() && ws.front() == 1 && ws.size() > tail.size()) ws.erase(ws.begin());
  if (ws.size() > tail.size()) return false;
  // Aligned to the right; what is missing on the left is a broadcast 1.
  const std::size_t pad = tail.size() - ws.size();
  for (std::size_t k = 0; k < pad; ++k)
    if (tail[k] != 1) return false;
  return std::equal(ws.begin(), ws.end(), tail.begin() + static_cast<std::ptrdiff_t>(pad));
}

bool closed(const Graph& g, const Match& m, const std::vector<bool>& claimed) {
  for (OpId o : m.members) {
    if (claimed[o]) return false;
    for (TensorId t : g.ops[o].outputs) {
      if (t == kNoTensor || t == m.result) continue;
      const auto& x = g.tensors[t];
      if (x.is_graph_output) return false;
      for (OpId c : x.consumers)
        if (!m.members.count(c)) return false;
    }
  }
  return m.result != kNoTensor && m.members.count(g.tensors[m.result].producer) > 0;
}

std::vector<std::string> member_names(const Graph& g, const Match& m) {
  std::vector<std::string> v;
  for (OpId o : m.members) v.push_back(g.ops[o].name);  // std::set: op order
  return v;
}

std::uint64_t intermediate_bytes(const Graph& g, const Match& m) {
  std::uint64_t b = 0;
  for (OpId o : m.members)
    for (TensorId t : g.ops[o].outputs)
      if (t != kNoTensor && t != m.result && g.tensors[t].shape_known())
        b = checked_add(b, g.tensors[t].bytes(), "fused intermediates");
  return b;
}

bool same_shape(const Graph& g, TensorId x, TensorId y) {
  const auto& a = g.tensors[x];
  const auto& b = g.tensors[y];
  return a.shape_known() && b.shape_known() && a.shape() == b.shape() && a.dtype == b.dtype;
}

std::optional<std::vector<std::int64_t>> ints_of(const Graph& g, const Op& op, std::size_t i, const char* attr) {
  if (op.attr(attr)) return op.attr_ints(attr);
  const TensorId t = op.input(i);
  if (t == kNoTensor) return std::vector<std::int64_t>{};
  if (!g.tensors[t].data) return std::nullopt;
  return g.tensors[t].data->as_int64();
}

FusionResult fuse_matches(const Graph& g, Matcher match) {
  std::vector<bool> claimed(g.ops.size(), false);
  std::vector<Found> found;
  for (OpId o = 0; o < g.ops.size(); ++o) {
    auto f = match(g, o);
    if (!f || !closed(g, f->m, claimed)) continue;
    for (OpId m : f->m.members) claimed[m] = true;
    found.push_back(std::move(*f));
  }
  FusionResult r;
  if (found.empty()) {
    r.graph = g;
    return r;
  }
  GraphRewrite rw(g);
  std::vector<FusedGroup> groups;
  for (Found& f : found) {
    for (OpId o : f.m.members) rw.remove(o);
    FusedGroup grp;
    grp.kind = f.kind;
    grp.members = member_names(g, f.m);
    grp.intermediate_bytes = intermediate_bytes(g, f.m);
    const OpId last = g.tensors[f.m.result].producer;
    f.op.name = g.ops[last].name;  // the op it ends with is gone: its name is free
    set_fused_ops(f.op, grp.members);
    f.op.outputs = {f.m.result};
    rw.add(std::move(f.op), last);
    r.intermediate_bytes_removed = checked_add(r.intermediate_bytes_removed, grp.intermediate_bytes, "fused intermediates");
    groups.push_back(std::move(grp));
  }
  r.graph = rw.apply();
  for (auto& grp : groups) {  // op ids of the rewritten graph
    grp.op = find_fused_op(r.graph, grp.members);
    r.groups.push_back(std::move(grp));
  }
  return r;
}

}  // namespace memplan::planner::norm_match
