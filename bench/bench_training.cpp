// Training memory curves: for each model, peak memory against recompute overhead per strategy, from the
// least peak any strategy reaches up to keeping everything, with the planning time of every plan.
//
// Usage: bench_training MODELS_DIR [JSON_OUT [SVG_DIR]]
// Prints a table; JSON_OUT gets every plan's figures; SVG_DIR gets one chart per model.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/import.hpp"
#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "planner/step.hpp"
#include "planner/training_plan.hpp"
#include "viz/svg.hpp"

using namespace memplan;
namespace fs = std::filesystem;

namespace {

struct ModelSpec {
  std::string file;
  analysis::DimBindings dims;
};

// One architecture each: the training-mode export where there is one, else the symbolic-dims one.
const std::vector<ModelSpec> kModels = {
    {"resnet18.train.onnx", {{"batch", 32}}},     {"resnet50.train.onnx", {{"batch", 32}}},
    {"mobilenet_v2.train.onnx", {{"batch", 32}}}, {"vgg16.train.onnx", {{"batch", 32}}},
    {"bert_base.dyn.onnx", {{"batch", 8}, {"seq", 128}}}, {"distilbert.dyn.onnx", {{"batch", 8}, {"seq", 128}}},
    {"tiny_gpt.onnx", {}},                        {"tiny_cnn.onnx", {}},
};

// Strategies that take a budget; `none` and `sqrt` have one plan each.
const std::vector<std::string> kBudgeted = {"budget", "optimal", "swap", "auto"};
constexpr int kBudgetPoints = 8;  // budgets from the least peak to none's, both included

double gib(std::uint64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0); }

struct Point {
  std::string strategy;
  std::uint64_t budget = 0;  // 0: no budget (the strategy's least peak)
  bool feasible = false;
  std::uint64_t peak = 0, arena = 0, swap = 0;
  double overhead = 0.0;          // recompute FLOPs / one training step's FLOPs
  double forward_overhead = 0.0;  // recompute FLOPs / one forward pass's FLOPs
  double step_seconds = 0.0, plan_seconds = 0.0;
  bool valid = false;
};

Point run(const analysis::TrainingGraph& tg, const std::string& strategy, std::uint64_t budget) {
  planner::TrainingPlanOptions o;
  o.strategy = strategy;
  if (budget) o.budget_bytes = budget;
  Point p;
  p.strategy = strategy;
  p.budget = budget;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    const planner::TrainingPlanResult r = planner::plan_training(tg, o);
    p.feasible = true;
    p.peak = r.peak_bytes;
    p.arena = r.activation_arena_bytes;
    p.swap = r.swap_bytes;
    p.overhead = r.recompute_overhead;
    p.forward_overhead = r.forward_flops > 0 ? r.recompute_flops / r.forward_flops : 0.0;
    p.step_seconds = r.estimated_step_seconds;
    p.valid = r.report.valid && (!budget || r.peak_bytes <= budget);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::infeasible) throw;
  }
  p.plan_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return p;
}

nlohmann::json to_json(const Point& p) {
  return {{"strategy", p.strategy}, {"budget_bytes", p.budget}, {"feasible", p.feasible}, {"peak_bytes", p.peak},
          {"activation_arena_bytes", p.arena}, {"swap_bytes", p.swap}, {"recompute_overhead", p.overhead},
          {"recompute_over_forward", p.forward_overhead}, {"estimated_step_seconds", p.step_seconds},
          {"plan_seconds", p.plan_seconds}, {"plan_valid", p.valid}};
}

void print(const Point& p) {
  if (!p.feasible) {
    std::printf("  %-8s budget %8.3f GiB  infeasible                                                     %7.3f s\n",
                p.strategy.c_str(), gib(p.budget), p.plan_seconds);
    return;
  }
  std::printf("  %-8s budget %8.3f GiB  peak %8.3f GiB  recompute %6.3f step (%6.3f fwd)  swap %7.3f GiB  %s  %7.3f s\n",
              p.strategy.c_str(), gib(p.budget), gib(p.peak), p.overhead, p.forward_overhead, gib(p.swap),
              p.valid ? "valid" : "INVALID", p.plan_seconds);
}

