// pytorch_eager_doubts: local patterns in the graph as fused for PyTorch eager, and RMSNorm groups the full fusion finds.
#include "planner/pytorch/eager_doubts.hpp"

#include <set>
#include <string>

#include "planner/fusion.hpp"
#include "planner/fusion_attention.hpp"

namespace memplan::planner {
namespace {

using analysis::Graph;
using analysis::OpId;
using analysis::TensorId;

OpId producer_of(const Graph& g, TensorId t) {
  return t == analysis::kNoTensor ? analysis::kNoOp : g.tensors[t].producer;
}

bool is(const Graph& g, OpId op, const char* type) {
  return op != analysis::kNoOp && g.ops[op].type == type && g.ops[op].domain.empty();
}

// The op reached from `t` upwards through ops that only move or rescale data, within `depth` steps.
bool reaches_matmul_above(const Graph& g, TensorId t, int depth) {
  for (int d = 0; d < depth; ++d) {
    const OpId p = producer_of(g, t);
    if (p == analysis::kNoOp) return false;
    if (is(g, p, "MatMul") || g.ops[p].type == "FusedMatMul") return true;
    if (g.ops[p].inputs.empty()) return false;
    t = g.ops[p].inputs[0];
    // a mask or scale added on the way: follow the first operand that is itself computed
    for (TensorId in : g.ops[p].inputs)
      if (in != analysis::kNoTensor && producer_of(g, in) != analysis::kNoOp) {
        t = in;
        break;
      }
  }
  return false;
}

bool reaches_matmul_below(const Graph& g, TensorId t, int depth) {
  for (int d = 0; d < depth; ++d) {
    const auto& users = g.tensors[t].consumers;
    if (users.empty()) return false;
    for (OpId u : users)
      if (is(g, u, "MatMul")) return true;
    const OpId u = users.front();
    if (g.ops[u].outputs.empty() || g.ops[u].outputs[0] == analysis::kNoTensor) return false;
    t = g.ops[u].outputs[0];
  }
  return false;
}

// x * f(x) where f(x) is `inner` applied to x (possibly through `between`)
std::size_t count_gated(const Graph& g, const char* inner, const char* between = nullptr) {
  std::size_t n = 0;
  for (OpId m = 0; m < g.ops.size(); ++m) {
    if (!is(g, m, "Mul") || g.ops[m].inputs.size() != 2) continue;
    for (int side = 0; side < 2; ++side) {
      const TensorId x = g.ops[m].inputs[side];
      OpId f = producer_of(g, g.ops[m].inputs[1 - side]);
      if (between != nullptr) {
        if (!is(g, f, between) || g.ops[f].inputs.empty()) continue;
        f = producer_of(g, g.ops[f].inputs[0]);
      }
      if (is(g, f, inner) && !g.ops[f].inputs.empty() && g.ops[f].inputs[0] == x) {
        ++n;
        break;
      }
    }
  }
  return n;
}

}  // namespace

std::vector<EagerDoubt> pytorch_eager_doubts(const Graph& shaped_forward, bool sdpa, bool sdpa_form_only) {
  std::vector<EagerDoubt> out;
  const FusionResult eager = fuse_graph(shaped_forward, FuseOptions::pytorch_eager(sdpa, sdpa_form_only));
  const Graph& g = eager.graph;
  if (sdpa) {
    std::set<std::string> python;  // the softmaxes of attention matched but not in SDPA's exported form
    for (OpId op = 0; op < shaped_forward.ops.size() && sdpa_form_only; ++op)
      if (is(shaped_forward, op, "Softmax"))
        if (const auto m = match_attention(shaped_forward, op).match; m && !m->sdpa_form)
          python.insert(shaped_forward.ops[op].name);
    std::size_t n = 0;
    for (OpId op = 0; op < g.ops.size(); ++op)
      if (is(g, op, "Softmax") && !python.count(g.ops[op].name) && reaches_matmul_above(g, g.ops[op].inputs[0], 4) &&
          reaches_matmul_below(g, g.ops[op].outputs[0], 3))
        ++n;
    if (!python.empty())
      out.push_back({"python_attention", python.size(),
                     "attention not in the exported form of scaled_dot_product_attention (the scores or Q scaled, "
                     "not Q and K^T each) is the model's own: counted as matmul, softmax, matmul (too high if "
                     "PyTorch ran it as SDPA)"});
    if (n > 0)
      out.push_back({"attention", n,
                     "softmax attention the SDPA matcher did not recognise is counted as matmul, softmax, matmul "
                     "(too high if the model called scaled_dot_product_attention there)"});
  }
  const FusionResult full = fuse_graph(shaped_forward, FuseOptions{});
  std::size_t rms = 0;
  for (const auto& grp : full.groups) rms += grp.kind == "rms_norm" ? 1 : 0;
  if (rms > 0)
    out.push_back({"rms_norm", rms,
                   "RMSNorm written as arithmetic is counted op by op (too high if the model called F.rms_norm)"});
  const std::size_t act = count_gated(shaped_forward, "Sigmoid") + count_gated(shaped_forward, "HardSigmoid") +
                          count_gated(shaped_forward, "Softplus", "Tanh");
  if (act > 0)
    out.push_back({"activation", act,
                   "SiLU, HardSwish or Mish written as x * f(x): counted as F.silu, F.hardswish or F.mish (one "
                   "kernel saving x); PyTorch runs whichever the model called, and "
                   "both export the same way"});
  return out;
}

}  // namespace memplan::planner
