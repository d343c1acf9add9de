// Elementwise fusion: grows maximal single-result groups of fusible ops and contracts each into one op.
#include "planner/fusion.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace memplan::planner {

using analysis::Graph;
using analysis::kNoOp;
using analysis::kNoTensor;
using analysis::Op;
using analysis::OpId;
using analysis::TensorId;

namespace {

struct Group {
  OpId root = kNoOp;
  std::set<OpId> members;
};

// Grows a group from `root` by its producers: a producer joins when it is fusible and unclaimed and every
// reader of its result is already in the group (so the result needs no buffer of its own), until the group
// has `max_ops` members. A worklist: each member's inputs are looked at once when it joins, and a producer
// refused then is looked at again through each later member that reads it (joining only adds readers to
// the group, so the group without a cap is the same greatest set the fixed point gives). Linear in the group.
Group grow(const Graph& g, OpId root, const std::vector<bool>& fusible, const std::vector<bool>& claimed, std::size_t max_ops) {
  Group grp;
  grp.root = root;
  grp.members.insert(root);
  std::vector<OpId> work{root};
  for (std::size_t next = 0; next < work.size() && grp.members.size() < max_ops; ++next) {
    for (TensorId t : g.ops[work[next]].inputs) {
      if (t == kNoTensor || grp.members.size() >= max_ops) continue;
      const auto& x = g.tensors[t];
      const OpId p = x.producer;
      if (p == kNoOp || grp.members.count(p) || !fusible[p] || claimed[p] || x.is_graph_output) continue;
      const bool inside = std::all_of(x.consumers.begin(), x.consumers.end(), [&](OpId c) { return grp.members.count(c) > 0; });
      if (!inside) continue;
      grp.members.insert(p);
      work.push_back(p);
    }
  }
  return grp;
}

// Builds the group's expression over its external tensors (in first-use order).
class ExprBuilder {
 public:
  ExprBuilder(const Graph& g, const Group& grp, const std::vector<FusedExpr>& exprs)
      : g_(g), grp_(grp), exprs_(exprs) {}

  FusedExpr build(std::vector<TensorId>& operands) {
    value_of(g_.ops[grp_.root].outputs[0]);
    e_.num_inputs = static_cast<std::uint32_t>(operands_.size());
    operands = operands_;
    return e_;
  }

 private:
  std::uint32_t value_of(TensorId t) {
    if (auto it = memo_.find(t); it != memo_.end()) return it->second;
    const OpId p = g_.tensors[t].producer;
    std::uint32_t v = 0;
    if (p != kNoOp && grp_.members.count(p)) {
      const FusedExpr& sub = exprs_[p];
      std::vector<std::uint32_t> local(sub.nodes.size());
      for (std::size_t i = 0; i < sub.nodes.size(); ++i) {
        ExprNode n = sub.nodes[i];
        if (n.op == ElemOp::input) {
          local[i] = value_of(g_.ops[p].inputs[n.a]);
          continue;
        }
        if (elem_op_arity(n.op) >= 1) n.a = local[n.a];
        if (elem_op_arity(n.op) == 2) n.b = local[n.b];
        local[i] = e_.add(n);
      }
      v = local.back();
    } else {
      auto pos = std::find(operands_.begin(), operands_.end(), t);
      if (pos == operands_.end()) pos = operands_.insert(operands_.end(), t);
      v = e_.add({ElemOp::input, static_cast<std::uint32_t>(pos - operands_.begin()), 0, 0.0, 0.0});
    }
    memo_.emplace(t, v);
    return v;
  }