// Peak (y) against recompute overhead in forward passes (x), one polyline per strategy.
std::string chart(const std::string& title, const std::vector<Point>& points, std::uint64_t floor, std::uint64_t none) {
  const double w = 640, h = 400, left = 80, right = 150, top = 40, bottom = 50;
  double max_x = 0.05;
  for (const auto& p : points)
    if (p.feasible) max_x = std::max(max_x, p.forward_overhead);
  const viz::Scale x{0, max_x * 1.05, left, w - right};
  const viz::Scale y{0, static_cast<double>(none) * 1.05, h - bottom, top};
  const std::map<std::string, std::string> color = {{"none", "#444"},   {"sqrt", "#d62728"}, {"budget", "#ff7f0e"},
                                                    {"optimal", "#1f77b4"}, {"swap", "#2ca02c"}, {"auto", "#9467bd"}};
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + viz::num(w) + "\" height=\"" + viz::num(h) +
                  "\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + viz::num(left) + "\" y=\"20\" font-size=\"14\">" + viz::xml_escape(title) + "</text>\n";
  for (std::uint64_t t : viz::byte_ticks(static_cast<std::uint64_t>(static_cast<double>(none) * 1.05))) {
    s += "<line x1=\"" + viz::num(left) + "\" x2=\"" + viz::num(w - right) + "\" y1=\"" + viz::num(y(static_cast<double>(t))) +
         "\" y2=\"" + viz::num(y(static_cast<double>(t))) + "\" stroke=\"#eee\"/>\n";
    s += "<text x=\"" + viz::num(left - 6) + "\" y=\"" + viz::num(y(static_cast<double>(t)) + 4) + "\" text-anchor=\"end\">" +
         viz::bytes_label(t) + "</text>\n";
  }
  for (int k = 0; k <= 5; ++k) {
    const double v = max_x * k / 5;
    s += "<text x=\"" + viz::num(x(v)) + "\" y=\"" + viz::num(h - bottom + 16) + "\" text-anchor=\"middle\">" + viz::num(v) + "</text>\n";
  }
  s += "<text x=\"" + viz::num((left + w - right) / 2) + "\" y=\"" + viz::num(h - 12) +
       "\" text-anchor=\"middle\">recompute FLOPs / one forward pass</text>\n";
  s += "<text x=\"14\" y=\"" + viz::num((top + h - bottom) / 2) + "\" transform=\"rotate(-90 14 " + viz::num((top + h - bottom) / 2) +
       ")\" text-anchor=\"middle\">peak device memory</text>\n";
  s += "<line x1=\"" + viz::num(left) + "\" x2=\"" + viz::num(w - right) + "\" y1=\"" + viz::num(y(static_cast<double>(floor))) +
       "\" y2=\"" + viz::num(y(static_cast<double>(floor))) + "\" stroke=\"#999\" stroke-dasharray=\"4 3\"/>\n";
  int legend = 0;
  for (const auto& [name, c] : color) {
    std::vector<const Point*> line;
    for (const auto& p : points)
      if (p.feasible && p.strategy == name) line.push_back(&p);
    if (line.empty()) continue;
    std::sort(line.begin(), line.end(), [](const Point* a, const Point* b) { return a->peak > b->peak; });
    std::string pts;
    for (const Point* p : line) {
      const double px = x(p->forward_overhead), py = y(static_cast<double>(p->peak));
      pts += viz::num(px) + "," + viz::num(py) + " ";
      s += "<circle cx=\"" + viz::num(px) + "\" cy=\"" + viz::num(py) + "\" r=\"3\" fill=\"" + c + "\"/>\n";
    }
    if (line.size() > 1) s += "<polyline points=\"" + pts + "\" fill=\"none\" stroke=\"" + c + "\" stroke-width=\"1.5\"/>\n";
    const double ly = top + 16.0 * legend++;
    s += "<rect x=\"" + viz::num(w - right + 14) + "\" y=\"" + viz::num(ly - 8) + "\" width=\"10\" height=\"10\" fill=\"" + c + "\"/>";
    s += "<text x=\"" + viz::num(w - right + 30) + "\" y=\"" + viz::num(ly + 1) + "\">" + name + "</text>\n";
  }
  return s + "</svg>\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_training MODELS_DIR [JSON_OUT [SVG_DIR]]\n");
    return 2;
  }
  const fs::path dir = argv[1];
  nlohmann::json out = nlohmann::json::array();
  std::printf("# memplan bench_training: peak against recompute overhead per strategy (optimizer adam)\n");
  std::printf("# recompute: FLOPs recomputed / FLOPs of one training step (and / one forward pass); seconds: planning time\n");
  for (const auto& spec : kModels) {
    if (!fs::exists(dir / spec.file)) continue;
    analysis::ShapeOptions so;
    so.dims = spec.dims;
    planner::StepRequest req;  // fused as `memplan plan --train` fuses (planner/step.hpp)
    req.training.optimizer = analysis::Optimizer::adam;
    const analysis::TrainingGraph tg =
        planner::build_training_step(analysis::infer_shapes(analysis::import_onnx((dir / spec.file).string()), so), req).training;
    std::string title = spec.file;
    for (const auto& [k, v] : spec.dims) title += " " + k + "=" + std::to_string(v);
    std::printf("\n%s: %zu training ops\n", title.c_str(), tg.graph.ops.size());
    std::vector<Point> points;
    points.push_back(run(tg, "none", 0));
    points.push_back(run(tg, "sqrt", 0));
    std::uint64_t floor = points[1].peak;
    for (const auto& s : kBudgeted) {
      points.push_back(run(tg, s, 0));
      if (points.back().feasible) floor = std::min(floor, points.back().peak);
    }
    for (const auto& p : points) print(p);
    const std::uint64_t none = points[0].peak, sqrt_peak = points[1].peak;
    for (int k = 0; k <= kBudgetPoints; ++k) {
      const std::uint64_t budget = floor + (none - floor) * static_cast<std::uint64_t>(k) / kBudgetPoints;
      for (const auto& s : kBudgeted) {
        points.push_back(run(tg, s, budget));
        print(points.back());
      }
    }
    // The goal: at the memory sqrt(N) reaches, recompute at most a third of one forward pass.
    std::printf("  at the sqrt(N) peak %.3f GiB (sqrt recomputes %.3f forward passes):\n", gib(sqrt_peak), points[1].forward_overhead);
    nlohmann::json at_sqrt;
    for (const char* s : {"optimal", "auto"}) {
      points.push_back(run(tg, s, sqrt_peak));
      print(points.back());
      at_sqrt[s] = points.back().forward_overhead;
    }
    nlohmann::json pj = nlohmann::json::array();
    for (const auto& p : points) pj.push_back(to_json(p));
    out.push_back({{"model", spec.file}, {"dims", spec.dims}, {"training_ops", tg.graph.ops.size()}, {"none_peak_bytes", none},
                   {"least_peak_bytes", floor}, {"sqrt_peak_bytes", sqrt_peak},
                   {"sqrt_recompute_over_forward", points[1].forward_overhead}, {"at_sqrt_peak_recompute_over_forward", at_sqrt},
                   {"points", pj}});
    if (argc > 3) {
      fs::create_directories(argv[3]);
      std::ofstream(fs::path(argv[3]) / (fs::path(spec.file).stem().string() + ".svg")) << chart(title, points, floor, none);
    }
    std::fflush(stdout);
  }
  if (argc > 2) std::ofstream(argv[2]) << out.dump(1) << "\n";
  return 0;
}
