// Scaling benchmark: synthetic graphs of 10^4..10^6 ops (chains, transformer stacks, wide DAGs), time per stage and peak RSS.
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "analysis/graph.hpp"
#include "analysis/liveness.hpp"

namespace {

using namespace memplan;
using namespace memplan::analysis;

// ---- graph generators -------------------------------------------------------------------------

struct Builder {
  Graph g;
  std::uint64_t next = 0;

  TensorId tensor(std::vector<std::int64_t> shape, TensorRole role = TensorRole::activation) {
    Tensor t;
    t.name = "t" + std::to_string(next++);
    t.dtype = DType::f32;
    t.role = role;
    t.rank_known = true;
    for (auto d : shape) t.dims.push_back(Dim::of(d));
    return g.add_tensor(std::move(t));
  }
  TensorId input(std::vector<std::int64_t> shape) {
    TensorId t = tensor(std::move(shape), TensorRole::input);
    g.inputs.push_back(t);
    return t;
  }
  TensorId op(const char* type, std::vector<TensorId> ins, std::vector<std::int64_t> out_shape) {
    Op o;
    o.type = type;
    o.name = std::string(type) + "_" + std::to_string(g.ops.size());
    o.inputs = std::move(ins);
    TensorId out = tensor(std::move(out_shape));
    o.outputs = {out};
    g.add_op(std::move(o));
    return out;
  }
  void output(TensorId t) {
    g.outputs.push_back(t);
    g.tensors[t].is_graph_output = true;
  }
};

// x -> Relu -> Relu -> ... : every activation dies one step after it is born.
Graph chain(std::size_t n) {
  Builder b;
  TensorId x = b.input({32, 1024});
  for (std::size_t i = 0; i < n; ++i) x = b.op(i % 2 ? "Relu" : "Sigmoid", {x}, {32, 1024});
  b.output(x);
  return std::move(b.g);
}

// Pre-norm transformer blocks (18 ops each): attention and MLP with residuals, d=512, seq 128, 8 heads.
Graph transformer(std::size_t n) {
  const std::int64_t B = 4, S = 128, D = 512, H = 8, F = 2048;
  Builder b;
  TensorId x = b.input({B, S, D});
  const std::size_t layers = std::max<std::size_t>(1, n / 18);
  for (std::size_t l = 0; l < layers; ++l) {
    auto w = [&](std::vector<std::int64_t> s) { return b.tensor(std::move(s), TensorRole::weight); };
    TensorId h = b.op("LayerNormalization", {x, w({D}), w({D})}, {B, S, D});
    TensorId q = b.op("MatMul", {h, w({D, D})}, {B, S, D});
    TensorId k = b.op("MatMul", {h, w({D, D})}, {B, S, D});
    TensorId v = b.op("MatMul", {h, w({D, D})}, {B, S, D});
    TensorId qh = b.op("Transpose", {b.op("Reshape", {q}, {B, S, H, D / H})}, {B, H, S, D / H});
    TensorId kh = b.op("Transpose", {k}, {B, H, D / H, S});
    TensorId s = b.op("Softmax", {b.op("MatMul", {qh, kh}, {B, H, S, S})}, {B, H, S, S});
    TensorId a = b.op("MatMul", {s, v}, {B, H, S, D / H});
    TensorId o = b.op("MatMul", {b.op("Reshape", {a}, {B, S, D}), w({D, D})}, {B, S, D});
    x = b.op("Add", {x, o}, {B, S, D});
    TensorId h2 = b.op("LayerNormalization", {x, w({D}), w({D})}, {B, S, D});
    TensorId f = b.op("Gelu", {b.op("MatMul", {h2, w({D, F})}, {B, S, F})}, {B, S, F});
    x = b.op("Add", {x, b.op("MatMul", {f, w({F, D})}, {B, S, D})}, {B, S, D});
  }
  b.output(x);
  return std::move(b.g);
}

// Random DAG: each op adds two earlier tensors, one recent and one from anywhere (long lifetimes, many live).
Graph wide_dag(std::size_t n) {
  Builder b;
  std::mt19937_64 rng(42);
  std::vector<TensorId> made;
  for (int i = 0; i < 64; ++i) made.push_back(b.input({256, 256}));
  for (std::size_t i = 0; i < n; ++i) {
    std::uniform_int_distribution<std::size_t> recent(made.size() > 64 ? made.size() - 64 : 0, made.size() - 1);
    std::uniform_int_distribution<std::size_t> any(0, made.size() - 1);
    made.push_back(b.op("Add", {made[recent(rng)], made[any(rng)]}, {256, 256}));
  }
  // Every op's result is consumed or an output: leaves become outputs, as a real model's heads would.
  for (TensorId t = 0; t < b.g.tensors.size(); ++t)
    if (b.g.tensors[t].producer != kNoOp && b.g.tensors[t].consumers.empty()) b.output(t);
  return std::move(b.g);
}

// ---- planner stages (joined as the planner lands) -------------------------------------------

const char* planner_columns() { return ""; }

void run_planner_stages(const Graph&, const Liveness&) {}

// ---- timing -----------------------------------------------------------------------------------

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

long peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024;
}

// One (generator, size) in a child process, so that peak RSS is this run's own.
void run_one(const char* kind, std::size_t n) {
  auto t0 = std::chrono::steady_clock::now();
  Graph g = std::strcmp(kind, "chain") == 0 ? chain(n) : std::strcmp(kind, "transformer") == 0 ? transformer(n) : wide_dag(n);
  const double t_build = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  g.validate();
  const double t_validate = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  const std::vector<OpId> order = topological_order(g);
  const double t_topo = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  const Liveness l = analyze_liveness(g, order);
  const double t_live = seconds_since(t0);
  std::printf("%-12s %8zu %9zu %8.3f %8.3f %8.3f %8.3f  lower bound %.1f MiB", kind, g.ops.size(), g.tensors.size(), t_build,
              t_validate, t_topo, t_live, static_cast<double>(l.lower_bound_bytes) / (1 << 20));
  run_planner_stages(g, l);
  std::printf("  rss %ld MiB\n", peak_rss_mib());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::size_t> sizes = {10000, 100000, 1000000};
  std::vector<const char*> kinds = {"chain", "transformer", "wide_dag"};
  if (argc > 1) {
    sizes.clear();
    for (int i = 1; i < argc; ++i) sizes.push_back(std::strtoull(argv[i], nullptr, 10));
  }
  utsname u{};
  uname(&u);
  std::string cpu = "unknown cpu";
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);)
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  std::printf("# memplan bench_scale on %s (%s %s), %s, %ld cores\n", u.nodename, u.sysname, u.release, cpu.c_str(),
              sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("# seconds per stage; rss = peak resident set of the run (own process)\n");
  std::printf("%-12s %8s %9s %8s %8s %8s %8s  %s\n", "graph", "ops", "tensors", "build", "validate", "topo", "liveness",
              planner_columns());
  for (const char* kind : kinds)
    for (std::size_t n : sizes) {
      std::fflush(stdout);
      const pid_t pid = fork();
      if (pid == 0) {
        try {
          run_one(kind, n);
        } catch (const std::exception& e) {
          std::printf("  error: %s\n", e.what());
          std::fflush(stdout);
          _exit(1);
        }
        _exit(0);
      }
      int status = 0;
      waitpid(pid, &status, 0);
      if (!WIFEXITED(status)) std::printf("%-12s %8zu  killed by signal %d\n", kind, n, WTERMSIG(status));
    }
  return 0;
}