  const Graph& g_;
  const Group& grp_;
  const std::vector<FusedExpr>& exprs_;
  FusedExpr e_;
  std::vector<TensorId> operands_;
  std::map<TensorId, std::uint32_t> memo_;
};

// Activation tensors among `operands` that some input gradient of `e` reads (what its backward saves);
// weights, constants and graph inputs live through the step anyway and count nothing.
void saved_operands(const Graph& g, const FusedExpr& e, const std::vector<TensorId>& operands, std::set<TensorId>& saved) {
  for (std::uint32_t i = 0; i < e.num_inputs; ++i) {
    const FusedExpr d = analysis::gradient_expr(e, i);
    for (const ExprNode& n : d.nodes) {
      if (n.op != ElemOp::input || n.a >= operands.size()) continue;  // operand num_inputs is dy
      const TensorId t = operands[n.a];
      if (t != kNoTensor && !g.tensors[t].data && g.tensors[t].role == analysis::TensorRole::activation) saved.insert(t);
    }
  }
}

std::uint64_t bytes_of(const Graph& g, const std::set<TensorId>& ts) {
  std::uint64_t n = 0;
  for (TensorId t : ts) n = checked_add(n, g.tensors[t].bytes(), "saved bytes");
  return n;
}

// Training: the fused group's backward saves its external inputs that its gradients read; unfused, each
// member's own backward saves what its gradient reads. Fuse only when that is no more.
bool saves_no_more_fused(const Graph& g, const Group& grp, const std::vector<FusedExpr>& exprs) {
  std::set<TensorId> unfused, fused;
  for (OpId m : grp.members) saved_operands(g, exprs[m], g.ops[m].inputs, unfused);
  std::vector<TensorId> operands;
  const FusedExpr e = ExprBuilder(g, grp, exprs).build(operands);
  saved_operands(g, e, operands, fused);
  return bytes_of(g, fused) <= bytes_of(g, unfused);
}

}  // namespace

void set_fused_ops(analysis::Op& op, std::vector<std::string> members) {
  analysis::Attribute names;
  names.kind = analysis::Attribute::Kind::strings;
  names.strings = std::move(members);
  op.attrs[kFusedOpsAttr] = std::move(names);
}

OpId find_fused_op(const Graph& g, const std::vector<std::string>& members) {
  for (OpId o = 0; o < g.ops.size(); ++o)
    if (const auto* a = g.ops[o].attr(kFusedOpsAttr); a && a->strings == members) return o;
  return kNoOp;
}

namespace {

// Each op's expression where it can fuse: forward elementwise ops not fused already. A training step's backward and
// optimizer ops are the backward rules' (a fused forward group already emits fused backward kernels), and fusing
// them would hide what they save.
struct Fusible {
  std::vector<FusedExpr> exprs;
  std::vector<bool> ok;
};
Fusible fusible_ops(const Graph& g) {
  const std::size_t n = g.ops.size();
  Fusible f{std::vector<FusedExpr>(n), std::vector<bool>(n, false)};
  for (OpId o = 0; o < n; ++o) {
    if (g.ops[o].type == kFusedOpType || g.ops[o].phase != analysis::Phase::forward) continue;
    if (auto e = elementwise_expr(g, o)) {
      f.exprs[o] = std::move(*e);
      f.ok[o] = true;
    }
  }
  return f;
}

// The groups to fuse, by root id. Roots are taken latest first, so each group is grown from its final result.
std::vector<Group> choose_groups(const Graph& g, const Fusible& f, const FusionOptions& opts) {
  const auto order = analysis::topological_order(g);
  std::vector<bool> claimed(g.ops.size(), false);
  std::vector<Group> groups;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (!f.ok[*it] || claimed[*it]) continue;
    Group grp = grow(g, *it, f.ok, claimed, std::max<std::size_t>(opts.max_group_ops, 2));
    if (grp.members.size() < std::max<std::size_t>(opts.min_group_ops, 2)) continue;
    if (opts.training && !saves_no_more_fused(g, grp, f.exprs)) continue;
    for (OpId m : grp.members) claimed[m] = true;
    groups.push_back(std::move(grp));
  }
  std::sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) { return a.root < b.root; });
  return groups;
}

