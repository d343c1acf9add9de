// Links the installed memplan: plans a two-op graph, runs it on the host arena, checks the numbers.
#include <cstdio>

#include "analysis/graph.hpp"
#include "planner/inference.hpp"
#include "runtime_allocator/executor.hpp"

using namespace memplan;

int main() {
  analysis::Graph g;
  auto mk = [&](const char* name, analysis::TensorRole role) {
    analysis::Tensor t;
    t.name = name;
    t.dtype = analysis::DType::f32;
    t.dims = {analysis::Dim::of(4)};
    t.rank_known = true;
    t.role = role;
    return g.add_tensor(t);
  };
  auto x = mk("x", analysis::TensorRole::input), a = mk("a", analysis::TensorRole::activation),
       y = mk("y", analysis::TensorRole::activation);
  g.inputs = {x};
  g.add_op({"r", "Relu", "", {x}, {a}, {}});
  g.add_op({"n", "Neg", "", {a}, {y}, {}});
  g.outputs = {y};
  g.tensors[y].is_graph_output = true;
  auto ip = planner::plan_inference(g, {});
  runtime::HostBackend backend;
  runtime::Executor ex(g, ip.plan, backend);
  auto out = ex.run({analysis::TensorData::from_double(analysis::DType::f32, {4}, {-1.0, 2.0, -3.0, 4.0})});
  auto v = out.at(0).as_double();
  const bool ok = v == std::vector<double>{-0.0, -2.0, -0.0, -4.0};
  std::printf("consumer: arena %llu B, output %s\n", static_cast<unsigned long long>(ip.plan.arena_bytes), ok ? "right" : "WRONG");
  return ok ? 0 : 1;
}
