// Layout fusion: a Transpose whose consumer can read it through strides plans no copy.
//
// TorchScript writes every Linear as MatMul(X, Transpose(W, perm=[1,0])); PyTorch's W.t() is a view, but as an op of
// its own the Transpose is a planned copy, and in training that copy is saved for the MatMul's backward (weight-sized
// memory for the whole step). A MatMul reading an operand whose last two axes a Transpose swapped becomes
// memplan MatMulT reading the untransposed tensor (analysis/matmul_t.hpp); a Gemm flips transA / transB.
#include <algorithm>
#include <array>
#include <map>

#include "analysis/autodiff.hpp"
#include "analysis/matmul_t.hpp"
#include "planner/fusion.hpp"
#include "planner/graph_rewrite.hpp"

namespace memplan::planner {

using analysis::Graph;
using analysis::kNoOp;
using analysis::kNoTensor;
using analysis::Op;
using analysis::OpId;
using analysis::TensorId;

namespace {

bool is_onnx(const Op& op, std::string_view type) { return op.type == type && (op.domain.empty() || op.domain == "ai.onnx"); }

bool has_rank(const Graph& g, TensorId t, std::size_t min_rank) {
  return t != kNoTensor && g.tensors[t].shape_known() && g.tensors[t].dims.size() >= min_rank;
}

// The Transpose producing `t` when it swaps the last two axes and keeps the others (ONNX's default perm
// reverses every axis: a swap at rank 2); kNoOp otherwise.
OpId swapping_transpose(const Graph& g, TensorId t) {
  const OpId p = g.tensors[t].producer;
  if (p == kNoOp || !is_onnx(g.ops[p], "Transpose") || !has_rank(g, g.ops[p].input(0), 2)) return kNoOp;
  const std::size_t r = g.tensors[g.ops[p].inputs[0]].dims.size();
  std::vector<std::int64_t> perm = g.ops[p].attr_ints("perm");
  if (perm.empty())
    for (std::size_t k = r; k-- > 0;) perm.push_back(static_cast<std::int64_t>(k));
  if (perm.size() != r) return kNoOp;
  for (std::size_t k = 0; k + 2 < r; ++k)
    if (perm[k] != static_cast<std::int64_t>(k)) return kNoOp;
  const auto last = static_cast<std::int64_t>(r - 1);
  return perm[r - 2] == last && perm[r - 1] == last - 1 ? p : kNoOp;
}

// A consumer that can read operands 0 and 1 transposed: MatMul of rank >= 2 operands, Gemm.
bool reads_strides(const Graph& g, const Op& op) {
  if (is_onnx(op, "Gemm")) return has_rank(g, op.input(0), 2) && has_rank(g, op.input(1), 2);
  return is_onnx(op, "MatMul") && has_rank(g, op.input(0), 2) && has_rank(g, op.input(1), 2);
}

// One consumer rewritten: which operands it reads through a Transpose.
struct Candidate {
  OpId op = kNoOp;
  std::array<OpId, 2> transpose{kNoOp, kNoOp};
};

// The consumer reading the Transposes' inputs, flags set; `members` names the ops it replaces.
Op rewritten(const Graph& g, const Candidate& c, const std::vector<std::string>& members) {
  const Op& src = g.ops[c.op];
  Op n = src;
  const bool gemm = is_onnx(src, "Gemm");
  if (!gemm) {
    n.type = std::string(analysis::memplan_ops::kMatMulT);
    n.domain = std::string(analysis::kMemplanDomain);
    n.attrs.clear();
  }
  for (std::size_t i = 0; i < 2; ++i) {
    const char* flag = gemm ? (i == 0 ? "transA" : "transB") : (i == 0 ? "trans_a" : "trans_b");
    const bool t = gemm && src.attr_int(flag, 0) != 0;
    if (c.transpose[i] != kNoOp) n.inputs[i] = g.ops[c.transpose[i]].inputs[0];
    if (!gemm || c.transpose[i] != kNoOp) n.attrs[flag] = analysis::autodiff::attr_i(t != (c.transpose[i] != kNoOp) ? 1 : 0);
  }
  set_fused_ops(n, members);
  if (!gemm) {  // the output keeps MatMul's shape: check the geometry agrees
    const auto geo = analysis::matmul_t_geometry(n.attr_int("trans_a", 0) != 0, n.attr_int("trans_b", 0) != 0,
                                                 g.tensors[n.inputs[0]].shape(), g.tensors[n.inputs[1]].shape(),
                                                 "op '" + n.name + "' (MatMul)");
    if (geo.full_output() != g.tensors[n.outputs[0]].shape())
      fail(ErrorKind::shape, "op '" + n.name + "' (MatMul): output shape disagrees with its operands");
  }
  return n;
}

}  // namespace

FusionResult fuse_layouts(const Graph& g) {
  std::vector<Candidate> cands;
  std::map<OpId, std::size_t> fused_reads;  // Transpose -> uses by rewritten consumers
  for (OpId o = 0; o < g.ops.size(); ++o) {
    if (!reads_strides(g, g.ops[o])) continue;
    Candidate c{o, {}};
    for (std::size_t i = 0; i < 2; ++i) c.transpose[i] = swapping_transpose(g, g.ops[o].inputs[i]);
    if (c.transpose[0] == kNoOp && c.transpose[1] == kNoOp) continue;
    for (OpId t : c.transpose)
      if (t != kNoOp) ++fused_reads[t];
    cands.push_back(c);
  }
  // A Transpose goes when every reader was rewritten; the first of them lists it among its members.
  std::map<OpId, OpId> removed_by;
  for (const auto& [t, uses] : fused_reads) {
    const auto& y = g.tensors[g.ops[t].outputs[0]];
    if (y.consumers.size() != uses || y.is_graph_output) continue;
    for (const Candidate& c : cands)
      if (c.transpose[0] == t || c.transpose[1] == t) {
        removed_by.emplace(t, c.op);
        break;
      }
  }
  GraphRewrite rw(g);
  FusionResult r;
  for (const Candidate& c : cands) {
    std::vector<OpId> member_ops{c.op};
    std::uint64_t bytes = 0;
    for (const auto& [t, owner] : removed_by)
      if (owner == c.op) {
        member_ops.push_back(t);
        bytes = checked_add(bytes, g.tensors[g.ops[t].outputs[0]].bytes(), "fused transposes");
        rw.remove(t);
      }
    std::sort(member_ops.begin(), member_ops.end());
    FusedGroup grp;
    grp.kind = "layout";
    for (OpId m : member_ops) grp.members.push_back(g.ops[m].name);
    grp.intermediate_bytes = bytes;
    rw.remove(c.op);
    rw.add(rewritten(g, c, grp.members), c.op);
    r.intermediate_bytes_removed = checked_add(r.intermediate_bytes_removed, bytes, "fused transposes");
    r.groups.push_back(std::move(grp));
  }
  r.graph = cands.empty() ? g : rw.apply();
  for (auto& grp : r.groups) grp.op = find_fused_op(r.graph, grp.members);
  return r;
}

}  // namespace memplan::planner
