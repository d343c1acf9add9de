// `memplan run`: executes a model on the CPU or CUDA backend with a verified arena plan (or unshared), .npy in and out.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>

#include "analysis/names.hpp"
#include "analysis/json_read.hpp"
#include "analysis/liveness.hpp"
#include "analysis/output_files.hpp"
#include "cli/common.hpp"
#include "cli/fusion_report.hpp"
#include "cli/registry.hpp"
#include "planner/inference.hpp"
#include "planner/plan_json.hpp"
#include "planner/verify.hpp"
#include "runtime_allocator/executor.hpp"
#ifdef MEMPLAN_HAVE_CUDA
#include "runtime_allocator/cuda/cuda_backend.hpp"
#endif
#include "runtime_allocator/npy.hpp"
#include "runtime_allocator/weights.hpp"

namespace memplan::cli {
namespace {

struct RunArgs {
  ModelArgs model;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::string plan_file;
  bool unshared = false;
  bool json = false;
  std::string backend = "cpu";
  ArenaArgs arena;
};

// The backend `name` names: "cpu", or "cuda" where memplan was built with it and a device is present.
std::unique_ptr<runtime::Backend> make_backend(const std::string& name) {
  if (name == "cpu") return std::make_unique<runtime::HostBackend>();
  if (name != "cuda") fail(ErrorKind::usage, "--backend '" + name + "': expected cpu or cuda");
#ifdef MEMPLAN_HAVE_CUDA
  if (!runtime::cuda::cuda_available()) fail(ErrorKind::unsupported, "--backend cuda: no CUDA device is present");
  runtime::cuda::CudaOptions o;
  o.host_fallback = true;  // an op no CUDA kernel takes runs on the host, reported (host_fallbacks)
  return std::make_unique<runtime::cuda::CudaBackend>(o);
#else
  fail(ErrorKind::unsupported, "--backend cuda: this memplan was built without the CUDA backend");
#endif
}

nlohmann::json summary(const analysis::TensorData& t) {
  nlohmann::json j{{"dtype", analysis::dtype_name(t.dtype)}, {"shape", t.dims}};
  if (t.dtype == analysis::DType::f32 && !t.bytes.empty()) {
    const auto v = t.as_double();
    j["min"] = *std::min_element(v.begin(), v.end());
    j["max"] = *std::max_element(v.begin(), v.end());
    double s = 0.0;
    for (double x : v) s += x;
    j["mean"] = s / static_cast<double>(v.size());
  }
  return j;
}

// The model's fusion for `backend`: on CUDA attention of a head dim its kernels do not take is left as matmuls.
planner::FuseOptions fuse_for(const ModelArgs& model, const runtime::Backend& backend) {
  planner::FuseOptions fuse = fuse_options(model);
#ifdef MEMPLAN_HAVE_CUDA
  if (backend.name() == "cuda") fuse.attention_max_head_dim = runtime::cuda::attention_max_head_dim();
#else
  (void)backend;
#endif
  return fuse;
}

int run_model(const RunArgs& a) {
  const std::unique_ptr<runtime::Backend> backend = make_backend(a.backend);
  analysis::Graph g = load_shaped_model(a.model, true);
  runtime::load_external_weights(g, a.model.model);
  // Fused after the weights are read: the fused graph keeps the weight tensors (and their data) by name.
  const FusionSummary fusion = fuse_in_place(g, fuse_for(a.model, *backend));
  if (a.inputs.size() != g.inputs.size())
    fail(ErrorKind::usage, "model '" + a.model.model + "' takes " + std::to_string(g.inputs.size()) + " input(s), " +
                               std::to_string(a.inputs.size()) + " --input given");
  if (a.outputs.size() > g.outputs.size())
    fail(ErrorKind::usage, std::to_string(a.outputs.size()) + " --output given, the model has " + std::to_string(g.outputs.size()));
  std::vector<analysis::TensorData> inputs;
  for (const auto& path : a.inputs) inputs.push_back(runtime::read_npy(path));

  planner::Plan plan;
  if (!a.plan_file.empty()) {
    plan = planner::plan_from_json(g, analysis::read_json_file(a.plan_file, "plan"));
  } else if (!a.unshared) {
    planner::AssignOptions ao = assign_options(a.arena);
#ifdef MEMPLAN_HAVE_CUDA
    // On the GPU each convolution's scratch is what cuDNN asks for on this device, not the sizing rule.
    if (auto* cuda = dynamic_cast<runtime::cuda::CudaBackend*>(backend.get()))
      ao.workspace_query = [cuda](const analysis::Graph& graph, analysis::OpId id) { return cuda->preferred_workspace(graph, id); };
#endif
    plan = planner::plan_inference(g, ao, schedule_options(a.arena)).plan;
  }
  if (!a.unshared) planner::require_valid(g, plan);

  runtime::ExecOptions eo;
  eo.unshared = a.unshared;
  runtime::Executor ex(g, plan, *backend, eo);
  const auto outputs = ex.run(inputs);
  {
    analysis::OutputFiles files;  // all or none: a failure on any output leaves every --output file as it was
    for (std::size_t k = 0; k < a.outputs.size(); ++k) files.add(a.outputs[k], runtime::format_npy(outputs[k]));
    files.commit();
  }

  const auto& s = ex.stats();
  const nlohmann::json host_ops = host_fallback_report(*backend, true);
  if (a.json) {
    nlohmann::json j{{"model", a.model.model},         {"backend", backend->name()},
                     {"mode", a.unshared ? "unshared" : "planned"},
                     {"arena_bytes", s.arena_bytes},   {"touched_bytes", s.touched_bytes},
                     {"separate_bytes", s.separate_bytes}, {"pool_peak_bytes", s.pool_peak_bytes},
                     {"ops", s.ops_run},                {"views_elided", s.views_elided},
                     {"inplace_ops", s.inplace_ops},    {"staged_ops", s.staged_ops},
                     {"concats_in_place", s.concats_in_place},
                     {"seconds", s.seconds}};
    nlohmann::json outs = nlohmann::json::array();
    for (std::size_t k = 0; k < outputs.size(); ++k) {
      auto o = summary(outputs[k]);
      o["name"] = g.tensors[g.outputs[k]].name;
      outs.push_back(o);
    }
    j["outputs"] = outs;
    j["fusion"] = fusion_json(fusion);
    if (backend->name() == "cuda") j["host_fallbacks"] = host_ops;
    std::printf("%s\n", json_text(j, 2).c_str());
    return 0;
  }
  std::printf("model      %s (%zu ops) on %s, %s\n", analysis::terminal_safe(a.model.model).c_str(), s.ops_run, backend->name().c_str(),
              a.unshared ? "unshared (every tensor its own buffer)" : "planned arena (verified)");
  std::printf("fused      %s\n", fusion_text(fusion).c_str());
  if (!a.unshared)
    std::printf("arena      %s planned, %s touched; %zu views without a copy, %zu ops in place\n",
                human_bytes(s.arena_bytes).c_str(), human_bytes(s.touched_bytes).c_str(), s.views_elided, s.inplace_ops);
  std::printf("buffers    %s outside the arena (inputs, weights%s)\n", human_bytes(s.separate_bytes).c_str(),
              a.unshared ? ", every tensor" : "");
  std::printf("time       %.3f ms\n", s.seconds * 1e3);
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    const auto j = summary(outputs[k]);
    std::printf("output     %s %s %s", analysis::terminal_safe(g.tensors[g.outputs[k]].name).c_str(), j["dtype"].get<std::string>().c_str(),
                j["shape"].dump().c_str());
    if (j.contains("mean"))
      std::printf(" min %.6g max %.6g mean %.6g", j["min"].get<double>(), j["max"].get<double>(), j["mean"].get<double>());
    std::printf("%s\n", k < a.outputs.size() ? (" -> " + analysis::terminal_safe(a.outputs[k])).c_str() : "");
  }
  return 0;
}

void add_run(CLI::App& app, std::function<int()>& action) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "run a model on the CPU (or GPU) with its verified arena plan (.npy in and out)");
  add_model_args(cmd, args->model);
  cmd->add_option("--input", args->inputs, "an input .npy, one per graph input in order (repeatable)")->required();
  cmd->add_option("-o,--output", args->outputs, ".npy file to write for each output, in order (repeatable)");
  cmd->add_option("--plan", args->plan_file,
                  "read this saved plan (JSON, from `plan` or `analyze --save-plan`) and run MODEL with it instead of planning now");
  cmd->add_flag("--unshared", args->unshared, "every tensor its own buffer, no plan (the reference)");
  cmd->add_option("--backend", args->backend, "cpu (default) or cuda (a build with CUDA and a device)");
  add_arena_args(cmd, args->arena);
  cmd->add_flag("--json", args->json, "print one JSON object");
  cmd->callback([args, &action] { action = [args] { return run_model(*args); }; });
}

[[maybe_unused]] const int registered = register_command(50, &add_run);

}  // namespace
}  // namespace memplan::cli
