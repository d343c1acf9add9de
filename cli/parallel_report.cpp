// Per-rank plans stated: JSON `ranks` with model state, activations, arena and communication; a table per role.
#include "cli/parallel_report.hpp"

#include <algorithm>

#include <cstdio>

#include "cli/common.hpp"

namespace memplan::cli {

void add_parallel_args(CLI::App* cmd, ParallelArgs& args) {
  cmd->add_option("--gpus", args.gpus,
                  "GPUs in the step, the world size: data parallel x --tp x --pp; plans each rank (docs/multi-gpu.md)");
  cmd->add_option("--zero", args.zero, "ZeRO stage over the data-parallel ranks: 0 | 1 (optimizer state) | 2 (+ gradients) | 3 (+ parameters, FSDP)");
  cmd->add_option("--tp", args.tp, "tensor parallel degree (Megatron column/row pairs of transformer blocks)");
  cmd->add_option("--pp", args.pp, "pipeline stages (cut for balanced time; --microbatches in flight)");
  cmd->add_option("--pp-schedule", args.pp_schedule, "1f1b (default) | gpipe");
  cmd->add_flag("--sequence-parallel", args.sequence_parallel, "with --tp: LayerNorm/dropout activations split along the sequence");
}

bool parallel_requested(const ParallelArgs& a) {
  return a.gpus.has_value() || a.zero != 0 || a.tp != 1 || a.pp != 1 || a.sequence_parallel || a.pp_schedule != "1f1b";
}

planner::ParallelOptions parallel_options(const ParallelArgs& a, std::int64_t microbatches) {
  // Each degree in its own range before any product is formed (--tp 0 is a --tp error, not a --gpus one).
  const std::int64_t tp = require_int_in(a.tp, 1, planner::kMaxGpus, "--tp");
  const std::int64_t pp = require_int_in(a.pp, 1, planner::kMaxGpus, "--pp");
  const std::int64_t gpus =
      a.gpus ? require_int_in(*a.gpus, 1, planner::kMaxGpus, "--gpus") : require_int_in(tp * pp, 1, planner::kMaxGpus, "--tp x --pp");
  planner::ParallelOptions o;
  o.gpus = static_cast<int>(gpus);
  o.zero = static_cast<int>(require_int_in(a.zero, 0, 3, "--zero"));
  o.tp = static_cast<int>(tp);
  o.pp = static_cast<int>(pp);
  o.microbatches = static_cast<int>(require_int_in(microbatches, 1, kMaxMicrobatches, "--microbatches"));
  if (a.pp_schedule == "gpipe") o.pp_schedule = planner::PipelineSchedule::gpipe;
  else if (a.pp_schedule != "1f1b") fail(ErrorKind::usage, "--pp-schedule '" + a.pp_schedule + "' is not one of 1f1b, gpipe");
  o.sequence_parallel = a.sequence_parallel;
  planner::check_parallel_options(o);
  return o;
}

std::string layout_name(const planner::ParallelOptions& o) {
  return "dp" + std::to_string(o.data_parallel()) + " zero" + std::to_string(o.zero) + " tp" + std::to_string(o.tp) + (o.sequence_parallel ? "+sp" : "") +
         " pp" + std::to_string(o.pp);
}

std::string ranks_text(const std::vector<int>& ranks) {
  if (ranks.size() > 8) return std::to_string(ranks.front()) + ".." + std::to_string(ranks.back());
  std::string s;
  for (int k : ranks) s += (s.empty() ? "" : ",") + std::to_string(k);
  return s;
}

namespace {

nlohmann::json comm_json(const planner::CommunicationBytes& c) {
  return {{"all_reduce", c.all_reduce}, {"reduce_scatter", c.reduce_scatter}, {"all_gather", c.all_gather}, {"send_recv", c.send_recv}, {"total", c.total()}};
}

}  // namespace

nlohmann::json parallel_json(const planner::ParallelPlanResult& r) {
  const auto& o = r.options;
  nlohmann::json j;
  j["layout"] = {{"gpus", o.gpus}, {"data_parallel", o.data_parallel()}, {"zero", o.zero}, {"tp", o.tp}, {"pp", o.pp},
                 {"microbatches", o.microbatches}, {"pp_schedule", planner::pipeline_schedule_name(o.pp_schedule)},
                 {"sequence_parallel", o.sequence_parallel}, {"name", layout_name(o)}};
  j["parameters"] = r.unsharded_parameters;
  nlohmann::json ranks = nlohmann::json::array();
  nlohmann::json comm = nlohmann::json::object();
  bool valid = true;
  for (const auto& rp : r.roles) {
    const auto& t = rp.result;
    nlohmann::json e;
    e["rank"] = rp.ranks.empty() ? 0 : rp.ranks.front();
    e["ranks"] = rp.ranks;
    e["role"] = rp.role;
    e["stage"] = rp.stage;
    e["peak_bytes"] = rp.peak_bytes;
    e["model_state_bytes"] = rp.model_state_bytes;
    e["weight_bytes"] = rp.zero.weight_bytes;
    e["gradient_bytes"] = rp.zero.gradient_bytes;
    e["optimizer_state_bytes"] = rp.zero.optimizer_state_bytes;
    e["activation_bytes"] = rp.activation_bytes;
    e["saved_bytes_per_microbatch"] = rp.saved_bytes_per_microbatch;
    e["in_flight_microbatches"] = rp.in_flight;
    e["arena_bytes"] = t.plan.arena_bytes;
    e["persistent_bytes"] = t.persistent_bytes;
    e["input_bytes"] = t.input_bytes;
    e["plan_valid"] = t.report.valid;
    e["strategy"] = t.strategy;
    e["recomputed_tensors"] = t.recomputed_tensors;
    e["swapped_tensors"] = t.swapped_tensors;
    e["parameter_units"] = rp.zero.units;
    e["ops"] = t.graph.ops.size();
    e["training_flops"] = rp.flops;
    e["compute_seconds_per_microbatch"] = rp.compute_seconds;
    e["communication_bytes_per_step"] = comm_json(rp.communication);
    comm[std::to_string(e["rank"].get<int>())] = comm_json(rp.communication);
    valid = valid && t.report.valid;
    ranks.push_back(std::move(e));
  }
  j["ranks"] = ranks;
  j["communication_bytes_per_step"] = comm;  // by the first rank of each role
  if (!r.stages.empty() && o.pp > 1) {
    nlohmann::json st = nlohmann::json::array();
    for (const auto& s : r.stages)
      st.push_back({{"first_op", s.first_op}, {"end_op", s.end_op}, {"forward_seconds", s.forward_seconds}, {"boundary_bytes", s.boundary_bytes}});
    j["stages"] = st;
  }
  if (o.tp > 1) {
    const auto& t = r.tensor_parallel;
    j["tensor_parallel"] = {{"column_ops", t.column_ops}, {"row_ops", t.row_ops}, {"sharded_tensors", t.sharded_tensors},
                            {"replicated_matmuls", t.replicated_matmuls}, {"replicated", t.replicated},
                            {"replicated_weight_bytes", t.replicated_weight_bytes}, {"sharded_weight_bytes", t.sharded_weight_bytes},
                            {"sequence_parallel_ops", t.sequence_parallel_ops.size()}};
  }
  std::uint64_t peak = 0;
  for (const auto& rp : r.roles) peak = std::max(peak, rp.peak_bytes);
  j["max_peak_bytes"] = peak;
  j["plan_valid"] = valid;
  j["fits"] = r.fits;
  j["estimated_step_seconds"] = r.estimated_step_seconds;
  j["communication_seconds"] = r.communication_seconds;
  return j;
}

std::string parallel_text(const planner::ParallelPlanResult& r) {
  const auto& o = r.options;
  std::string s;
  char line[512];
  std::snprintf(line, sizeof line, "layout               %d GPUs = data parallel %d x tp %d x pp %d; ZeRO-%d; %d microbatch(es)%s%s\n", o.gpus,
                o.data_parallel(), o.tp, o.pp, o.zero, o.microbatches, o.pp > 1 ? (std::string(", ") + planner::pipeline_schedule_name(o.pp_schedule)).c_str() : "",
                o.sequence_parallel ? ", sequence parallel" : "");
  s += line;
  std::snprintf(line, sizeof line, "parameters           %llu (unsharded)\n", static_cast<unsigned long long>(r.unsharded_parameters));
  s += line;
  if (o.tp > 1) {
    const auto& t = r.tensor_parallel;
    std::snprintf(line, sizeof line, "tensor parallel      %zu column + %zu row matmuls split; %zu weight matmul(s) replicated%s\n", t.column_ops,
                  t.row_ops, t.replicated_matmuls, t.replicated.empty() ? "" : (" (" + t.replicated.front() + (t.replicated.size() > 1 ? ", ..." : "") + ")").c_str());
    s += line;
    std::snprintf(line, sizeof line, "                     weights: %s per rank split, %s replicated on every rank (embeddings, norms, head, row biases)\n",
                  human_bytes(t.sharded_weight_bytes).c_str(), human_bytes(t.replicated_weight_bytes).c_str());
    s += line;
  }
  for (const auto& rp : r.roles) {
    const auto& t = rp.result;
    std::snprintf(line, sizeof line, "\nrank role: %s (ranks %s)\n", rp.role.c_str(), ranks_text(rp.ranks).c_str());
    s += line;
    auto row = [&](const char* what, std::uint64_t b, const std::string& note) {
      std::snprintf(line, sizeof line, "  %-22s %12s  %s\n", what, human_bytes(b).c_str(), note.c_str());
      s += line;
    };
    row("peak", rp.peak_bytes, "the most device bytes the rank holds (libraries not included)");
    row("model state", rp.model_state_bytes, "weights + gradients + optimizer state");
    row("  weights", rp.zero.weight_bytes, "");
    row("  gradients", rp.zero.gradient_bytes, "");
    row("  optimizer state", rp.zero.optimizer_state_bytes, "");
    row("activations", rp.activation_bytes, std::to_string(rp.in_flight) + " microbatch(es) in flight x " + human_bytes(rp.saved_bytes_per_microbatch));
    row("arena", t.plan.arena_bytes, "strategy " + t.strategy + ", " + std::to_string(t.recomputed_tensors) + " recomputed, " +
                                         std::to_string(t.swapped_tensors) + " swapped");
    row("communication/step", rp.communication.total(),
        "all-reduce " + human_bytes(rp.communication.all_reduce) + ", reduce-scatter " + human_bytes(rp.communication.reduce_scatter) +
            ", all-gather " + human_bytes(rp.communication.all_gather) + ", send/recv " + human_bytes(rp.communication.send_recv));
    std::snprintf(line, sizeof line, "  %-22s %s\n", "plan", t.report.valid ? "valid (verified)" : "INVALID");
    s += line;
  }
  std::snprintf(line, sizeof line, "\nstep estimate        %.3f ms (compute%s + communication %.3f ms, not overlapped)\n", 1e3 * r.estimated_step_seconds,
                o.pp > 1 ? " with the pipeline bubble" : "", 1e3 * r.communication_seconds);
  s += line;
  return s;
}

nlohmann::json pytorch_parallel_json(const planner::PytorchDataParallel& p) {
  nlohmann::json j;
  j["layout"] = planner::pytorch_layout_name(p.layout);
  j["world_size"] = p.world_size;
  if (p.layout == planner::PytorchLayout::fsdp2) j["reshard_after_forward"] = p.reshard_after_forward;
  else j["bucket_bytes"] = p.bucket_bytes;
  std::uint64_t worst = 0;
  nlohmann::json roles = nlohmann::json::array();
  for (const auto& r : p.roles) {
    roles.push_back({{"ranks", r.ranks}, {"pytorch_peak_bytes", r.peak_bytes}, {"pytorch_step_peak_bytes", r.step_peak_bytes},
                     {"model_state_bytes", r.model_state_bytes}});
    worst = std::max(worst, r.peak_bytes);
  }
  j["roles"] = roles;
  j["pytorch_peak_bytes"] = worst;
  j["doubts"] = p.doubts;
  return j;
}

std::string pytorch_parallel_text(const planner::PytorchDataParallel& p) {
  std::string s = "\nPyTorch " + std::string(planner::pytorch_layout_name(p.layout)) + " on " + std::to_string(p.world_size) +
                  " GPUs (max_memory_allocated per rank, workspaces included; the run, then a steady step):\n";
  char line[512];
  for (const auto& r : p.roles) {
    std::snprintf(line, sizeof line, "  ranks %-14s %12s  step %s, model state %s\n", ranks_text(r.ranks).c_str(),
                  human_bytes(r.peak_bytes).c_str(), human_bytes(r.step_peak_bytes).c_str(), human_bytes(r.model_state_bytes).c_str());
    s += line;
  }
  for (const auto& d : p.doubts) s += "  doubt: " + d + "\n";
  return s;
}

}  // namespace memplan::cli
