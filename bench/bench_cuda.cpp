// CUDA benchmark: fused vs per-op elementwise bandwidth, tiny models vs references and the CPU kernels, and
// training steps planned under each strategy (arena, measured device memory, step time).
// Usage: bench_cuda fused [bytes] | bench_cuda tiny SAMPLES_DIR | bench_cuda train MODEL.onnx [STEPS] [KEY=VALUE]...
// | bench_cuda infer MODEL.onnx [RUNS] | bench_cuda workspace MODEL.onnx [RUNS] [KEY=VALUE]... (prints one JSON object).
// KEY=VALUE: a symbolic dim (batch=32), budget=BYTES (total device memory), activation_budget=BYTES (the
// budget less weights, optimizer state and inputs: PyTorch's peak over what lives between steps),
// optimizer=none|sgd|momentum|adam, precision=fp32|bf16|fp16 (train: analysis::TrainingOptions::precision, the
// autocast form of the training graph; the result's half_ops counts the ops with a bf16/f16 output),
// strategies=none,sqrt,optimal,... (train), side_workspace=1 (train: cuDNN's workspace beside the arena, the
// same for every plan), device_workspace=0 (train: each convolution's planned scratch from the planner's sizing rule
// instead of what cuDNN asks on this device), loss=mse|ce|none and class_axis=N (train: the loss; ce feeds labels in range), train=1 (workspace: a training step instead of inference), fuse=0|1 (train: the forward graph
// fused before the training graph is built; default 1), strategies=none (train: plan and run `none` alone),
// profile=1 (train: one more step of `none` with every op timed alone: op_profile, seconds per op type, and per
// Op::type measured beside the roofline: by_op_type, for bench/calibrate_profile.py), device_profile=PATH (train: the
// profile the plans' step estimates use).
#ifdef MEMPLAN_HAVE_CUDA
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "analysis/import.hpp"
#include "analysis/ops.hpp"
#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "planner/step.hpp"
#include "planner/fusion.hpp"
#include "planner/inference.hpp"
#include "planner/training_plan.hpp"
#include "runtime_allocator/backend.hpp"
#include "runtime_allocator/cuda/cuda_context.hpp"
#include "runtime_allocator/cuda/cuda_backend.hpp"
#include "runtime_allocator/executor.hpp"
#include "runtime_allocator/kernels/fused_cpu.hpp"
#include "runtime_allocator/npy.hpp"

using namespace memplan;
using namespace memplan::runtime::cuda;
using analysis::DType;
using analysis::Graph;
using nlohmann::json;
using HostValue = analysis::TensorData;

