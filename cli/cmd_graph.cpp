// `memplan graph`: the op DAG through Graphviz, coloured by keep/recompute/swap decision, sized by bytes.
#include <chrono>
#include <iostream>

#include "analysis/names.hpp"
#include "cli/registry.hpp"
#include "cli/viz_source.hpp"
#include "viz/dag.hpp"

namespace memplan::cli {
namespace {

struct GraphArgs {
  VizSourceArgs source;
  std::string output;
  bool collapse = false;
};

int run_graph(const GraphArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  auto models = planned_models(a.source);
  const auto& m = models.front();
  viz::DagOptions opts;
  opts.collapse = a.collapse;
  opts.title = m.title;
  const auto dag = viz::build_dag(m.graph, opts);
  analysis::OutputFiles files;  // renamed into place once stdout is written
  files.add(a.output, viz::render_dag_svg(dag, opts));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << analysis::terminal_safe(m.title) << ": " << m.graph.ops.size() << " ops as " << dag.nodes.size() << " nodes, " << dag.edges.size()
            << " edges; graph written to " << a.output << " in " << s << " s\n";
  commit_after_stdout(files);
  return 0;
}

void add_graph(CLI::App& app, std::function<int()>& action) {
  auto args = std::make_shared<GraphArgs>();
  CLI::App* cmd = app.add_subcommand("graph", "SVG of the op DAG (Graphviz), coloured by checkpoint/recompute/swap decision");
  add_viz_source_args(cmd, args->source, true);
  cmd->add_option("-o,--output", args->output, "SVG file to write")->required();
  cmd->add_flag("--collapse", args->collapse, "fold single-input/single-output chains into one node");
  cmd->callback([args, &action] { action = [args] { return run_graph(*args); }; });
}

[[maybe_unused]] const int registered = register_command(61, &add_graph);

}  // namespace
}  // namespace memplan::cli
