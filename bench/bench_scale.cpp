// Scaling benchmark: synthetic graphs of 10^4..10^6 ops (chains, transformer stacks, wide DAGs), time per stage and peak RSS.
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
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
#include "analysis/training.hpp"
#include "planner/inference.hpp"
#include "planner/training_plan.hpp"
#include "planner/verify.hpp"

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

Attribute int_attr(std::int64_t v) {
  Attribute a;
  a.kind = Attribute::Kind::i;
  a.i = v;
  return a;
}
Attribute ints_attr(std::vector<std::int64_t> v) {
  Attribute a;
  a.kind = Attribute::Kind::ints;
  a.ints = std::move(v);
  return a;
}

// x -> Relu -> Relu -> ... : every activation dies one step after it is born.
Graph chain(std::size_t n) {
  Builder b;
  TensorId x = b.input({32, 1024});
  for (std::size_t i = 0; i < n; ++i) x = b.op(i % 2 ? "Relu" : "Sigmoid", {x}, {32, 1024});
  b.output(x);
  return std::move(b.g);
}

// Pre-norm transformer blocks (22 ops each): attention and MLP with residuals, d=512, seq 128, 8 heads.
Graph transformer(std::size_t n) {
  const std::int64_t B = 4, S = 128, D = 512, H = 8, E = D / H, F = 2048;
  Builder b;
  TensorId x = b.input({B, S, D});
  auto w = [&](std::vector<std::int64_t> s) { return b.tensor(std::move(s), TensorRole::weight); };
  auto shape_const = [&](std::vector<std::int64_t> v) {
    TensorId t = b.tensor({static_cast<std::int64_t>(v.size())}, TensorRole::weight);
    b.g.tensors[t].dtype = DType::i64;
    b.g.tensors[t].data = std::make_shared<TensorData>(TensorData::from_int64(DType::i64, {static_cast<std::int64_t>(v.size())}, v));
    return t;
  };
  const TensorId split_heads = shape_const({B, S, H, E}), merge_heads = shape_const({B, S, D});
  auto transpose = [&](TensorId t, std::vector<std::int64_t> perm, std::vector<std::int64_t> out) {
    TensorId r = b.op("Transpose", {t}, std::move(out));
    b.g.ops.back().attrs["perm"] = ints_attr(std::move(perm));
    return r;
  };
  auto layer_norm = [&](TensorId t) {
    TensorId r = b.op("LayerNormalization", {t, w({D}), w({D})}, {B, S, D});
    b.g.ops.back().attrs["axis"] = int_attr(-1);
    return r;
  };
  const std::size_t layers = std::max<std::size_t>(1, n / 22);
  for (std::size_t l = 0; l < layers; ++l) {
    TensorId h = layer_norm(x);
    auto heads = [&](std::vector<std::int64_t> perm, std::vector<std::int64_t> out) {
      TensorId proj = b.op("MatMul", {h, w({D, D})}, {B, S, D});
      return transpose(b.op("Reshape", {proj, split_heads}, {B, S, H, E}), std::move(perm), std::move(out));
    };
    TensorId q = heads({0, 2, 1, 3}, {B, H, S, E}), k = heads({0, 2, 3, 1}, {B, H, E, S}), v = heads({0, 2, 1, 3}, {B, H, S, E});
    TensorId s = b.op("Softmax", {b.op("MatMul", {q, k}, {B, H, S, S})}, {B, H, S, S});
    b.g.ops.back().attrs["axis"] = int_attr(-1);
    TensorId a = transpose(b.op("MatMul", {s, v}, {B, H, S, E}), {0, 2, 1, 3}, {B, S, H, E});
    TensorId o = b.op("MatMul", {b.op("Reshape", {a, merge_heads}, {B, S, D}), w({D, D})}, {B, S, D});
    x = b.op("Add", {x, o}, {B, S, D});
    TensorId f = b.op("Gelu", {b.op("MatMul", {layer_norm(x), w({D, F})}, {B, S, F})}, {B, S, F});
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

// ---- planner stages ---------------------------------------------------------------------------

planner::ScheduleOptions g_schedule;  // --schedule: the library default (memory) unless told

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

const char* planner_columns() {
  return "inference: plan (planner's own) verify arena | training: build plan verify ops arena | optimal, least: "
         "plan arena | optimal at a budget halfway from least to none: plan verify arena overhead";
}

// Inference plan and its independent verification; then a training step (forward, loss, backward, SGD)
// planned without a budget, and by `optimal`: its least peak, then a budget halfway up to the first. Each stage's error is printed in place of its numbers.
void run_planner_stages(const Graph& g) {
  try {
    auto t0 = std::chrono::steady_clock::now();
    const planner::InferencePlan ip = planner::plan_inference(g, {}, g_schedule);
    const double t_plan = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    const bool ok = planner::verify_plan(g, ip.plan).valid;
    std::printf(" | %7.3f (%6.3f) %7.3f %s %.1f MiB", t_plan, ip.plan_seconds, seconds_since(t0), ok ? "ok" : "INVALID",
                static_cast<double>(ip.plan.arena_bytes) / (1 << 20));
  } catch (const std::exception& e) {
    std::printf(" | inference: %s", e.what());
  }
  std::fflush(stdout);
  try {
    auto t0 = std::chrono::steady_clock::now();
    const TrainingGraph tg = build_training_graph(g);
    std::printf(" | %7.3f", seconds_since(t0));
    std::fflush(stdout);
    t0 = std::chrono::steady_clock::now();
    planner::TrainingPlanOptions none;
    none.schedule = g_schedule;
    const planner::TrainingPlanResult r = planner::plan_training(tg, none);
    const double t_plan = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    const bool ok = planner::verify_plan(r.graph, r.plan).valid;
    std::printf(" %7.3f %7.3f %s %zu ops %.1f MiB", t_plan, seconds_since(t0), ok ? "ok" : "INVALID", r.graph.ops.size(),
                static_cast<double>(r.activation_arena_bytes) / (1 << 20));
    std::fflush(stdout);
    // The scalable optimal method: its least peak (no budget), then under a budget halfway between that
    // and the peak of keeping everything.
    planner::TrainingPlanOptions o;
    o.strategy = "optimal";
    o.schedule = g_schedule;
    t0 = std::chrono::steady_clock::now();
    const planner::TrainingPlanResult least = planner::plan_training(tg, o);
    std::printf(" | %7.3f %.1f MiB", seconds_since(t0), static_cast<double>(least.activation_arena_bytes) / (1 << 20));
    std::fflush(stdout);
    o.budget_bytes = least.peak_bytes + (r.peak_bytes - least.peak_bytes) / 2;
    t0 = std::chrono::steady_clock::now();
    const planner::TrainingPlanResult h = planner::plan_training(tg, o);
    const double t_half = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    const bool half_ok = planner::verify_plan(h.graph, h.plan).valid && h.peak_bytes <= *o.budget_bytes;
    std::printf(" | %7.3f %7.3f %s %.1f MiB overhead %.3f", t_half, seconds_since(t0), half_ok ? "ok" : "INVALID",
                static_cast<double>(h.activation_arena_bytes) / (1 << 20), h.recompute_overhead);
  } catch (const std::exception& e) {
    std::printf(" | training: %s", e.what());
  }
}

// ---- timing -----------------------------------------------------------------------------------

unsigned g_stage_limit_s = 60;

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
  std::fflush(stdout);      // what is measured so far survives a stopped stage
  alarm(g_stage_limit_s);  // quadratic stages are stopped, not waited for: the parent reports the timeout
  run_planner_stages(g);
  std::printf("  rss %ld MiB\n", peak_rss_mib());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::size_t> sizes = {10000, 100000, 1000000};
  std::vector<const char*> kinds = {"chain", "transformer", "wide_dag"};
  // Usage: bench_scale [--limit SECONDS] [--only chain|transformer|wide_dag] [--schedule memory|file] [SIZE...]
  int first = 1;
  for (; first + 1 < argc && argv[first][0] == '-'; first += 2) {
    if (std::strcmp(argv[first], "--limit") == 0) g_stage_limit_s = static_cast<unsigned>(std::strtoul(argv[first + 1], nullptr, 10));
    if (std::strcmp(argv[first], "--only") == 0) kinds = {argv[first + 1]};
    if (std::strcmp(argv[first], "--schedule") == 0) {
      const auto k = planner::schedule_kind_from_name(argv[first + 1]);
      if (!k) {
        std::fprintf(stderr, "--schedule %s: not file or memory\n", argv[first + 1]);
        return 2;
      }
      g_schedule.kind = *k;
    }
  }
  if (argc > first) {
    sizes.clear();
    for (int i = first; i < argc; ++i) sizes.push_back(std::strtoull(argv[i], nullptr, 10));
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
  std::printf("# seconds per stage (wall); rss = peak resident set of the run (own process); planner stages stop after %u s\n",
              g_stage_limit_s);
  std::printf("# schedule %s\n", planner::schedule_kind_name(g_schedule.kind));
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
      if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
        std::printf(" | stopped: planner stages over %u s\n", g_stage_limit_s);
      else if (!WIFEXITED(status))
        std::printf(" | killed by signal %d\n", WTERMSIG(status));
    }
  return 0;
}