namespace {

// A CUDA backend and one executor of a plan on it; weights kept as external data get deterministic values.
struct GpuRun {
  CudaBackend backend;
  runtime::Executor ex;
  GpuRun(const Graph& g, const planner::Plan& p, bool side_workspace = false, bool profile_ops = false)
      : backend(CudaOptions{.side_workspace = side_workspace}),
        ex(g, p, backend, runtime::ExecOptions{.synthesize_missing_weights = true, .profile_ops = profile_ops}) {}
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Step {
  const char* type;
  bool binary;  // with a scalar constant as second input
  double constant;
};
using Chain = std::vector<Step>;
// bench/torch_fused_chain.py times these two chains, op for op, in PyTorch eager and under torch.compile.
// With transcendentals: x -> Mul -> Add -> Tanh -> Mul -> Sigmoid -> Sub -> Abs -> Sqrt.
const Chain kTranscendental = {{"Mul", true, 1.5},    {"Add", true, 0.25}, {"Tanh", false, 0}, {"Mul", true, 2.0},
                               {"Sigmoid", false, 0}, {"Sub", true, 0.5},  {"Abs", false, 0},  {"Sqrt", false, 0}};
// Arithmetic only: x -> Mul -> Add -> Relu -> Mul -> Min -> Sub -> Abs -> Max.
const Chain kArithmetic = {{"Mul", true, 1.5}, {"Add", true, 0.25}, {"Relu", false, 0}, {"Mul", true, 2.0},
                           {"Min", true, 3.0}, {"Sub", true, 0.5},  {"Abs", false, 0},  {"Max", true, -1.0}};

Graph chain_graph(std::int64_t n, const Chain& ops) {
  Graph g;
  auto tensor = [&](const std::string& name, analysis::TensorRole role, std::int64_t len) {
    analysis::Tensor t;
    t.name = name;
    t.dtype = DType::f32;
    t.rank_known = true;
    t.dims = {analysis::Dim::of(len)};
    t.role = role;
    return g.add_tensor(std::move(t));
  };
  analysis::TensorId cur = tensor("x", analysis::TensorRole::input, n);
  g.inputs.push_back(cur);
  int i = 0;
  for (const auto& [type, binary, c] : ops) {
    analysis::Op op;
    op.name = std::string(type) + std::to_string(i);
    op.type = type;
    op.inputs = {cur};
    if (binary) {
      auto k = tensor("c" + std::to_string(i), analysis::TensorRole::weight, 1);
      g.tensors[k].data = std::make_shared<analysis::TensorData>(analysis::TensorData::from_double(DType::f32, {1}, {c}));
      op.inputs.push_back(k);
    }
    cur = tensor("t" + std::to_string(i++), analysis::TensorRole::activation, n);
    op.outputs = {cur};
    g.add_op(std::move(op));
  }
  g.outputs.push_back(cur);
  g.tensors[cur].is_graph_output = true;
  return g;
}

json bench_chain(std::uint64_t bytes, const Chain& chain) {
  const auto n = static_cast<std::int64_t>(bytes / 4);
  const Graph plain = chain_graph(n, chain);
  const auto fr = planner::fuse_elementwise(plain);
  const auto plan_plain = planner::plan_inference(plain), plan_fused = planner::plan_inference(fr.graph);
  GpuRun unfused_run(plain, plan_plain.plan), fused_run(fr.graph, plan_fused.plan);
  runtime::Executor &unfused = unfused_run.ex, &fused = fused_run.ex;
  HostValue x{DType::f32, {n}, std::vector<std::byte>(bytes)};
  auto* xf = reinterpret_cast<float*>(x.bytes.data());
  for (std::int64_t i = 0; i < n; ++i) xf[i] = static_cast<float>((i * 2654435761u) % 20011) * 1e-4f - 1.0f;
  const auto want = unfused.run({{"x", x}});  // also compiles the kernels
  const auto got = fused.run({{"x", x}});
  double diff = 0.0;
  const auto *a = reinterpret_cast<const float*>(want[0].bytes.data()), *b = reinterpret_cast<const float*>(got[0].bytes.data());
  for (std::int64_t i = 0; i < n; ++i) diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
  std::vector<double> tu, tf;
  for (int r = 0; r < 10; ++r) {
    tu.push_back(unfused.run_device());
    tf.push_back(fused.run_device());
  }
  // The ceiling: a device-to-device copy of the same size (bytes read plus bytes written).
  Buffer src(bytes, Buffer::Kind::device, "copy source"), dst(bytes, Buffer::Kind::device, "copy destination");
  check(cudaMemset(src.data(), 1, bytes), "memset");
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "event");
  check(cudaEventCreate(&e1), "event");
  std::vector<double> tc;
  for (int r = 0; r < 11; ++r) {
    check(cudaEventRecord(e0), "record");
    check(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice), "copy");
    check(cudaEventRecord(e1), "record");
    check(cudaEventSynchronize(e1), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
    if (r) tc.push_back(ms / 1e3);
  }
  const double copy_bw = 2.0 * static_cast<double>(bytes) / median(tc);
  const double fused_bw = 2.0 * static_cast<double>(bytes) / median(tf);
  return {{"tensor_bytes", bytes},
          {"ops", 8},
          {"fused_groups", fr.groups.size()},
          {"unfused_seconds", median(tu)},
          {"fused_seconds", median(tf)},
          {"speedup", median(tu) / median(tf)},
          {"copy_bandwidth_bytes_per_s", copy_bw},
          {"fused_bandwidth_bytes_per_s", fused_bw},
          {"fused_bandwidth_fraction", fused_bw / copy_bw},
          {"unfused_bandwidth_fraction", 16.0 * static_cast<double>(bytes) / median(tu) / copy_bw},
          {"intermediate_bytes_removed", fr.intermediate_bytes_removed},
          {"planned_arena_bytes_unfused", plan_plain.plan.arena_bytes},
          {"planned_arena_bytes_fused", plan_fused.plan.arena_bytes},
          {"max_abs_diff_fused_vs_unfused", diff},
          {"nvrtc_kernels", fused_run.backend.stats().fused_kernels + unfused_run.backend.stats().fused_kernels}};
}

json bench_fused(std::uint64_t bytes) {
  json heavy = bench_chain(bytes, kTranscendental), light = bench_chain(bytes, kArithmetic);
  return {{"fused_bandwidth_fraction", heavy["fused_bandwidth_fraction"]},
          {"fused_bandwidth_fraction_arithmetic", light["fused_bandwidth_fraction"]},
          {"transcendental_chain", heavy},
          {"arithmetic_chain", light}};
}

// The CPU kernels over the schedule, each tensor in its own host vector (the reference for the GPU).
std::vector<float> run_cpu(const Graph& g, const std::vector<analysis::OpId>& schedule, const analysis::TensorData& input) {
  auto kernels = runtime::make_cpu_kernels();
  std::vector<std::vector<std::byte>> mem(g.tensors.size());
  std::vector<runtime::TensorRef> ref(g.tensors.size());
  for (analysis::TensorId t = 0; t < g.tensors.size(); ++t) {
    const auto& x = g.tensors[t];
    mem[t] = x.data ? x.data->bytes : std::vector<std::byte>(x.bytes());
    if (t == g.inputs[0]) mem[t] = input.bytes;
    ref[t] = {mem[t].data(), x.dtype, x.shape(), x.bytes()};
  }
  for (auto o : schedule) {
    const auto& op = g.ops[o];
    std::vector<runtime::TensorRef> in, out;
    for (auto t : op.inputs) in.push_back(t == analysis::kNoTensor ? runtime::TensorRef{} : ref[t]);
    for (auto t : op.outputs) out.push_back(t == analysis::kNoTensor ? runtime::TensorRef{} : ref[t]);
    if (op.type == planner::kFusedOpType) runtime::run_fused_cpu(op, in, out);
    else kernels->run(runtime::OpCall{op, o, in, out});
  }
  const auto& o = mem[g.outputs[0]];
  std::vector<float> f(o.size() / 4);
  std::memcpy(f.data(), o.data(), f.size() * 4);
  return f;
}

double max_abs(const std::vector<float>& a, const float* b, std::size_t n) {
  double m = a.size() == n ? 0.0 : INFINITY;
  for (std::size_t i = 0; i < n && i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

json bench_tiny(const std::string& dir) {
  json out = json::object();
  double worst = 0.0;
  for (const char* name : {"tiny_mlp", "tiny_cnn", "tiny_gpt"}) {
    for (bool fuse : {false, true}) {
      analysis::ImportOptions io;
      io.keep_weight_data = true;
      Graph g = analysis::infer_shapes(analysis::import_onnx(dir + "/" + name + ".onnx", io), {});
      std::size_t groups = 0;
      if (fuse) {
        auto fr = planner::fuse_elementwise(g);
        groups = fr.groups.size();
        g = std::move(fr.graph);
      }
      const auto ip = planner::plan_inference(g);
      const auto input = runtime::read_npy(dir + "/" + name + ".input.npy");
      const auto want = runtime::read_npy(dir + "/" + name + ".output.npy");
      CudaBackend gpu_backend;
      runtime::Executor ex(g, ip.plan, gpu_backend);
      const auto got = ex.run({input});
      std::vector<float> gpu(got[0].bytes.size() / 4);
      std::memcpy(gpu.data(), got[0].bytes.data(), gpu.size() * 4);
      const double vs_ref = max_abs(gpu, reinterpret_cast<const float*>(want.bytes.data()), want.bytes.size() / 4);
      json row = {{"max_abs_error_vs_reference", vs_ref}, {"arena_bytes", ip.plan.arena_bytes},
                  {"fused_groups", groups}, {"run_seconds", ex.run_device()}};
      try {
        const auto cpu = run_cpu(g, ip.plan.schedule, input);
        row["max_abs_error_vs_cpu"] = max_abs(gpu, cpu.data(), cpu.size());
      } catch (const Error& e) {
        row["cpu_error"] = e.what();
      }
      worst = std::max(worst, vs_ref);
      out[std::string(name) + (fuse ? "_fused" : "")] = row;
    }
  }
  out["tiny_max_abs_error"] = worst;
  return out;
}

std::uint64_t device_bytes_in_use() {
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  std::size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return total - free;
}

// One training step of plan `r` on the GPU: warm-up runs, then `steps` timed runs (events; the median).
json run_training_plan(const planner::TrainingPlanResult& r, const std::map<std::string, HostValue>& feed, int steps,
                       bool side_workspace = false, bool profile_ops = false, const analysis::DeviceProfile* estimate = nullptr) {
  const std::uint64_t before = device_bytes_in_use();
  GpuRun gpu(r.graph, r.plan, side_workspace);
  runtime::Executor& ex = gpu.ex;
  const auto out = ex.run(feed);  // uploads the batch, compiles the NVRTC kernels
  float loss = 0.0f;
  std::memcpy(&loss, out[0].bytes.data(), 4);
  for (int i = 0; i < 3; ++i) ex.run_device();
  std::vector<double> t, issue;
  for (int i = 0; i < steps; ++i) {
    t.push_back(ex.run_device());
    issue.push_back(ex.stats().issue_seconds);
  }
  const std::uint64_t used = device_bytes_in_use() - before;
  json profile = json::object();
  if (profile_ops) {  // one more step, each op timed alone: seconds and count per op type (fused kind named)
    GpuRun prof(r.graph, r.plan, side_workspace, true);
    prof.ex.run(feed);
    prof.ex.run_device();
    const auto& secs = prof.ex.stats().op_seconds;
    std::map<std::string, std::pair<double, int>> by_type;
    std::map<std::string, std::pair<double, double>> by_op_type;  // Op::type: measured, roofline (bench/calibrate_profile.py)
    for (analysis::OpId o = 0; o < secs.size(); ++o) {
      const auto& op = r.graph.ops[o];
      std::string key = op.type + (op.phase == analysis::Phase::forward ? "" : std::string(" (") + analysis::phase_name(op.phase) + ")");
      by_type[key].first += secs[o];
      by_type[key].second += 1;
      if (estimate) {
        by_op_type[op.type].first += secs[o];
        by_op_type[op.type].second += analysis::op_seconds(analysis::op_cost(r.graph, o), *estimate);
      }
    }
    for (const auto& [k, v] : by_type) profile[k] = {{"seconds", v.first}, {"ops", v.second}};
    if (estimate) {
      json types = json::object();
      for (const auto& [k, v] : by_op_type) types[k] = {{"measured_seconds", v.first}, {"roofline_seconds", v.second}};
      profile["by_op_type"] = types;
    }
  }
  const auto& st = ex.stats();
  const std::uint64_t resident_bytes = st.separate_bytes + st.pool_peak_bytes;  // inputs, weights, tensors outside the arena
  const std::uint64_t workspace_bytes = gpu.backend.stats().workspace_bytes;
  const std::uint64_t accounted = st.arena_bytes + resident_bytes + workspace_bytes;
  return {{"strategy", r.strategy},
          {"planned_bytes", r.plan.arena_bytes},
          {"scratch_regions", r.plan.scratch.size()},
          {"peak_device_bytes", used},
          {"resident_bytes", resident_bytes},
          {"workspace_bytes", workspace_bytes},
          {"library_constant_bytes", used > accounted ? used - accounted : 0},
          {"pinned_host_bytes", st.host_bytes},
          {"planned_peak_bytes", r.peak_bytes},
          {"step_seconds", median(t)},
          {"step_seconds_min", *std::min_element(t.begin(), t.end())},
          {"issue_seconds", median(issue)},  // host time to launch the step: near step_seconds, launch-bound
          {"steps_timed", steps},
          {"estimated_step_seconds", r.estimated_step_seconds},
          {"recompute_overhead", r.recompute_overhead},
          {"recompute_ops", r.recompute_ops},
          {"swapped_tensors", r.swapped_tensors},
          {"swap_bytes", r.swap_bytes},
          {"first_step_loss", loss},
          {"op_profile", profile}};
}

// The class count of the training graph's cross-entropy (0 when its loss is not ce): its labels' range.
std::int64_t label_classes(const Graph& g) {
  for (const auto& op : g.ops)
    if (op.type == analysis::memplan_ops::kCrossEntropyLoss) {
      const auto y = g.tensors[op.inputs[0]].shape();
      return y.at(static_cast<std::size_t>(op.attr_int("axis", 1)));
    }
  return 0;
}

// Deterministic values for every graph input: float32 in [-1, 1), integers (token ids) in [0, 1000), bools 1;
// a cross-entropy's "labels" in [0, classes).
std::map<std::string, HostValue> synthetic_feed(const Graph& g) {
  const std::int64_t classes = label_classes(g);
  std::map<std::string, HostValue> feed;
  for (analysis::TensorId t : g.inputs) {
    const auto& x = g.tensors[t];
    HostValue v{x.dtype, x.shape(), std::vector<std::byte>(x.bytes())};
    const std::size_t n = x.element_count();
    auto value = [&](std::size_t i) { return (i * 2654435761u + t) % 20011; };
    if (x.dtype == DType::f32) {
      auto* f = reinterpret_cast<float*>(v.bytes.data());
      for (std::size_t i = 0; i < n; ++i) f[i] = static_cast<float>(value(i)) * 1e-4f - 1.0f;
    } else if (x.dtype == DType::i64) {
      auto* p = reinterpret_cast<std::int64_t*>(v.bytes.data());
      const std::uint64_t range = classes > 0 && x.name == "labels" ? static_cast<std::uint64_t>(classes) : 1000;
      for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::int64_t>(value(i) % range);
    } else if (x.dtype == DType::i32) {
      auto* p = reinterpret_cast<std::int32_t*>(v.bytes.data());
      for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::int32_t>(value(i) % 1000);
    } else if (x.dtype == DType::boolean) {
      std::fill(v.bytes.begin(), v.bytes.end(), std::byte{1});
    } else if (x.dtype == DType::bf16 || x.dtype == DType::f16) {
      std::vector<double> d(n);
      for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<double>(value(i)) * 1e-4 - 1.0;
      v = HostValue::from_double(x.dtype, x.shape(), d);
    } else {
      throw std::invalid_argument("input '" + x.name + "': no synthetic values for dtype " + analysis::dtype_name(x.dtype));
    }
    feed[x.name] = std::move(v);
  }
  return feed;
}

// Inference of an ONNX model on the GPU, one kernel per op against fused elementwise groups: planned
// arena, intermediate bytes fusion removes, median time of `runs` runs after warm-up.
json bench_infer(const std::string& path, int runs) {
  analysis::ImportOptions io;
  io.keep_weight_data = true;
  const Graph shaped = analysis::infer_shapes(analysis::import_onnx(path, io), {});
  json out = {{"model", path}, {"ops", shaped.ops.size()}};
  for (bool fuse : {false, true}) {
    Graph g = shaped;
    json row = json::object();
    if (fuse) {
      auto fr = planner::fuse_elementwise(g);
      row["fused_groups"] = fr.groups.size();
      row["intermediate_bytes_removed"] = fr.intermediate_bytes_removed;
      g = std::move(fr.graph);
    }
    const auto ip = planner::plan_inference(g);
    GpuRun gpu(g, ip.plan);
    runtime::Executor& ex = gpu.ex;
    ex.run(synthetic_feed(g));
    for (int i = 0; i < 5; ++i) ex.run_device();
    std::vector<double> t;
    for (int i = 0; i < runs; ++i) t.push_back(ex.run_device());
    row["arena_bytes"] = ip.plan.arena_bytes;
    row["run_seconds"] = median(t);
    out[fuse ? "fused" : "unfused"] = row;
  }
  return out;
}

// KEY=VALUE arguments from argv[from] on.
struct BenchArgs {
  analysis::ShapeOptions shapes;
  std::optional<std::uint64_t> budget;
  std::optional<std::uint64_t> activation_budget;  // budget less weights, optimizer state and inputs
  analysis::Optimizer optimizer = analysis::Optimizer::adam;
  analysis::Precision precision = analysis::Precision::fp32;
  analysis::Loss loss = analysis::Loss::mse;          // train: loss=mse|ce|none
  std::optional<std::int64_t> class_axis;             // train: class_axis=N (ce)
  std::vector<std::string> strategies{"optimal", "swap"};  // planned at the budget, beside none and sqrt
  bool train = false;
  bool side_workspace = false;  // train: one cuDNN workspace beside the arena instead of the plans' scratch
  bool device_workspace = true; // train: each convolution's scratch planned at what cuDNN asks on this device
                                // (planner::AssignOptions::workspace_query); 0: the planner's sizing rule
  bool fuse = true;             // train: the forward graph fused (planner::fuse_graph) before the training graph
  bool sqrt_too = true;         // train: also sqrt (strategies=none plans `none` alone)
  bool profile = false;         // train: also one step with every op timed alone (op_profile: seconds per op type)
  std::string device_profile;   // train: device_profile=PATH, the profile the plans' step estimates use
};

BenchArgs parse_args(int argc, char** argv, int from) {
  BenchArgs a;
  for (int i = from; i < argc; ++i) {
    const std::string kv = argv[i];
    const auto eq = kv.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("expected KEY=VALUE, got '" + kv + "'");
    const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    if (k == "budget") a.budget = planner::parse_size(v);
    else if (k == "activation_budget") a.activation_budget = planner::parse_size(v);
    else if (k == "train") a.train = v == "1";
    else if (k == "side_workspace") a.side_workspace = v == "1";
    else if (k == "device_workspace") a.device_workspace = v == "1";
    else if (k == "fuse") a.fuse = v == "1";
    else if (k == "profile") a.profile = v == "1";
    else if (k == "device_profile") a.device_profile = v;
    else if (k == "loss") {
      const auto l = analysis::loss_from_name(v);
      if (!l) throw std::invalid_argument("unknown loss '" + v + "' (mse, ce, none)");
      a.loss = *l;
    } else if (k == "class_axis") a.class_axis = std::stoll(v);
    else if (k == "optimizer") {
      const auto o = analysis::optimizer_from_name(v);
      if (!o) throw std::invalid_argument("unknown optimizer '" + v + "'");
      a.optimizer = *o;
    } else if (k == "precision") {
      const auto p = analysis::precision_from_name(v);
      if (!p) throw std::invalid_argument("unknown precision '" + v + "' (fp32, bf16 or fp16)");
      a.precision = *p;
    } else if (k == "strategies") {
      a.strategies.clear();
      a.sqrt_too = v != "none";
      for (std::size_t p = 0; p <= v.size();) {
        const auto c = std::min(v.find(',', p), v.size());
        if (c > p && v.substr(p, c - p) != "none" && v.substr(p, c - p) != "sqrt") a.strategies.push_back(v.substr(p, c - p));
        p = c + 1;
      }
    } else a.shapes.dims[k] = std::stoll(v);
  }
  return a;
}

analysis::TrainingGraph load_training(const std::string& path, const BenchArgs& a) {
  analysis::ImportOptions io;
  io.keep_weight_data = true;
  planner::StepRequest req;  // built as `memplan plan --train` builds it (planner/step.hpp)
  req.training.optimizer = a.optimizer;
  req.training.precision = a.precision;
  req.training.loss = a.loss;
  req.training.class_axis = a.class_axis;
  if (!a.fuse) req.fuse = planner::FuseOptions::none();
  return planner::build_training_step(analysis::infer_shapes(analysis::import_onnx(path, io), a.shapes), req).training;
}

// A training step of an ONNX model planned under none, sqrt, and the other strategies (default optimal and
// swap) at the budget (default halfway between sqrt's peak and none's), each run on the GPU.
json bench_train(const std::string& path, int steps, const BenchArgs& args) {
  const auto tg = load_training(path, args);
  const std::map<std::string, HostValue> feed = synthetic_feed(tg.graph);
  planner::TrainingPlanOptions po;
  if (!args.device_profile.empty()) po.profile = analysis::read_device_profile(args.device_profile);
  std::optional<CudaBackend> asked;  // the device the plans' convolution scratch is sized for
  if (args.device_workspace && !args.side_workspace) {
    asked.emplace();
    po.assign.workspace_query = [&asked](const Graph& g, analysis::OpId id) { return asked->preferred_workspace(g, id); };
  }
  std::vector<planner::TrainingPlanResult> plans{planner::plan_training(tg, po)};
  if (args.sqrt_too) {
    po.strategy = "sqrt";
    plans.push_back(planner::plan_training(tg, po));
  }
  std::uint64_t budget = args.budget.value_or((plans[0].peak_bytes + std::min(plans[0].peak_bytes, plans.back().peak_bytes)) / 2);
  if (args.activation_budget) budget = plans[0].persistent_bytes + plans[0].input_bytes + *args.activation_budget;
  json notes = json::array();
  for (const std::string& strategy : args.strategies) {
    po.strategy = strategy;
    po.budget_bytes = budget;
    try {
      plans.push_back(planner::plan_training(tg, po));
    } catch (const Error& e) {
      notes.push_back(std::string(strategy) + " not planned at the budget: " + e.what());
      po.budget_bytes.reset();
      plans.push_back(planner::plan_training(tg, po));
    }
  }
  run_training_plan(plans[0], feed, 1);  // loads the libraries' kernels once, outside the measurements
  json rows = json::object();
  for (const auto& r : plans) rows[r.strategy] = run_training_plan(r, feed, steps, args.side_workspace, args.profile && r.strategy == "none", &po.profile);
  const double base = rows["none"]["step_seconds"].get<double>();
  for (auto& [name, row] : rows.items()) row["step_overhead_vs_none"] = row["step_seconds"].get<double>() / base - 1.0;
  std::size_t half_ops = 0;  // ops with a bf16/f16 output: 0 means the graph runs in float32 whatever the precision
  for (const auto& op : tg.graph.ops)
    for (analysis::TensorId t : op.outputs)
      if (t != analysis::kNoTensor && (tg.graph.tensors[t].dtype == DType::bf16 || tg.graph.tensors[t].dtype == DType::f16)) {
        ++half_ops;
        break;
      }
  return {{"model", path},
          {"graph", tg.graph.name},
          {"ops", tg.graph.ops.size()},
          {"optimizer", analysis::optimizer_name(args.optimizer)},
          {"precision", analysis::precision_name(args.precision)},
          {"half_ops", half_ops},
          {"budget_bytes", budget},
          {"side_workspace", args.side_workspace},
          {"device_workspace", args.device_workspace && !args.side_workspace},
          {"strategies", rows},
          {"notes", notes}};
}

// cuDNN workspaces planned in the arena (scratch capped at 0, 16, 64 and 256 MiB per convolution) against
// one workspace beside the arena sized for cuDNN's first-ranked algorithms: arena, device memory, time.
json bench_workspace(const std::string& path, int runs, const BenchArgs& args) {
  json rows = json::array();
  std::optional<analysis::TrainingGraph> tg;
  Graph shaped;
  if (args.train) {
    tg = load_training(path, args);
  } else {
    analysis::ImportOptions io;
    io.keep_weight_data = true;
    shaped = analysis::infer_shapes(analysis::import_onnx(path, io), args.shapes);
  }
  const Graph& g = tg ? tg->graph : shaped;
  const auto feed = synthetic_feed(g);
  const std::vector<std::uint64_t> limits{0, 16ull << 20, 64ull << 20, 256ull << 20, 0};
  for (std::size_t k = 0; k < limits.size(); ++k) {
    const bool side = k + 1 == limits.size();
    planner::AssignOptions ao;
    ao.workspace_limit_bytes = limits[k];
    planner::Plan plan;
    const Graph* run_graph = &g;
    std::optional<planner::TrainingPlanResult> tr;
    if (tg) {
      planner::TrainingPlanOptions po;
      po.assign = ao;
      tr = planner::plan_training(*tg, po);
      plan = tr->plan;
      run_graph = &tr->graph;
    } else {
      plan = planner::plan_inference(g, ao).plan;
    }
    std::uint64_t scratch = 0;
    for (const auto& sc : plan.scratch) scratch += sc.bytes;
    const std::uint64_t before = device_bytes_in_use();
    GpuRun gpu(*run_graph, plan, side);
    runtime::Executor& ex = gpu.ex;
    ex.run(feed);
    for (int i = 0; i < 3; ++i) ex.run_device();
    std::vector<double> t;
    for (int i = 0; i < runs; ++i) t.push_back(ex.run_device());
    const std::uint64_t used = device_bytes_in_use() - before;
    const auto& st = gpu.backend.stats();
    rows.push_back({{"workspace", side ? "beside the arena (cuDNN's first-ranked algorithms)" : "planned scratch"},
                    {"workspace_limit_bytes", side ? 0 : limits[k]},
                    {"arena_bytes", plan.arena_bytes},
                    {"scratch_regions", plan.scratch.size()},
                    {"scratch_bytes_total", scratch},
                    {"side_workspace_bytes", st.workspace_bytes},
                    {"arena_plus_side_bytes", plan.arena_bytes + st.workspace_bytes},
                    {"device_bytes", used},
                    {"run_seconds", median(t)}});
  }
  return {{"model", path}, {"train", args.train}, {"ops", g.ops.size()}, {"rows", rows}};
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "fused";
    if (!cuda_available()) {
      std::cerr << "bench_cuda: no CUDA device\n";
      return 77;
    }
    json r;
    if (mode == "fused") r = bench_fused(argc > 2 ? std::stoull(argv[2]) : (1ull << 30));
    else if (mode == "tiny") r = bench_tiny(argc > 2 ? argv[2] : "samples/models");
    else if (mode == "train" && argc > 2) r = bench_train(argv[2], argc > 3 ? std::stoi(argv[3]) : 20, parse_args(argc, argv, 4));
    else if (mode == "workspace" && argc > 2) r = bench_workspace(argv[2], argc > 3 ? std::stoi(argv[3]) : 20, parse_args(argc, argv, 4));
    else if (mode == "infer" && argc > 2) r = bench_infer(argv[2], argc > 3 ? std::stoi(argv[3]) : 50);
    else {
      std::cerr << "usage: bench_cuda fused [bytes] | bench_cuda tiny [samples_dir] | bench_cuda train MODEL.onnx [steps] [KEY=VALUE]..."
                   " | bench_cuda infer MODEL.onnx [runs] | bench_cuda workspace MODEL.onnx [runs] [KEY=VALUE]...\n";
      return 2;
    }
    std::cout << r.dump(2) << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "bench_cuda: " << e.what() << "\n";
    return 1;
  }
}
#else
#include <iostream>
int main() {
  std::cerr << "bench_cuda: built without the CUDA backend\n";
  return 77;
}
#endif
