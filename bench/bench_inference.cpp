// Inference arena benchmark: every model in a folder at batch 32 / seq 128, plus a 100,000-op graph.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include "analysis/import.hpp"
#include "analysis/shapes.hpp"
#include "bench/gen_graph.hpp"
#include "planner/inference.hpp"
#include "planner/pack.hpp"

using namespace memplan;
namespace fs = std::filesystem;

namespace {

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double ratio(std::uint64_t a, std::uint64_t b) { return b ? static_cast<double>(a) / static_cast<double>(b) : 0.0; }
double mib(std::uint64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }

nlohmann::json plan_row(const std::string& name, const analysis::Graph& g) {
  const planner::InferencePlan ip = planner::plan_inference(g, {});
  std::uint64_t naive = 0;
  for (auto b : ip.liveness.bytes) naive += b;
  nlohmann::json by_packer;
  for (const auto& packer : planner::packer_names()) {
    planner::AssignOptions o;
    o.packer = packer;
    by_packer[packer] = planner::assign(g, ip.liveness, o).arena_bytes;
  }
  const auto& p = ip.plan;
  return {{"model", name}, {"ops", g.ops.size()}, {"lower_bound_bytes", ip.liveness.lower_bound_bytes},
          {"aliased_lower_bound_bytes", p.aliased_lower_bound_bytes}, {"arena_bytes", p.arena_bytes},
          {"naive_bytes", naive}, {"packer", p.packer}, {"arena_by_packer", by_packer},
          {"arena_over_lower_bound", ratio(p.arena_bytes, ip.liveness.lower_bound_bytes)},
          {"arena_over_aliased_lower_bound", ratio(p.arena_bytes, p.aliased_lower_bound_bytes)},
          {"naive_over_arena", ratio(naive, p.arena_bytes)}, {"plan_seconds", ip.plan_seconds}, {"valid", ip.report.valid}};
}

void print_row(const nlohmann::json& r) {
  std::printf("%-24s %7zu %11.1f %11.1f %11.1f %8.4f %8.4f %8.2f %-18s %9.4f\n", r["model"].get<std::string>().c_str(),
              r["ops"].get<std::size_t>(), mib(r["lower_bound_bytes"]), mib(r["aliased_lower_bound_bytes"]), mib(r["arena_bytes"]),
              r["arena_over_lower_bound"].get<double>(), r["arena_over_aliased_lower_bound"].get<double>(),
              r["naive_over_arena"].get<double>(), r["packer"].get<std::string>().c_str(), r["plan_seconds"].get<double>());
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "../shared/models", json_path = "bench_inference.json";
  std::size_t big_ops = 100000;
  double output_rate = 0.001;  // each graph output lives to the end and overlaps every later buffer
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (a == "--ops" && i + 1 < argc) big_ops = std::stoul(argv[++i]);
    else if (a == "--output-rate" && i + 1 < argc) output_rate = std::stod(argv[++i]);
    else if (a == "--help") {
      std::printf("usage: bench_inference [MODELS_DIR] [--json FILE] [--ops N] [--output-rate R]\n");
      return 0;
    } else dir = a;
  }
  std::vector<fs::path> models;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".onnx") models.push_back(e.path());
  std::sort(models.begin(), models.end());

  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  nlohmann::json out = {{"benchmark", "inference arena"}, {"date", date}, {"machine", cpu_name()}, {"cpus", std::thread::hardware_concurrency()},
                        {"dims", {{"batch", 32}, {"seq", 128}}}, {"alignment", 256}, {"models", nlohmann::json::array()}};
  std::printf("inference arena plans, batch 32, seq 128, 256-byte alignment; %s (%u CPUs, shared); %s\n", cpu_name().c_str(), std::thread::hardware_concurrency(), date);
  std::printf("%-24s %7s %11s %11s %11s %8s %8s %8s %-18s %9s\n", "model", "ops", "bound MiB", "aliased MiB", "arena MiB",
              "ar/bound", "ar/alias", "naive/ar", "packer", "plan s");
  analysis::ShapeOptions so;
  so.dims = {{"batch", 32}, {"seq", 128}};
  for (const auto& m : models) {
    try {
      const auto g = analysis::infer_shapes(analysis::import_onnx(m.string()), so);
      out["models"].push_back(plan_row(m.stem().string(), g));
      print_row(out["models"].back());
    } catch (const Error& e) {
      std::printf("%-24s failed: %s\n", m.stem().string().c_str(), e.what());
      out["models"].push_back({{"model", m.stem().string()}, {"error", e.what()}});
    }
  }

  synthetic::GraphOptions go;
  go.ops = big_ops;
  go.seed = 2024;
  go.output_rate = output_rate;
  auto t0 = std::chrono::steady_clock::now();
  const auto big = synthetic::random_graph(go);
  const double gen_s = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  const auto ip = planner::plan_inference(big, {});
  const double total_s = seconds_since(t0);
  nlohmann::json row = plan_row(big.name, big);
  row["generate_seconds"] = gen_s;
  row["plan_and_verify_seconds"] = total_s;
  row["tensors"] = big.tensors.size();
  row["graph_outputs"] = big.outputs.size();
  out["synthetic"] = row;
  std::printf("\n");
  print_row(row);
  std::printf("synthetic graph: %zu ops, %zu tensors, %zu graph outputs; planned (3 packers) in %.3f s, plan + verify %.3f s\n", big.ops.size(),
              big.tensors.size(), big.outputs.size(), ip.plan_seconds, total_s);
  std::ofstream(json_path) << out.dump(2) << "\n";
  std::printf("JSON written to %s\n", json_path.c_str());
  return 0;
}
