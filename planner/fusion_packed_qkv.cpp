// Packed attention operands: ViT, DeiT and Swin project Q, K and V with one Linear, reshape it to [B, S, 3, H, D],
// permute it to [3, B, H, S, D] and unbind it. As ONNX ops that is a Transpose copy and a Split (or three Gathers)
// copy in front of every attention, and in training their backward copies again (a Concat and a Transpose of the
// three gradients). PyTorch's permute and unbind are views; here a FusedAttention whose Q, K and V are the three
// slots of such a Transpose reads the [B, S, 3, H, D] tensor itself (layout "packed", analysis/fused_ops.hpp), and its
// gradient writes the one gradient of that tensor: no copy either way.
#include <algorithm>
#include <array>
#include <map>
#include <set>

#include "analysis/autodiff.hpp"
#include "analysis/fused_ops.hpp"
#include "planner/fusion.hpp"
#include "planner/fusion_norms_match.hpp"
#include "planner/graph_rewrite.hpp"

namespace memplan::planner {

using analysis::Graph;
using analysis::kNoOp;
using analysis::kNoTensor;
using analysis::Op;
using analysis::OpId;
using analysis::TensorId;

namespace {

using norm_match::ints_of;

// Where one attention operand comes from: slot `slot` of Transpose `transpose`, through `ops` (the Squeeze and
// Split, or the Gather) that exist only to take that slot out.
struct Slot {
  OpId transpose = kNoOp;
  std::int64_t slot = -1;
  std::vector<OpId> ops;
};

// The Transpose [B, S, 3, H, D] -> [3, B, H, S, D] (perm 2, 0, 3, 1, 4) making `t`, or kNoOp.
OpId head_transpose(const Graph& g, TensorId t) {
  const OpId p = norm_match::made_by(g, t, "Transpose");
  if (p == kNoOp) return kNoOp;
  const auto& x = g.tensors[g.ops[p].inputs[0]];
  if (!x.shape_known() || x.dims.size() != 5 || x.shape()[2] != 3) return kNoOp;
  return g.ops[p].attr_ints("perm") == std::vector<std::int64_t>{2, 0, 3, 1, 4} ? p : kNoOp;
}

// `t` as one slot of a head Transpose: Squeeze(axis 0) of one output of a Split in three along axis 0, or a Gather
// along axis 0 of a scalar constant index.
std::optional<Slot> slot_of(const Graph& g, TensorId t) {
  if (const OpId gather = norm_match::made_by(g, t, "Gather"); gather != kNoOp) {
    const Op& op = g.ops[gather];
    const auto idx = op.input(1) == kNoTensor ? nullptr : g.tensors[op.input(1)].data.get();
    if (op.attr_int("axis", 0) != 0 || !idx || !idx->dims.empty()) return std::nullopt;
    const OpId tr = head_transpose(g, op.inputs[0]);
    const std::int64_t i = idx->as_int64().at(0);
    if (tr == kNoOp || i < -3 || i > 2) return std::nullopt;
    return Slot{tr, (i + 3) % 3, {gather}};
  }
  const OpId squeeze = norm_match::made_by(g, t, "Squeeze");
  if (squeeze == kNoOp) return std::nullopt;
  const auto axes = ints_of(g, g.ops[squeeze], 1, "axes");
  if (!axes || *axes != std::vector<std::int64_t>{0}) return std::nullopt;
  const TensorId piece = g.ops[squeeze].inputs[0];
  const OpId split = norm_match::made_by(g, piece, "Split");
  if (split == kNoOp || g.ops[split].attr_int("axis", 0) != 0 || g.ops[split].outputs.size() != 3) return std::nullopt;
  const auto sizes = ints_of(g, g.ops[split], 1, "split");
  if (!sizes || !(sizes->empty() || *sizes == std::vector<std::int64_t>{1, 1, 1})) return std::nullopt;
  const OpId tr = head_transpose(g, g.ops[split].inputs[0]);
  if (tr == kNoOp) return std::nullopt;
  const auto& outs = g.ops[split].outputs;
  const auto at = std::find(outs.begin(), outs.end(), piece) - outs.begin();
  return Slot{tr, static_cast<std::int64_t>(at), {squeeze, split}};
}

analysis::Attribute attr_s(const std::string& v) {
  analysis::Attribute a;
  a.kind = analysis::Attribute::Kind::s;
  a.s = v;
  return a;
}

// A FusedAttention whose Q, K and V are three different slots of one head Transpose.
struct Candidate {
  OpId op = kNoOp;
  OpId transpose = kNoOp;
  std::array<std::int64_t, 3> slots{};
  std::set<OpId> ops;  // the Squeeze/Split/Gather ops taking the slots out, and the Transpose
};

std::optional<Candidate> packed_candidate(const Graph& g, OpId o) {
  const Op& op = g.ops[o];
  if (op.type != analysis::memplan_ops::kFusedAttention || op.domain != analysis::kMemplanDomain) return std::nullopt;
  for (const char* l : {"q_layout", "k_layout", "v_layout"})
    if (op.attr_string(l, "bhsd") != "bhsd") return std::nullopt;
  Candidate c{o, kNoOp, {}, {}};
  for (std::size_t i = 0; i < 3; ++i) {
    const auto s = slot_of(g, op.input(i));
    if (!s || (c.transpose != kNoOp && c.transpose != s->transpose)) return std::nullopt;
    c.transpose = s->transpose;
    c.slots[i] = s->slot;
    c.ops.insert(s->ops.begin(), s->ops.end());
  }
  if (c.slots[0] == c.slots[1] || c.slots[1] == c.slots[2] || c.slots[0] == c.slots[2]) return std::nullopt;
  c.ops.insert(c.transpose);
  return c;
}

// The candidates' slot ops that go: an op goes when nothing but removed ops and the rewritten attentions reads its
// outputs (repeated until stable: the Split goes once its Squeezes have).
std::set<OpId> removable_ops(const Graph& g, const std::vector<Candidate>& cands) {
  std::set<OpId> readers_ok;  // rewritten attentions
  std::set<OpId> removable;
  for (const auto& c : cands) readers_ok.insert(c.op);
  auto unread = [&](OpId o) {
    for (TensorId t : g.ops[o].outputs) {
      if (t == kNoTensor) continue;
      if (g.tensors[t].is_graph_output) return false;
      for (OpId reader : g.tensors[t].consumers)
        if (!readers_ok.count(reader) && !removable.count(reader)) return false;
    }
    return true;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (const auto& c : cands)
      for (OpId o : c.ops)
        if (!removable.count(o) && unread(o)) changed = removable.insert(o).second || changed;
  }
  return removable;
}

// The attention reading the packed tensor itself (layout "packed" and the three slots), added to `rw` in place of
// the old one; the group names the removed copies and counts their bytes.
FusedGroup rewrite_attention(const Graph& g, const Candidate& c, const std::set<OpId>& removable, GraphRewrite& rw) {
  Op n = g.ops[c.op];
  const TensorId packed = g.ops[c.transpose].inputs[0];
  FusedGroup grp;
  grp.kind = "packed_qkv";
  for (OpId o : c.ops)
    if (removable.count(o)) {
      grp.members.push_back(g.ops[o].name);
      for (TensorId t : g.ops[o].outputs)
        if (t != kNoTensor)
          grp.intermediate_bytes = checked_add(grp.intermediate_bytes, g.tensors[t].bytes(), "packed attention copies");
    }
  for (std::size_t i = 0; i < 3; ++i) n.inputs[i] = packed;
  for (const char* l : {"q_layout", "k_layout", "v_layout"}) n.attrs[l] = attr_s("packed");
  n.attrs["q_slot"] = analysis::autodiff::attr_i(c.slots[0]);
  n.attrs["k_slot"] = analysis::autodiff::attr_i(c.slots[1]);
  n.attrs["v_slot"] = analysis::autodiff::attr_i(c.slots[2]);
  const auto& ps = g.tensors[packed].shape();
  (void)analysis::attention_geometry(n, ps, ps, ps);  // ErrorKind::shape when the slots do not make Q, K, V
  std::vector<std::string> fused = n.attr(kFusedOpsAttr) ? n.attr(kFusedOpsAttr)->strings : std::vector<std::string>{};
  fused.insert(fused.end(), grp.members.begin(), grp.members.end());
  set_fused_ops(n, fused);
  rw.remove(c.op);
  rw.add(std::move(n), c.op);
  return grp;
}

}  // namespace

FusionResult fuse_packed_attention(const Graph& g) {
  std::vector<Candidate> cands;
  for (OpId o = 0; o < g.ops.size(); ++o)
    if (auto c = packed_candidate(g, o)) cands.push_back(std::move(*c));
  FusionResult r;
  if (cands.empty()) {
    r.graph = g;
    return r;
  }
  const std::set<OpId> removable = removable_ops(g, cands);
  GraphRewrite rw(g);
  for (OpId o : removable) rw.remove(o);
  for (const auto& c : cands) {
    FusedGroup grp = rewrite_attention(g, c, removable, rw);
    r.intermediate_bytes_removed = checked_add(r.intermediate_bytes_removed, grp.intermediate_bytes, "packed attention copies");
    r.groups.push_back(std::move(grp));
  }
  r.graph = rw.apply();
  for (std::size_t k = 0; k < cands.size(); ++k)
    for (OpId o = 0; o < r.graph.ops.size(); ++o)
      if (r.graph.ops[o].name == g.ops[cands[k].op].name) r.groups[k].op = o;
  return r;
}

}  // namespace memplan::planner
