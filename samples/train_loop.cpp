// A training loop that links memplan: a small model (tiny_gpt by default) trained with SGD on synthetic data, every activation and
// gradient in one planned arena, under a memory budget met by checkpointing (recomputation).
// The step is built and planned by the same entry point as `memplan plan --train` (planner/step.hpp): fused as the
// command fuses, with the command's defaults, so its plan is the command's.
// Usage: build/sample_train_loop [samples/models/tiny_gpt.onnx] [steps] [PLAN_JSON_OUT]
#include <cstdio>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include "analysis/import.hpp"
#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "planner/plan_json.hpp"
#include "planner/step.hpp"
#include "runtime_allocator/executor.hpp"

using namespace memplan;

int main(int argc, char** argv) {
  const std::string model = argc > 1 ? argv[1] : "samples/models/tiny_gpt.onnx";
  const int steps = argc > 2 ? std::stoi(argv[2]) : 200;
  try {
    analysis::ImportOptions io;
    io.keep_weight_data = true;
    planner::StepRequest req;
    req.training.optimizer = analysis::Optimizer::sgd;
    req.training.learning_rate = 0.05;
    const analysis::Graph forward = analysis::infer_shapes(analysis::import_onnx(model, io), {});
    const planner::TrainingStep step = planner::build_training_step(forward, req);
    const analysis::TrainingGraph& tg = step.training;

    // The budget: halfway between what keeping everything and the least-memory checkpointing need, with the libraries'
    // bytes beside the plan (the budget is the device's whole memory).
    planner::TrainingPlanOptions po = step.options;
    po.strategy = "none";
    const auto keep_all = planner::plan_training(tg, po);
    po.strategy = "sqrt";
    const auto least = planner::plan_training(tg, po);
    po.strategy = "optimal";
    po.budget_bytes = po.library_bytes + (keep_all.peak_bytes + least.peak_bytes) / 2;
    const planner::TrainingPlanResult r = planner::plan_training(tg, po);
    if (argc > 3) {  // the plan as `memplan plan --save-plan` writes it (graph embedded)
      std::ofstream out(argv[3]);
      out << planner::plan_to_json(r.graph, r.plan, true).dump(1) << "\n";
      if (!out) throw Error(ErrorKind::io, std::string("cannot write ") + argv[3]);
    }
    std::printf("plan: strategy %s, budget %llu B, peak %llu B (keep-all %llu B), arena %llu B, %zu recomputed tensors\n",
                r.strategy.c_str(), static_cast<unsigned long long>(*po.budget_bytes),
                static_cast<unsigned long long>(r.peak_bytes), static_cast<unsigned long long>(keep_all.peak_bytes),
                static_cast<unsigned long long>(r.activation_arena_bytes), r.recomputed_tensors);

    const analysis::Graph& g = r.graph;
    runtime::HostBackend backend;
    runtime::Executor ex(g, r.plan, backend);  // the arena is allocated once, here

    // Synthetic task: targets are a fixed random linear map of the inputs, squashed to [0, 1].
    std::mt19937 rng(7);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::vector<analysis::TensorData> feeds;
    const auto& x = g.tensors[g.inputs[0]];
    const auto& y = g.tensors[g.inputs[1]];
    std::vector<double> xv(x.element_count()), yv(y.element_count());
    for (auto& v : xv) v = normal(rng);
    const std::size_t batch = static_cast<std::size_t>(x.shape()[0]), in = xv.size() / batch, out = yv.size() / batch;
    std::vector<double> map(in * out);
    for (auto& v : map) v = normal(rng) / std::sqrt(static_cast<double>(in));
    for (std::size_t b = 0; b < batch; ++b)
      for (std::size_t j = 0; j < out; ++j) {
        double s = 0;
        for (std::size_t i = 0; i < in; ++i) s += xv[b * in + i] * map[i * out + j];
        yv[b * out + j] = 1.0 / (1.0 + std::exp(-s)) / static_cast<double>(out) * 2.0;
      }
    feeds.push_back(analysis::TensorData::from_double(x.dtype, x.shape(), xv));
    feeds.push_back(analysis::TensorData::from_double(y.dtype, y.shape(), yv));

    // SGD updates every weight in place (its W' is W's storage), so each run trains on the last one's weights.
    const analysis::TensorId loss_id = g.at(tg.graph.tensors[tg.loss].name);
    float first = 0, last = 0;
    for (int s = 0; s < steps; ++s) {
      ex.run(feeds);
      float loss;
      std::memcpy(&loss, ex.address(loss_id), sizeof loss);
      if (s == 0) first = loss;
      last = loss;
      if (s % 50 == 0 || s == steps - 1) std::printf("step %4d  loss %.6f\n", s, loss);
    }
    const auto& st = ex.stats();
    std::printf("arena %llu B, touched %llu B; loss %.6f -> %.6f\n", static_cast<unsigned long long>(st.arena_bytes),
                static_cast<unsigned long long>(st.touched_bytes), first, last);
    return last < first ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "error (%s): %s\n", error_kind_name(e.kind()), e.what());
    return static_cast<int>(e.kind());
  }
}
