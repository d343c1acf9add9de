// Tests of the DAG picture: decisions read from a transformed graph, chain folding, Graphviz SVG output.
#include <doctest/doctest.h>

#include "tests/viz/viz_fixtures.hpp"
#include "viz/dag.hpp"

using namespace memplan;
using namespace memplan::viz;
using namespace memplan::viz::testing;

namespace {

OpId add_unary(Graph& g, const std::string& name, const std::string& type, Phase ph, std::vector<TensorId> in, TensorId out) {
  Op o;
  o.name = name;
  o.type = type;
  o.phase = ph;
  o.inputs = std::move(in);
  o.outputs = {out};
  return g.add_op(o);
}

// a -> b -> c forward, SwapOut of a's output, a recompute clone of b, backward reading c and the clone.
Graph tiny_training() {
  Graph g;
  const TensorId x = add_f32(g, "x", 8, TensorRole::input);
  g.inputs.push_back(x);
  const TensorId ta = add_f32(g, "ta", 1000), tb = add_f32(g, "tb", 10), tc = add_f32(g, "tc", 10);
  const TensorId host = add_f32(g, "ta@host", 1000), back = add_f32(g, "ta@swapin", 1000);
  const TensorId clone = add_f32(g, "tb@recompute0", 10), dc = add_f32(g, "dc", 10), dx = add_f32(g, "dx", 10);
  add_unary(g, "a", "Conv", Phase::forward, {x}, ta);
  add_unary(g, "b", "Relu", Phase::forward, {ta}, tb);
  add_unary(g, "c", "Relu", Phase::forward, {tb}, tc);
  add_unary(g, "so", "SwapOut", Phase::swap, {ta}, host);
  g.tensors[host].on_host = true;
  add_unary(g, "b@recompute0", "Relu", Phase::recompute, {ta}, clone);
  add_unary(g, "si", "SwapIn", Phase::swap, {host}, back);
  add_unary(g, "dc_op", "ReluGrad", Phase::backward, {tc, clone}, dc);
  add_unary(g, "dx_op", "ConvGrad", Phase::backward, {dc, back}, dx);
  g.outputs.push_back(dx);
  g.tensors[dx].is_graph_output = true;
  return g;
}

}  // namespace

TEST_CASE("decisions come from the graph: swapped, recomputed, checkpoint, clones and copies") {
  Graph g = tiny_training();
  auto d = op_decisions(g);
  CHECK(d[0] == NodeDecision::swapped);
  CHECK(d[1] == NodeDecision::recomputed);
  CHECK(d[2] == NodeDecision::checkpoint);
  CHECK(d[3] == NodeDecision::swap_copy);
  CHECK(d[4] == NodeDecision::recompute_clone);
  CHECK(d[6] == NodeDecision::backward);
  Graph inf = random_chain(10, 3, 100, 1);
  for (auto x : op_decisions(inf)) CHECK(x == NodeDecision::forward);
}

TEST_CASE("without collapse every op is a node and every producer-consumer pair an edge") {
  Graph g = random_chain(30, 4, 1000, 3);
  auto m = build_dag(g);
  CHECK(m.nodes.size() == g.ops.size());
  std::size_t pairs = 0;
  for (const auto& op : g.ops) {
    std::vector<OpId> p;
    for (auto t : op.inputs)
      if (g.tensors[t].producer != kNoOp) p.push_back(g.tensors[t].producer);
    std::sort(p.begin(), p.end());
    pairs += static_cast<std::size_t>(std::unique(p.begin(), p.end()) - p.begin());
  }
  CHECK(m.edges.size() == pairs);
}

TEST_CASE("collapse folds a pure chain into one node and keeps branches apart") {
  Graph chain = random_chain(50, 1, 1000, 4);  // max_reach 1: a straight line
  auto m = build_dag(chain, {true, ""});
  CHECK(m.nodes.size() == 1);
  CHECK(m.nodes[0].ops.size() == 50);
  CHECK(m.edges.empty());
  Graph g = random_chain(60, 5, 1000, 5);
  auto full = build_dag(g), folded = build_dag(g, {true, ""});
  CHECK(folded.nodes.size() <= full.nodes.size());
  // Every op is in exactly one node, and an edge of the op graph between two nodes stays an edge.
  std::size_t ops = 0;
  for (const auto& n : folded.nodes) ops += n.ops.size();
  CHECK(ops == g.ops.size());
  for (const auto& [a, b] : full.edges) {
    const auto na = folded.node_of_op[full.nodes[a].ops[0]], nb = folded.node_of_op[full.nodes[b].ops[0]];
    if (na != nb) CHECK(std::binary_search(folded.edges.begin(), folded.edges.end(), std::make_pair(na, nb)));
  }
  // Different decisions never fold together.
  auto t = build_dag(tiny_training(), {true, ""});
  for (const auto& n : t.nodes) {
    auto d = op_decisions(tiny_training());
    for (auto o : n.ops) CHECK(d[o] == n.decision);
  }
}

TEST_CASE("Graphviz renders an SVG with one node per model node, coloured by decision") {
  Graph g = tiny_training();
  auto m = build_dag(g);
  const std::string svg = render_dag_svg(m, {false, "tiny"});
  CHECK(svg.find("<svg") != std::string::npos);
  CHECK(count_of(svg, "class=\"node") == m.nodes.size());
  CHECK(svg.find(node_decision_colour(NodeDecision::recompute_clone)) != std::string::npos);
  CHECK(svg.find("b@recompute0") != std::string::npos);
  // Bigger producers get bigger boxes: node a (4000 bytes) is wider than node c (40 bytes).
  CHECK(m.nodes[0].bytes > m.nodes[2].bytes);
}
