// `memplan train`: runs planned training steps on the CPU or a GPU, data parallel across processes through NCCL
// (--gpus N, one process per GPU; docs/multi-gpu-run.md), on synthetic batches sharded by rank.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "analysis/names.hpp"
#include "cli/training_args.hpp"
#include "cli/common.hpp"
#include "cli/deprecated_flags.hpp"
#include "cli/plan_report.hpp"
#include "cli/registry.hpp"
#include "cli/train_feed.hpp"
#include "planner/parallel/parallel.hpp"
#include "planner/training_plan.hpp"
#include "runtime_allocator/collectives/collectives.hpp"
#include "runtime_allocator/executor.hpp"
#include "runtime_allocator/npy.hpp"
#include "runtime_allocator/weights.hpp"
#ifdef MEMPLAN_HAVE_CUDA
#include "runtime_allocator/cuda/cuda_backend.hpp"
#endif
#ifdef MEMPLAN_HAVE_NCCL
#include "runtime_allocator/collectives/nccl_collectives.hpp"
#endif

namespace memplan::cli {
namespace {

struct TrainArgs {
  TrainingArgs train;
  std::string backend = "cpu";
  std::int64_t steps = 3;
  std::optional<std::int64_t> device;      // none: LOCAL_RANK, else the rank modulo the device count
  std::optional<std::int64_t> rank, gpus;  // --rank, --gpus (none: from the environment)
  std::string nccl_id_file;
  std::string bucket = "25MiB";
  std::int64_t zero = 0;  // ZeRO stage of the data-parallel run
  std::string save_grads;
  bool json = false;
  bool no_dropout = false;
};

constexpr std::int64_t kMaxSteps = 1'000'000;

// An option's value, else the first of the environment variables set (read whole as an integer), else none; either
// checked against [lo, hi] with the flag or the variable named.
std::optional<std::int64_t> from_env(const std::optional<std::int64_t>& given, const std::string& flag,
                                     std::initializer_list<const char*> names, std::int64_t lo, std::int64_t hi) {
  if (given) return require_int_in(*given, lo, hi, flag);
  for (const char* n : names)
    if (const char* v = std::getenv(n); v && *v) return parse_int_in(v, lo, hi, std::string("environment variable ") + n);
  return std::nullopt;
}

struct Rank {
  bool data_parallel = false;  // a world size was given: gradients go through collectives (even a world of 1)
  int rank = 0, world = 1, device = 0;
  bool device_given = false;
  std::string id_file;
};

Rank resolve_rank(const TrainArgs& a) {
  Rank r;
  const auto world = from_env(a.gpus, "--gpus", {"MEMPLAN_WORLD_SIZE", "WORLD_SIZE"}, 1, planner::kMaxGpus);
  r.data_parallel = world.has_value();
  r.world = static_cast<int>(world.value_or(1));
  const auto rank = from_env(a.rank, "--rank", {"MEMPLAN_RANK", "RANK"}, 0, planner::kMaxGpus - 1);
  r.rank = static_cast<int>(rank.value_or(0));
  if (r.rank >= r.world)
    fail(ErrorKind::usage, "--rank " + std::to_string(r.rank) + " outside a world of " + std::to_string(r.world) + " (accepted: 0 .. " +
                               std::to_string(r.world - 1) + ")");
  r.id_file = a.nccl_id_file;
  if (r.id_file.empty())
    if (const char* v = std::getenv("MEMPLAN_NCCL_ID_FILE"); v) r.id_file = v;
  if (r.world > 1 && r.id_file.empty())
    fail(ErrorKind::usage, "--gpus " + std::to_string(r.world) +
                               " needs --nccl-id-file FILE (or MEMPLAN_NCCL_ID_FILE): rank 0 writes the NCCL id there");
  const auto device = from_env(a.device, "--device", {"LOCAL_RANK"}, 0, 1023);
  r.device_given = device.has_value();
  r.device = static_cast<int>(device.value_or(r.rank));
  if (r.data_parallel && a.train.microbatches > 1)
    fail(ErrorKind::usage,
         "--microbatches with data parallelism: the gradients would be reduced every micro-step (not supported)");
  if (a.zero < 0 || a.zero > 3) fail(ErrorKind::usage, "--zero " + std::to_string(a.zero) + ": expected 0, 1 or 2");
  if (a.zero > 0 && !r.data_parallel)
    fail(ErrorKind::usage, "--zero " + std::to_string(a.zero) + " needs --gpus N (env MEMPLAN_WORLD_SIZE): ZeRO shards across data-parallel ranks");
  if (a.zero == 3)
    fail(ErrorKind::unsupported, "--zero 3: the runtime runs ZeRO stages 1 and 2; stage 3 (parameters sharded and gathered per use) "
                                 "is planned by `memplan plan --gpus N --zero 3`, not run");
  if (a.zero > 0 && !a.save_grads.empty())
    fail(ErrorKind::usage, "--save-grads with --zero: each rank reduces only its shard of the gradients");
  if (r.data_parallel && a.backend == "cpu" && r.world > 1)
    fail(ErrorKind::usage, "--backend cpu runs data parallel with --gpus 1 only (the host stand-in of the collectives)");
  return r;
}

std::unique_ptr<runtime::Backend> make_backend(const TrainArgs& a, Rank& r) {
  if (a.backend == "cpu") return std::make_unique<runtime::HostBackend>();
  if (a.backend != "cuda") fail(ErrorKind::usage, "--backend '" + a.backend + "': expected cpu or cuda");
#ifdef MEMPLAN_HAVE_CUDA
  const int n = runtime::cuda::cuda_device_count();
  if (n == 0) fail(ErrorKind::unsupported, "--backend cuda: no CUDA device is present");
  if (!r.device_given) r.device = r.rank % n;
  runtime::cuda::CudaOptions o;
  o.device = r.device;
  o.host_fallback = true;  // an op no CUDA kernel takes runs on the host, reported (host_fallbacks)
  return std::make_unique<runtime::cuda::CudaBackend>(o);
#else
  (void)r;
  fail(ErrorKind::unsupported, "--backend cuda: this memplan was built without the CUDA backend");
#endif
}

// The communicator of this rank: the host stand-in on the CPU, NCCL on a GPU (rank 0's id through the --nccl-id-file).
std::unique_ptr<runtime::Collectives> make_collectives(runtime::Backend& backend, const Rank& r, runtime::LocalGroup& local) {
  if (!r.data_parallel) return nullptr;
  if (backend.name() == "host") return local.member(0);
#ifdef MEMPLAN_HAVE_NCCL
  auto& cuda = dynamic_cast<runtime::cuda::CudaBackend&>(backend);
  const runtime::cuda::NcclId id =
      r.world == 1 ? runtime::cuda::make_nccl_id() : runtime::cuda::exchange_nccl_id(r.id_file, r.rank, r.world);
  auto c = std::make_unique<runtime::cuda::NcclCollectives>(cuda, r.rank, r.world, id);
  if (r.rank == 0 && r.world > 1) runtime::cuda::remove_nccl_id_file(r.id_file);  // every rank has joined: not needed again
  return c;
#else
  fail(ErrorKind::unsupported, "--gpus on the GPU: this memplan was built without NCCL (nccl.h not found at configure time)");
#endif
}

// Every rank must run the same plan (NCCL matches collectives by their order): the ranks gather a hash of the plan
// and of the reduction buckets, and a rank whose hash differs from rank 0's fails instead of hanging or mixing
// gradients (another model, --dim, option or GPU model on one rank).
void require_same_plan(runtime::Backend& backend, runtime::Collectives& coll, const planner::Plan& plan,
                       const runtime::Executor& ex) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  auto mix = [&h](std::uint64_t v) {
    for (int b = 0; b < 8; ++b) h = (h ^ ((v >> (8 * b)) & 0xff)) * 1099511628211ull;
  };
  mix(plan.arena_bytes);
  mix(static_cast<std::uint64_t>(ex.stats().zero.stage));
  mix(plan.schedule.size());
  for (char c : plan.model_fingerprint) mix(static_cast<unsigned char>(c));
  for (const auto& b : ex.gradient_buckets()) {
    mix(b.bytes);
    mix(b.gradients.size());
    mix(b.after_step);
    mix(b.wait_step);
  }
  const auto world = static_cast<std::uint64_t>(coll.world_size());
  runtime::DeviceBuffer mine(backend, 8, 256), all(backend, 8 * world, 256);
  backend.copy_to_device(mine.data(), reinterpret_cast<const std::byte*>(&h), 8);
  coll.all_gather(mine.data(), all.data(), 1, analysis::DType::u64);
  coll.synchronize();
  std::vector<std::uint64_t> hashes(world);
  backend.copy_to_host(reinterpret_cast<std::byte*>(hashes.data()), all.data(), 8 * world);
  for (std::uint64_t r = 0; r < world; ++r)
    if (hashes[r] != hashes[0])
      fail(ErrorKind::usage, "rank " + std::to_string(r) + " planned another step than rank 0 (model, --dim, options or GPU "
                             "differ): every rank must run the same plan");
}

// train --save-grads DIR: the folder made if missing, every file written or none (and a folder made here removed).
void save_gradients(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& files) {
  if (files.empty()) {
    analysis::OutputFiles none;
    return commit_after_stdout(none);
  }
  std::error_code ec;
  const bool existed = std::filesystem::exists(dir, ec);
  create_output_folder(dir, "--save-grads");
  try {
    analysis::OutputFiles out;  // its temporary files are gone before the folder is removed below
    for (const auto& [path, bytes] : files) out.add(path, bytes);
    commit_after_stdout(out);
  } catch (...) {
    if (!existed) std::filesystem::remove(dir, ec);  // only if empty: a folder that holds anything stays
    throw;
  }
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Reads the model's external weights; graphs exported without them (samples/transformers, bench/multi_gpu.py) train
// on stand-in values synthesized from the names, the same on every rank. True when the weights were read.
bool load_weights(analysis::Graph& shaped, const std::string& model) {
  const auto folder = std::filesystem::path(model).parent_path();
  const bool weights_present = std::all_of(shaped.tensors.begin(), shaped.tensors.end(), [&](const analysis::Tensor& t) {
    return !t.external_data || std::filesystem::exists(folder / t.external_location);
  });
  if (weights_present)
    runtime::load_external_weights(shaped, model);
  else
    std::fprintf(stderr, "memplan: warning: the model's external weight data is missing: weights synthesized from their names\n");
  return weights_present;
}

// What a run measured: the losses, the timed steps, the first step's gradient norms.
struct TrainRun {
  std::vector<double> losses, seconds;
  nlohmann::json norms;
  double total = 0.0;        // the first step's squared gradient norm
  bool grads_whole = true;   // every rank holds whole gradients (no ZeRO sharding): norms are meaningful
  std::uint64_t state_bytes = 0;
  std::size_t dropouts_off = 0;
};

nlohmann::json train_json(const TrainArgs& a, const runtime::Backend& backend, const Rank& rank, const runtime::Collectives* coll,
                          const planner::TrainingPlanResult& r, const runtime::ExecStats& st, const TrainRun& run) {
  nlohmann::json j{{"model", a.train.model.model},
                   {"backend", backend.name()},
                   {"rank", rank.rank},
                   {"world_size", rank.world},
                   {"data_parallel", rank.data_parallel},
                   {"collectives", coll ? coll->name() : "none"},
                   {"strategy", r.strategy},
                   {"arena_bytes", r.plan.arena_bytes},
                   {"planned_peak_bytes", r.peak_bytes},
                   {"persistent_bytes", r.persistent_bytes},
                   {"separate_bytes", st.separate_bytes},
                   {"reduce_calls", st.reduce_calls},
                   {"reduced_bytes", st.reduced_bytes},
                   {"losses", run.losses},
                   {"step_seconds", median(run.seconds)},
                   {"steps_timed", run.seconds.size()},
                   {"gradient_norm", run.grads_whole ? nlohmann::json(std::sqrt(run.total)) : nlohmann::json(nullptr)},
                   {"optimizer_state_bytes", run.state_bytes},
                   {"zero", {{"stage", a.zero},
                             {"optimizer_state_shard_bytes", st.zero.state_bytes},
                             {"optimizer_state_unsharded_bytes", st.zero.state_unsharded_bytes},
                             {"owned_elements", st.zero.owned_elements},
                             {"weight_elements", st.zero.weight_elements},
                             {"sharded_updates", st.zero.sharded_updates},
                             {"gather_buffer_bytes", st.zero.gather_buffer_bytes},
                             {"all_gather_calls", st.zero.all_gather_calls},
                             {"gradients_sharded_in_memory", false}}},
                   {"gradient_norms", run.norms},
                   {"dropouts_disabled", run.dropouts_off}};
#ifdef MEMPLAN_HAVE_CUDA
  if (auto* cuda = dynamic_cast<const runtime::cuda::CudaBackend*>(&backend)) {
    j["device"] = rank.device;
    j["peak_device_bytes"] = cuda->stats().peak_device_bytes;
    j["host_fallbacks"] = host_fallback_report(backend, false);
  }
#endif
#ifdef MEMPLAN_HAVE_NCCL
  if (coll && coll->name() == "nccl") j["nccl_version"] = runtime::cuda::nccl_version();
#endif
  return j;
}

void print_train(const TrainArgs& a, const runtime::Backend& backend, const Rank& rank, const runtime::Collectives* coll,
                 const planner::TrainingPlanResult& r, const runtime::ExecStats& st, const TrainRun& run) {
  std::printf("model      %s (training step: %zu ops) on %s, rank %d of %d%s\n",
              analysis::terminal_safe(a.train.model.model).c_str(), r.graph.ops.size(), backend.name().c_str(), rank.rank,
              rank.world, coll ? (", gradients through " + coll->name()).c_str() : "");
  std::printf("plan       %s: arena %s, peak %s planned\n", r.strategy.c_str(), human_bytes(r.plan.arena_bytes).c_str(),
              human_bytes(r.peak_bytes).c_str());
  if (coll && a.zero == 0)
    std::printf("reduce     %zu all-reduces per step, %s of gradients\n", st.reduce_calls, human_bytes(st.reduced_bytes).c_str());
  if (coll && a.zero > 0)
    std::printf("zero       stage %d: %zu reduce-scatters (%s of gradients), %zu updates on shards, optimizer state %s held of %s, "
                "%zu all-gathers through %s\n",
                static_cast<int>(a.zero), st.reduce_calls, human_bytes(st.reduced_bytes).c_str(), st.zero.sharded_updates,
                human_bytes(run.state_bytes).c_str(), human_bytes(run.state_bytes - st.zero.state_bytes + st.zero.state_unsharded_bytes).c_str(),
                st.zero.all_gather_calls, human_bytes(st.zero.gather_buffer_bytes).c_str());
  for (std::size_t k = 0; k < run.losses.size(); ++k) std::printf("step %zu     loss %.7g\n", k + 1, run.losses[k]);
  if (run.grads_whole) std::printf("gradients  first step's norm %.9g\n", std::sqrt(run.total));
  if (!run.seconds.empty()) std::printf("time       %.3f ms per step (median of %zu)\n", median(run.seconds) * 1e3, run.seconds.size());
}

int train_model(TrainArgs a) {
  a.train.train = true;
  require_int_in(a.steps, 1, kMaxSteps, "--steps");
  Rank rank = resolve_rank(a);
  const std::unique_ptr<runtime::Backend> backend = make_backend(a, rank);
#ifdef MEMPLAN_HAVE_CUDA
  if (a.backend == "cuda") a.train.model.attention_max_head_dim = runtime::cuda::attention_max_head_dim();
#endif
  analysis::Graph shaped = load_shaped_model(a.train.model, true);
  const bool weights_present = load_weights(shaped, a.train.model.model);
  const std::size_t dropouts_off = a.no_dropout ? disable_dropout(shaped) : 0;
  TrainingSetup s = training_setup(shaped, a.train);
#ifdef MEMPLAN_HAVE_CUDA
  if (auto* cuda = dynamic_cast<runtime::cuda::CudaBackend*>(backend.get()))
    s.options.assign.workspace_query = [cuda](const analysis::Graph& graph, analysis::OpId id) {
      return cuda->preferred_workspace(graph, id);
    };
#endif
  const planner::TrainingPlanResult r = planner::plan_training(s.training, s.options);
  runtime::LocalGroup local(1);
  const std::unique_ptr<runtime::Collectives> coll = make_collectives(*backend, rank, local);
  runtime::ExecOptions eo;
  eo.synthesize_missing_weights = !weights_present;
  if (coll) {
    eo.data_parallel.collectives = coll.get();
    for (const auto& [w, grad] : s.training.param_grads) eo.data_parallel.gradients.push_back(grad);
    eo.data_parallel.bucket_bytes = planner::parse_size(a.bucket);
    eo.data_parallel.zero_stage = static_cast<int>(a.zero);
  }
  runtime::Executor ex(r.graph, r.plan, *backend, eo);
  if (coll) require_same_plan(*backend, *coll, r.plan, ex);
  const auto feed = sharded_feed(r.graph, rank.rank);

  TrainRun run;
  run.dropouts_off = dropouts_off;
  auto loss_now = [&] { return ex.read(s.training.loss).as_double().at(0); };
  ex.run(feed);
  run.losses.push_back(loss_now());
  // The first step's gradients (from the initial weights): what runs of other world sizes compare.
  run.norms = nlohmann::json::array();
  // --save-grads: every gradient file or none, written once the run and its report are done.
  const bool save_grads = !a.save_grads.empty() && rank.rank == 0;
  std::vector<std::pair<std::string, std::string>> grad_npy;
  for (std::size_t k = 0; k < s.training.param_grads.size(); ++k) {
    const auto [w, grad] = s.training.param_grads[k];
    const analysis::TensorData d = ex.read(grad);
    double sq = 0.0;
    for (double v : d.as_double()) sq += v * v;
    run.total += sq;
    run.norms.push_back({{"weight", r.graph.tensors[w].name}, {"norm", std::sqrt(sq)}});
    if (save_grads) {  // .npy has no bfloat16 or float8: 16- and 8-bit float gradients are written as float32 (exact)
      const bool widen = analysis::dtype_is_float(d.dtype) && d.dtype != analysis::DType::f32 && d.dtype != analysis::DType::f64;
      grad_npy.emplace_back(a.save_grads + "/grad_" + std::to_string(k) + ".npy",
                            runtime::format_npy(widen ? analysis::TensorData::from_double(analysis::DType::f32, d.dims, d.as_double()) : d));
    }
  }
  // Under ZeRO a rank's gradient is the mean over the ranks in its own chunks only: norms only where that is all.
  run.grads_whole = a.zero == 0 || rank.world == 1;
  if (!run.grads_whole) run.norms = nullptr;
  for (int step = 1; step < a.steps; ++step) {
    run.seconds.push_back(ex.run_device());
    run.losses.push_back(loss_now());
  }
  const auto& st = ex.stats();
  // The optimizer state this rank holds: its shards under ZeRO.
  for (analysis::TensorId t : s.training.optimizer_state) run.state_bytes += r.graph.tensors[t].bytes();
  run.state_bytes = run.state_bytes - st.zero.state_unsharded_bytes + st.zero.state_bytes;
  (void)host_fallback_report(*backend, rank.rank == 0);  // the warnings: on stderr, whatever the output's form
  if (a.json) std::printf("%s\n", json_text(train_json(a, *backend, rank, coll.get(), r, st, run), 2).c_str());
  else print_train(a, *backend, rank, coll.get(), r, st, run);
  save_gradients(a.save_grads, grad_npy);
  return 0;
}

void add_train(CLI::App& app, std::function<int()>& action) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand("train", "run planned training steps (CPU or GPU), data parallel across GPUs through NCCL");
  add_training_args(cmd, args->train);
  cmd->add_option("--backend", args->backend, "cpu (default) or cuda");
  cmd->add_option("--steps", args->steps, "training steps to run (default 3; the first untimed)");
  cmd->add_option("--device", args->device, "CUDA device (default: LOCAL_RANK, else the rank modulo the devices)");
  cmd->add_option("--gpus", args->gpus,
                  "GPUs in the step, the world size: data parallel, one process per GPU (env MEMPLAN_WORLD_SIZE or WORLD_SIZE); "
                  "given: gradients are averaged across ranks (NCCL on cuda)");
  cmd->add_option("--rank", args->rank, "this process's rank (env MEMPLAN_RANK or RANK; default 0)");
  cmd->add_option("--nccl-id-file", args->nccl_id_file, "file through which rank 0 hands its NCCL id to the others (env MEMPLAN_NCCL_ID_FILE)");
  add_deprecated_alias(cmd, "--dp-world", "--gpus", "train", args->gpus);
  add_deprecated_alias(cmd, "--dp-rank", "--rank", "train", args->rank);
  add_deprecated_alias(cmd, "--dp-id", "--nccl-id-file", "train", args->nccl_id_file);
  cmd->add_option("--bucket", args->bucket,
                  "gradients adjacent in the arena reduced together up to this size (default 25MiB; 0: one each)");
  cmd->add_option("--zero", args->zero,
                  "ZeRO stage over the data-parallel ranks of the --gpus run: 0 (default) all-reduces the gradients; 1 or 2 "
                  "reduce-scatters them, each rank updates its shard of the weights with its shard of the optimizer state, "
                  "then all-gathers the weights (3 is planned by `plan --zero 3`, not run)");
  cmd->add_option("--save-grads", args->save_grads, "rank 0 writes the first step's weight gradients to DIR/grad_K.npy (16-bit floats as float32)");
  cmd->add_flag("--no-dropout", args->no_dropout, "every Dropout's ratio set to 0 (runs of any world size then compare exactly)");
  cmd->add_flag("--json", args->json, "print one JSON object");
  cmd->callback([args, &action] { action = [args] { return train_model(*args); }; });
}

[[maybe_unused]] const int registered = register_command(55, &add_train);

}  // namespace
}  // namespace memplan::cli
