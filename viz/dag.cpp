// The DAG model behind `memplan graph`: per-op decisions, op -> op edges and the folding of long chains.
#include "viz/dag.hpp"

#include <algorithm>
#include <unordered_map>

#include "analysis/ops.hpp"
#include "planner/fused_groups.hpp"
#include "viz/elide.hpp"
#include "viz/svg.hpp"
#include "viz/timeline.hpp"

namespace memplan::viz {

using analysis::Graph;
using analysis::kNoOp;
using analysis::OpId;
using analysis::Phase;

const char* node_decision_name(NodeDecision d) noexcept {
  static const char* names[] = {"forward", "checkpoint", "recomputed", "swapped", "recompute_clone", "swap_copy", "backward", "optimizer"};
  return names[static_cast<int>(d)];
}

const char* node_decision_colour(NodeDecision d) noexcept {
  static const char* colours[] = {"#dbe6f2", "#76a5d8", "#a8dba0", "#ffb3b0", "#59a14f", "#e15759", "#ffd39b", "#d9b8d0"};
  return colours[static_cast<int>(d)];
}

std::vector<NodeDecision> op_decisions(const Graph& g) {
  std::vector<NodeDecision> d(g.ops.size(), NodeDecision::forward);
  std::unordered_map<std::string, OpId> by_name;
  for (OpId o = 0; o < g.ops.size(); ++o) by_name.emplace(g.ops[o].name, o);
  std::vector<bool> cloned(g.ops.size(), false), swapped(g.ops.size(), false), saved(g.ops.size(), false);
  for (OpId o = 0; o < g.ops.size(); ++o) {
    const auto& op = g.ops[o];
    if (op.phase == Phase::recompute) {
      const auto at = op.name.find("@recompute");
      if (at != std::string::npos)
        if (auto it = by_name.find(op.name.substr(0, at)); it != by_name.end()) cloned[it->second] = true;
    }
    for (auto t : op.inputs) {
      if (t == analysis::kNoTensor || g.tensors[t].producer == kNoOp) continue;
      const OpId p = g.tensors[t].producer;
      if (op.type == analysis::memplan_ops::kSwapOut) swapped[p] = true;
      if (op.phase == Phase::backward || op.phase == Phase::optimizer) saved[p] = true;
    }
  }
  for (OpId o = 0; o < g.ops.size(); ++o) {
    const auto& op = g.ops[o];
    if (is_swap_op(op)) d[o] = NodeDecision::swap_copy;
    else if (op.phase == Phase::recompute) d[o] = NodeDecision::recompute_clone;
    else if (op.phase == Phase::backward) d[o] = NodeDecision::backward;
    else if (op.phase == Phase::optimizer) d[o] = NodeDecision::optimizer;
    else if (swapped[o]) d[o] = NodeDecision::swapped;
    else if (cloned[o]) d[o] = NodeDecision::recomputed;
    else if (saved[o]) d[o] = NodeDecision::checkpoint;
  }
  return d;
}

namespace {

std::uint64_t bytes_made(const Graph& g, OpId o) {
  std::uint64_t b = 0;
  for (auto t : g.ops[o].outputs)
    if (t != analysis::kNoTensor && g.tensors[t].shape_known()) b = checked_add(b, g.tensors[t].bytes(), "bytes of " + g.ops[o].name);
  return b;
}

// Long exporter names share their prefixes: labels keep the tail that tells an op apart from every other.
std::string node_label(const Graph& g, const TailElider& names, const DagNode& n) {
  auto tail = [&](const std::string& s, std::size_t chars) { return names.elide(s, chars); };
  const auto& first = g.ops[n.ops.front()];
  const std::string fused = planner::fused_label(first);  // "attention ×9"
  if (n.ops.size() == 1) return tail(first.name, 34) + "\n" + first.type + (fused.empty() ? "" : " \u00b7 " + fused) + " \u00b7 " + bytes_label(n.bytes);
  std::vector<std::string> types;
  for (auto o : n.ops)
    if (std::find(types.begin(), types.end(), g.ops[o].type) == types.end()) types.push_back(g.ops[o].type);
  std::string ts;
  for (std::size_t i = 0; i < types.size() && i < 3; ++i) ts += (i ? ", " : "") + types[i];
  if (types.size() > 3) ts += ", \u2026";
  return tail(first.name, 30) + "\n\u2026 " + tail(g.ops[n.ops.back()].name, 28) + "\n" + std::to_string(n.ops.size()) + " ops (" + ts +
         ") \u00b7 " + bytes_label(n.bytes);
}

}  // namespace

DagModel build_dag(const Graph& g, const DagOptions& opts) {
  const std::size_t n = g.ops.size();
  std::vector<std::vector<OpId>> pred(n), succ(n);
  for (OpId b = 0; b < n; ++b)
    for (auto t : g.ops[b].inputs)
      if (t != analysis::kNoTensor && g.tensors[t].producer != kNoOp) pred[b].push_back(g.tensors[t].producer);
  for (OpId b = 0; b < n; ++b) {
    std::sort(pred[b].begin(), pred[b].end());
    pred[b].erase(std::unique(pred[b].begin(), pred[b].end()), pred[b].end());
    for (auto a : pred[b]) succ[a].push_back(b);
  }
  const auto decision = op_decisions(g);
  std::vector<std::string> op_names;
  for (const auto& op : g.ops) op_names.push_back(op.name);
  const TailElider names(op_names);
  DagModel m;
  m.node_of_op.assign(n, UINT32_MAX);
  for (OpId b : analysis::topological_order(g)) {
    const bool fold = opts.collapse && pred[b].size() == 1 && succ[pred[b][0]].size() == 1 && decision[pred[b][0]] == decision[b];
    if (fold) {
      const auto k = m.node_of_op[pred[b][0]];
      m.node_of_op[b] = k;
      m.nodes[k].ops.push_back(b);
    } else {
      m.node_of_op[b] = static_cast<std::uint32_t>(m.nodes.size());
      m.nodes.push_back(DagNode{{b}, decision[b], 0, {}});
    }
  }
  for (auto& node : m.nodes) {
    for (auto o : node.ops) node.bytes = std::max(node.bytes, bytes_made(g, o));
    node.label = node_label(g, names, node);
    node.tooltip = g.ops[node.ops.front()].name + " (" + g.ops[node.ops.front()].type + ")";
    if (node.ops.size() > 1)
      node.tooltip += " … " + g.ops[node.ops.back()].name + " (" + g.ops[node.ops.back()].type + "), " + std::to_string(node.ops.size()) + " ops";
  }
  for (OpId b = 0; b < n; ++b)
    for (auto a : pred[b])
      if (m.node_of_op[a] != m.node_of_op[b]) m.edges.emplace_back(m.node_of_op[a], m.node_of_op[b]);
  std::sort(m.edges.begin(), m.edges.end());
  m.edges.erase(std::unique(m.edges.begin(), m.edges.end()), m.edges.end());
  return m;
}

}  // namespace memplan::viz
