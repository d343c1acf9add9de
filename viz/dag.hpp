// The op DAG as a picture: nodes coloured by the keep/recompute/swap decision, sized by bytes, drawn by Graphviz.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "analysis/graph.hpp"

namespace memplan::viz {

// What the plan decided for an op, read from the (transformed) graph itself: recompute clones are named
// "<op>@recompute<k>" with Phase::recompute, swap copies are SwapOut/SwapIn ops (planner/remat.hpp).
enum class NodeDecision : std::uint8_t {
  forward,          // a forward op whose outputs die before the backward pass
  checkpoint,       // a forward op whose output a backward op reads directly (kept)
  recomputed,       // a forward op that has a recompute clone
  swapped,          // a forward op whose output is copied to host
  recompute_clone,  // the clone itself
  swap_copy,        // SwapOut / SwapIn
  backward,
  optimizer,
};
inline constexpr int kNodeDecisions = 8;
const char* node_decision_name(NodeDecision d) noexcept;
const char* node_decision_colour(NodeDecision d) noexcept;

// The decision for every op, by op id.
std::vector<NodeDecision> op_decisions(const analysis::Graph& g);

struct DagOptions {
  bool collapse = false;  // fold single-input/single-output chains into one node
  std::string title;
};

struct DagNode {
  std::vector<analysis::OpId> ops;  // in chain order; one op unless collapsed
  NodeDecision decision = NodeDecision::forward;
  std::uint64_t bytes = 0;          // bytes the node's ops produce (largest op of a chain)
  std::string label;
  std::string tooltip;  // full op names
};

struct DagModel {
  std::vector<DagNode> nodes;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> edges;  // node -> node, sorted, unique
  std::vector<std::uint32_t> node_of_op;                       // per op
};

// Nodes and edges (op a -> op b when b reads a tensor a makes). With collapse, op b joins a's node when
// a has b as its only successor, b has a as its only predecessor, and both have the same decision.
DagModel build_dag(const analysis::Graph& g, const DagOptions& opts = {});

// Lays the model out with Graphviz's dot and returns the SVG text. Errors: ErrorKind::runtime when
// Graphviz fails (its message included).
std::string render_dag_svg(const DagModel& m, const DagOptions& opts = {});

}  // namespace memplan::viz