// `out`'s tensors: g's without the groups' intermediates (ids compacted, order kept), unlinked. Returns the new id
// of each old one (kNoTensor: dropped).
std::vector<TensorId> copy_kept_tensors(const Graph& g, const std::vector<Group>& groups, Graph& out) {
  std::vector<bool> dropped(g.tensors.size(), false);
  for (const Group& grp : groups)
    for (OpId m : grp.members)
      if (m != grp.root) dropped[g.ops[m].outputs[0]] = true;
  std::vector<TensorId> remap(g.tensors.size(), kNoTensor);
  for (TensorId t = 0; t < g.tensors.size(); ++t) {
    if (dropped[t]) continue;
    analysis::Tensor copy = g.tensors[t];
    copy.producer = kNoOp;
    copy.consumers.clear();
    remap[t] = out.add_tensor(std::move(copy));
  }
  return remap;
}

std::vector<TensorId> mapped(const std::vector<TensorId>& remap, std::vector<TensorId> ids) {
  for (auto& t : ids)
    if (t != kNoTensor) t = remap[t];
  return ids;
}

// The group contracted into one op at its root's place, added to `out`, and what it removed.
FusedGroup add_fused_op(const Graph& g, const Group& grp, const std::vector<FusedExpr>& exprs, const std::vector<TensorId>& remap,
                        Graph& out) {
  const Op& root = g.ops[grp.root];
  std::vector<TensorId> operands;
  const FusedExpr e = ExprBuilder(g, grp, exprs).build(operands);
  Op fused;
  fused.name = root.name + "/fused";
  fused.type = kFusedOpType;
  fused.domain = kMemplanDomain;
  fused.phase = root.phase;
  fused.inputs = mapped(remap, operands);
  fused.outputs = mapped(remap, root.outputs);
  analysis::Attribute expr_attr;
  expr_attr.kind = analysis::Attribute::Kind::s;
  expr_attr.s = e.to_string();
  fused.attrs["expr"] = expr_attr;
  FusedGroup fg;
  for (OpId m : grp.members) {
    fg.members.push_back(g.ops[m].name);
    if (m != grp.root)
      fg.intermediate_bytes = checked_add(fg.intermediate_bytes, g.tensors[g.ops[m].outputs[0]].bytes(), "fused intermediates");
  }
  fg.kind = "elementwise";
  set_fused_ops(fused, fg.members);
  fg.op = out.add_op(std::move(fused));
  return fg;
}

}  // namespace

FusionResult fuse_elementwise(const Graph& g, const FusionOptions& opts) {
  const Fusible f = fusible_ops(g);
  const std::vector<Group> groups = choose_groups(g, f, opts);
  std::vector<bool> member(g.ops.size(), false);
  std::map<OpId, std::size_t> group_of_root;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    group_of_root[groups[i].root] = i;
    for (OpId m : groups[i].members) member[m] = true;
  }
  // Rebuild: ops in their order with each group's members replaced by one fused op at its root's place.
  FusionResult res;
  Graph& out = res.graph;
  out.name = g.name;
  out.ir_version = g.ir_version;
  out.opset = g.opset;
  const std::vector<TensorId> remap = copy_kept_tensors(g, groups, out);
  for (OpId o = 0; o < g.ops.size(); ++o) {
    if (!member[o]) {
      Op copy = g.ops[o];
      copy.inputs = mapped(remap, copy.inputs);
      copy.outputs = mapped(remap, copy.outputs);
      out.add_op(std::move(copy));
      continue;
    }
    auto gi = group_of_root.find(o);
    if (gi == group_of_root.end()) continue;
    FusedGroup fg = add_fused_op(g, groups[gi->second], f.exprs, remap, out);
    res.intermediate_bytes_removed = checked_add(res.intermediate_bytes_removed, fg.intermediate_bytes, "fused intermediates");
    res.groups.push_back(std::move(fg));
  }
  for (TensorId t : g.inputs) out.inputs.push_back(remap[t]);
  for (TensorId t : g.outputs) out.outputs.push_back(remap[t]);
  out.relink();
  return res;
}

}  // namespace memplan::planner
