// fuse_graph: the pattern passes in order, their groups collected against the final graph.
#include <algorithm>
#include <functional>
#include <map>

#include "analysis/autodiff.hpp"
#include "planner/fusion.hpp"
#include "planner/fused_groups.hpp"

namespace memplan::planner {

FusionResult fuse_graph(const analysis::Graph& g, const FuseOptions& opts) {
  FusionResult res;
  res.graph = g;
  // The name of each group's op in the graph of its own pass: later passes may absorb that op.
  std::vector<std::string> op_names;
  auto run = [&](bool on, const std::function<FusionResult(const analysis::Graph&)>& pass) {
    if (!on) return;
    FusionResult step = pass(res.graph);
    res.graph = std::move(step.graph);
    res.intermediate_bytes_removed = checked_add(res.intermediate_bytes_removed, step.intermediate_bytes_removed, "fused intermediates");
    for (auto& grp : step.groups) {  // every pass gives its groups' op ids in its own graph
      op_names.push_back(grp.op < res.graph.ops.size() ? res.graph.ops[grp.op].name : std::string());
      grp.op = analysis::kNoOp;  // ids of an intermediate graph: found again by name below
      res.groups.push_back(std::move(grp));
    }
  };
  run(opts.attention, [&](const analysis::Graph& x) { return fuse_attention(x, opts.sdpa_form_only); });
  run(opts.math_attention, [&](const analysis::Graph& x) { return decompose_math_attention(x, !opts.attention); });
  run(opts.attention && opts.attention_max_head_dim > 0,
      [&](const analysis::Graph& x) { return decompose_attention_above(x, opts.attention_max_head_dim); });
  // From opset 17 the exporters write F.layer_norm as one LayerNormalization: a LayerNorm decomposed there is
  // arithmetic in the model's Python (I-BERT's), which PyTorch runs op by op.
  const std::int64_t exported_at = g.converted_from_opset != 0 ? g.converted_from_opset : g.opset;
  const bool decomposed_by_exporter = exported_at < 17;
  run(opts.norms && (opts.composite || decomposed_by_exporter),
      [&](const analysis::Graph& x) { return fuse_norms(x, opts.composite); });
  run(opts.gelu, [&](const analysis::Graph& x) { return fuse_gelu(x, opts.composite); });
  run(opts.activations, &fuse_gated_activations);
  run(opts.rolls, &fuse_rolls);
  run(opts.layouts, &fuse_layouts);
  run(opts.layouts && opts.attention && opts.packed_attention, &fuse_packed_attention);
  FusionOptions elementwise;
  elementwise.training = opts.training;
  run(opts.elementwise, [&](const analysis::Graph& x) { return fuse_elementwise(x, elementwise); });
  // A group whose op a later pass absorbed (a Gelu inside an elementwise group) joins the absorbing group:
  // its members take the absorbed op's place there.
  std::map<std::string, analysis::OpId> by_name;
  for (analysis::OpId o = 0; o < res.graph.ops.size(); ++o) by_name.emplace(res.graph.ops[o].name, o);
  for (std::size_t k = 0; k < res.groups.size(); ++k)
    if (auto it = by_name.find(op_names[k]); it != by_name.end()) res.groups[k].op = it->second;
  for (std::size_t k = res.groups.size(); k-- > 0;) {
    if (res.groups[k].op != analysis::kNoOp || op_names[k].empty()) continue;
    for (std::size_t j = k + 1; j < res.groups.size(); ++j) {
      auto& into = res.groups[j].members;
      auto at = std::find(into.begin(), into.end(), op_names[k]);
      if (at == into.end()) continue;
      at = into.erase(at);
      into.insert(at, res.groups[k].members.begin(), res.groups[k].members.end());
      if (res.groups[j].op != analysis::kNoOp) set_fused_ops(res.graph.ops[res.groups[j].op], into);  // the original ops too
      res.groups[j].intermediate_bytes = checked_add(res.groups[j].intermediate_bytes, res.groups[k].intermediate_bytes, "fused intermediates");
      res.groups.erase(res.groups.begin() + static_cast<std::ptrdiff_t>(k));
      op_names.erase(op_names.begin() + static_cast<std::ptrdiff_t>(k));
      break;
    }
  }
  // The group's kind goes with its op, so plans, pictures and traces of the graph name it (fused_groups.hpp).
  for (const auto& grp : res.groups)
    if (grp.op != analysis::kNoOp) res.graph.ops[grp.op].attrs[kFusedKindAttr] = analysis::autodiff::attr_s(grp.kind);
  return res;
}

}  // namespace memplan::planner
