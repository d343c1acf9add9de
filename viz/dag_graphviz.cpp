// Renders a DagModel through Graphviz's C library (cgraph + gvc, dot layout, SVG output).
#include <graphviz/gvc.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>

#include "viz/dag.hpp"
#include "viz/svg.hpp"

namespace memplan::viz {
namespace {

// cgraph takes char* everywhere; these keep the strings alive for the call.
void set(void* obj, const char* key, const std::string& value) {
  std::string k = key, v = value, empty;
  agsafeset(obj, k.data(), v.data(), empty.data());
}

void set_default(Agraph_t* g, int kind, const char* key, const std::string& value) {
  std::string k = key, v = value;
  agattr(g, kind, k.data(), v.data());
}

std::string legend_html(const DagModel& m, const std::string& title) {
  std::array<bool, kNodeDecisions> used{};
  for (const auto& n : m.nodes) used[static_cast<int>(n.decision)] = true;
  std::string h = "<table border=\"0\" cellspacing=\"4\"><tr>";
  if (!title.empty()) h += "<td><b>" + xml_escape(title) + "</b></td>";
  for (int d = 0; d < kNodeDecisions; ++d) {
    if (!used[d]) continue;
    const auto nd = static_cast<NodeDecision>(d);
    h += std::string("<td bgcolor=\"") + node_decision_colour(nd) + "\" border=\"1\"> " + node_decision_name(nd) + " </td>";
  }
  return h + "<td>box area ~ bytes produced</td></tr></table>";
}

// One Graphviz context for the process, never freed: the pango text-layout plugin keeps a pointer to the
// last font name it measured, which the context owns (gvtextlayout_pango.c, `static char *fontname`), and
// compares it on its next call. Freeing the context between two renderings made the second read freed
// memory (found by fuzz_cli running `graph` twice in one process).
GVC_t* graphviz_context() {
  static GVC_t* const gvc = gvContext();
  return gvc;
}

}  // namespace

std::string render_dag_svg(const DagModel& m, const DagOptions& opts) {
  agseterr(AGMAX);  // keep Graphviz quiet; failures are reported through the return codes below
  GVC_t* const gvc = graphviz_context();
  if (!gvc) fail(ErrorKind::runtime, "Graphviz: cannot create a context");
  std::string name = "memplan";
  std::unique_ptr<Agraph_t, int (*)(Agraph_t*)> g(agopen(name.data(), Agdirected, nullptr), agclose);
  const bool big = m.nodes.size() > 150;
  set_default(g.get(), AGRAPH, "rankdir", "TB");
  set_default(g.get(), AGRAPH, "nodesep", "0.15");
  set_default(g.get(), AGRAPH, "ranksep", "0.25");
  set_default(g.get(), AGRAPH, "fontname", "Helvetica");
  set_default(g.get(), AGRAPH, "labelloc", "t");
  set_default(g.get(), AGRAPH, "fontsize", "11");
  if (big) {  // dot's crossing minimisation and network simplex dominate on thousands of nodes
    set_default(g.get(), AGRAPH, "mclimit", "0.05");
    set_default(g.get(), AGRAPH, "nslimit", "0.5");
    set_default(g.get(), AGRAPH, "nslimit1", "0.5");
    set_default(g.get(), AGRAPH, "remincross", "false");
    set_default(g.get(), AGRAPH, "splines", "line");
  }
  set_default(g.get(), AGNODE, "shape", "box");
  set_default(g.get(), AGNODE, "style", "filled,rounded");
  set_default(g.get(), AGNODE, "fontname", "Helvetica");
  set_default(g.get(), AGNODE, "fontsize", "9");
  set_default(g.get(), AGNODE, "penwidth", "0.6");
  set_default(g.get(), AGNODE, "fillcolor", "#ffffff");
  set_default(g.get(), AGNODE, "width", "0.75");
  set_default(g.get(), AGNODE, "height", "0.3");
  set_default(g.get(), AGNODE, "label", "");
  set_default(g.get(), AGNODE, "tooltip", "");
  set_default(g.get(), AGNODE, "id", "");
  set_default(g.get(), AGNODE, "class", "");
  set_default(g.get(), AGEDGE, "arrowsize", "0.5");
  set_default(g.get(), AGEDGE, "penwidth", "0.6");
  set_default(g.get(), AGEDGE, "color", "#555555");
  {
    std::string k = "label", html = legend_html(m, opts.title);
    agattr(g.get(), AGRAPH, k.data(), agstrdup_html(g.get(), html.data()));
  }
  std::uint64_t max_bytes = 1;
  for (const auto& n : m.nodes) max_bytes = std::max(max_bytes, n.bytes);
  std::vector<Agnode_t*> nodes;
  nodes.reserve(m.nodes.size());
  for (std::size_t i = 0; i < m.nodes.size(); ++i) {
    const auto& n = m.nodes[i];
    std::string id = "n" + std::to_string(i);
    Agnode_t* v = agnode(g.get(), id.data(), 1);
    const double r = std::sqrt(static_cast<double>(n.bytes) / static_cast<double>(max_bytes));
    set(v, "label", n.label);
    set(v, "tooltip", n.tooltip);
    set(v, "fillcolor", node_decision_colour(n.decision));
    set(v, "width", num(0.75 + 2.0 * r));
    set(v, "height", num(0.3 + 0.45 * r));
    set(v, "id", "node-" + std::to_string(i));
    set(v, "class", std::string("op ") + node_decision_name(n.decision));
    nodes.push_back(v);
  }
  for (const auto& [a, b] : m.edges) agedge(g.get(), nodes[a], nodes[b], nullptr, 1);
  if (gvLayout(gvc, g.get(), "dot") != 0) {
    const char* e = aglasterr();
    fail(ErrorKind::runtime, std::string("Graphviz dot layout failed") + (e ? ": " + std::string(e) : ""));
  }
  char* data = nullptr;
  unsigned int length = 0;
  const int rc = gvRenderData(gvc, g.get(), "svg", &data, &length);
  std::string svg = rc == 0 && data ? std::string(data, length) : std::string();
  if (data) gvFreeRenderData(data);
  gvFreeLayout(gvc, g.get());
  if (rc != 0 || svg.empty()) fail(ErrorKind::runtime, "Graphviz could not render SVG (is the core plugin installed?)");
  return svg;
}

}  // namespace memplan::viz
