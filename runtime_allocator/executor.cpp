// The executor: binds every tensor (arena offset, view source, own buffer, pool block or host memory),
// checks inputs, stages unsafe overlaps and orders swaps on the copy queue, then runs ops on a backend.
#include "runtime_allocator/executor.hpp"

#include <algorithm>
#include <chrono>
#include <map>

#include "analysis/ops.hpp"
#include "planner/concat_in_place.hpp"
#include "runtime_allocator/kernels/dropout_mask.hpp"
#include "runtime_allocator/weights.hpp"

namespace memplan::runtime {

using analysis::kNoOp;
using analysis::kNoTensor;
using analysis::OpId;
using analysis::TensorId;

namespace {

std::string shape_text(const std::vector<std::int64_t>& dims) {
  std::string s = "[";
  for (std::size_t k = 0; k < dims.size(); ++k) s += (k ? "," : "") + std::to_string(dims[k]);
  return s + "]";
}

bool is_copy_view(const analysis::Op& op) {
  const analysis::OpInfo* info = analysis::op_registry().find(op);
  return info && (info->kind == analysis::OpKind::view || info->identity_in_inference);
}

// SwapOut / SwapIn: copies between the backend's memory and its host memory, run by the executor itself.
bool is_swap(const analysis::Op& op) {
  const analysis::OpInfo* info = analysis::op_registry().find(op);
  return info && info->kind == analysis::OpKind::memory;
}

std::string op_label(const analysis::Op& op) {
  return "op '" + op.name + "' (" + (op.domain.empty() ? "" : op.domain + "::") + op.type + ")";
}

}  // namespace

Executor::Executor(const analysis::Graph& g, const planner::Plan& plan, Backend& backend, ExecOptions options)
    : g_(g), backend_(backend), options_(options) {
  if (!options.synthesize_missing_weights) require_weight_data(g);
  schedule_ = plan.schedule.empty() && options.unshared ? analysis::topological_order(g) : plan.schedule;
  if (schedule_.size() != g.ops.size() || !analysis::is_topological(g, schedule_))
    fail(ErrorKind::plan_mismatch, "the plan's schedule is not a topological order of every op of '" + g.name + "'");
  check_supported();
  const DataParallel& dp = options.data_parallel;
  if (dp.zero_stage != 0) {
    if (!dp.collectives) fail(ErrorKind::usage, "ZeRO stage " + std::to_string(dp.zero_stage) + " without collectives (data parallelism)");
    zero_state_ = zero_sharded_state(g, dp.gradients);
  }
  addr_.assign(g.tensors.size(), nullptr);
  if (options.unshared) bind_unshared();
  else bind_planned(plan);
  bind_scratch(plan);
  upload_constants();
  backend.kernels().prepare(g);
  prepare_ops();
  order_swaps();
  prepare_gradient_sync();
}

// Every op of the schedule has a kernel on this backend (swaps are the executor's own copies).
void Executor::check_supported() const {
  const KernelSet& k = backend_.kernels();
  for (auto o : schedule_) {
    const auto& op = g_.ops[o];
    if (is_swap(op)) continue;
    const std::string why = k.unsupported_reason(g_, op);
    if (!why.empty()) fail(ErrorKind::unsupported, "backend '" + backend_.name() + "' cannot run " + op_label(op) + ": " + why);
  }
}

Executor::~Executor() {
  if (host_.p) backend_.deallocate_host(host_.p, host_.bytes);
}

// Tensors outside the arena are packed at aligned offsets into one resident device allocation, and
// tensors placed on the host into one host allocation: `bind_separate` allocates both and binds them.
void Executor::place_separate(TensorId t) {
  auto& list = g_.tensors[t].on_host ? host_list_ : resident_list_;
  list.push_back(t);
}

void Executor::bind_separate() {
  const std::uint64_t align = backend_.buffer_alignment();
  auto offsets = [&](const std::vector<TensorId>& list, std::vector<std::uint64_t>& at) {
    std::uint64_t end = 0;
    for (TensorId t : list) {
      at.push_back(end);
      end = checked_add(end, align_up(g_.tensors[t].bytes(), align), "buffers outside the arena");
    }
    return end;
  };
  std::vector<std::uint64_t> dev_at, host_at;
  const std::uint64_t dev_bytes = offsets(resident_list_, dev_at), host_bytes = offsets(host_list_, host_at);
  // At least one aligned block when anything is placed, so that even an empty tensor has an address.
  if (!resident_list_.empty()) resident_ = DeviceBuffer(backend_, std::max(dev_bytes, align), align);
  for (std::size_t k = 0; k < resident_list_.size(); ++k) addr_[resident_list_[k]] = resident_.data() + dev_at[k];
  if (!host_list_.empty()) host_ = {backend_.allocate_host(std::max(host_bytes, align), align), std::max(host_bytes, align)};
  for (std::size_t k = 0; k < host_list_.size(); ++k) addr_[host_list_[k]] = host_.p + host_at[k];
  stats_.separate_bytes = resident_.size();
  stats_.host_bytes = host_.bytes;
  resident_list_.clear();
  host_list_.clear();
}

// Tensors some op reads or writes, or the user feeds or reads.
static std::vector<bool> used_tensors(const analysis::Graph& g) {
  std::vector<bool> used(g.tensors.size(), false);
  for (const auto& op : g.ops) {
    for (auto t : op.inputs)
      if (t != kNoTensor) used[t] = true;
    for (auto t : op.outputs)
      if (t != kNoTensor) used[t] = true;
  }
  for (auto t : g.inputs) used[t] = true;
  for (auto t : g.outputs) used[t] = true;
  return used;
}

// The tensors given memory: those used, but the optimizer state ZeRO keeps as shards.
std::vector<bool> Executor::placed_tensors() const {
  std::vector<bool> used = used_tensors(g_);
  for (TensorId t = 0; t < zero_state_.size(); ++t)
    if (zero_state_[t]) used[t] = false;
  return used;
}

// Updates in place (OpInfo::rewrites) are the storage they rewrite even here: that is what the op means, so
// that repeated runs train.
void Executor::bind_unshared() {
  const auto used = placed_tensors();
  std::vector<TensorId> owner(g_.tensors.size(), kNoTensor);
  for (TensorId t = 0; t < g_.tensors.size(); ++t) {
    if (!used[t]) continue;
    if (g_.tensors[t].producer != kNoOp) owner[t] = analysis::storage_owner(g_, t);
    if (owner[t] == kNoTensor || owner[t] == t) place_separate(t);
  }
  bind_separate();
  for (TensorId t = 0; t < g_.tensors.size(); ++t)
    if (owner[t] != kNoTensor && owner[t] != t) addr_[t] = addr_[owner[t]];
}

void Executor::bind_planned(const planner::Plan& plan) {
  if (!plan.model_fingerprint.empty() && plan.model_fingerprint != g_.fingerprint())
    fail(ErrorKind::plan_mismatch, "the plan was made for another graph than '" + g_.name + "' (fingerprint " +
                                       plan.model_fingerprint + ", graph " + g_.fingerprint() + ")");
  std::vector<std::uint64_t> bytes(g_.tensors.size(), 0);
  for (TensorId t = 0; t < g_.tensors.size(); ++t)
    if (g_.tensors[t].shape_known()) bytes[t] = g_.tensors[t].bytes();
  arena_ = std::make_unique<Arena>(backend_, plan, bytes, options_.check_bounds);
  stats_.arena_bytes = plan.arena_bytes;
  // Views of tensors outside the arena and updates that rewrite such storage in place (an optimizer's weight
  // and state, an accumulated gradient) take their source's address.
  std::map<TensorId, TensorId> view_of;
  for (const auto& a : plan.aliases)
    if (a.kind == planner::AliasKind::view || (a.tensor < g_.tensors.size() && !arena_->in_arena(a.tensor))) view_of[a.tensor] = a.source;
  const auto used = placed_tensors();
  for (TensorId t = 0; t < g_.tensors.size(); ++t) {
    if (!used[t]) continue;
    if (arena_->in_arena(t)) addr_[t] = arena_->bind(t);
    else if (!view_of.count(t)) place_separate(t);  // inputs, weights, optimizer state, gradients, host copies
  }
  bind_separate();
  // A view of a tensor outside the arena (a reshaped weight or input) reads its source's bytes; an in-place
  // update writes them.
  for (const auto& [t, src] : view_of) {
    if (addr_[t] || !used[t]) continue;
    TensorId root = src;
    for (std::size_t hops = 0; !addr_[root] && view_of.count(root) && hops < g_.tensors.size(); ++hops) root = view_of[root];
    if (!addr_[root] || bytes[root] != bytes[t])
      fail(ErrorKind::plan_mismatch, "tensor '" + g_.tensors[t].name + "' is planned to share the bytes of '" + g_.tensors[src].name +
                                         "', which has no buffer of the same size");
    addr_[t] = addr_[root];
  }
}

// Each op's scratch region (a convolution's workspace) in the arena, as the plan places it.
void Executor::bind_scratch(const planner::Plan& plan) {
  scratch_.assign(g_.ops.size(), nullptr);
  scratch_bytes_.assign(g_.ops.size(), 0);
  if (!arena_) return;
  for (const auto& sc : plan.scratch) {
    if (sc.op >= g_.ops.size() || checked_add(sc.offset, sc.bytes, "scratch end") > plan.arena_bytes)
      fail(ErrorKind::plan_mismatch, "a scratch region of the plan lies outside its arena or names no op");
    scratch_[sc.op] = arena_->base() + sc.offset;
    scratch_bytes_[sc.op] = sc.bytes;
  }
}

// Weights and constants get their bytes; optimizer state (momentum, Adam moments and step) and gradient
// accumulators start at 0.
void Executor::upload_constants() {
  for (TensorId t = 0; t < g_.tensors.size(); ++t) {
    const auto& x = g_.tensors[t];
    if (x.producer != kNoOp || !addr_[t] || x.role == analysis::TensorRole::input) continue;
    if (x.data && (x.data->bytes.size() == x.bytes() || !options_.synthesize_missing_weights)) {
      backend_.copy_to_device(addr_[t], x.data->bytes.data(), x.data->bytes.size());
    } else if (x.role == analysis::TensorRole::optimizer_state || x.role == analysis::TensorRole::gradient) {
      const std::vector<std::byte> zeros(x.bytes());
      backend_.copy_to_device(addr_[t], zeros.data(), zeros.size());
    } else if (options_.synthesize_missing_weights) {
      std::vector<std::byte> values(x.bytes());
      synthesize_weight(x, values.data());
      backend_.copy_to_device(addr_[t], values.data(), values.size());
    }
  }
}

TensorRef Executor::ref(TensorId t, std::byte* at) const {
  if (t == kNoTensor) return {};
  const auto& x = g_.tensors[t];
  return TensorRef{at, x.dtype, x.shape(), x.bytes()};
}

// A Concat whose inputs already lie, in order, in their slices of its output (planned concat in place): nothing to do.
bool Executor::concat_done(const analysis::Op& op) const {
  const auto offsets = planner::concat_input_offsets(g_, op);
  if (!offsets || op.inputs.empty() || !addr_[op.outputs[0]]) return false;
  for (std::size_t i = 0; i < op.inputs.size(); ++i)
    if (addr_[op.inputs[i]] != addr_[op.outputs[0]] + (*offsets)[i]) return false;
  return true;
}

void Executor::prepare_ops() {
  KernelSet& k = backend_.kernels();
  mode_.assign(g_.ops.size(), Mode::direct);
  staging_.assign(g_.ops.size(), nullptr);
  for (auto o : schedule_) {
    const auto& op = g_.ops[o];
    if (is_swap(op)) {
      mode_[o] = Mode::swap;
      continue;
    }
    if (concat_done(op)) {
      mode_[o] = Mode::concat_in_place;
      continue;
    }
    bool overlap = false, exact = true;
    for (auto y : op.outputs)
      for (auto x : op.inputs) {
        if (y == kNoTensor || x == kNoTensor) continue;
        const std::uint64_t by = g_.tensors[y].bytes(), bx = g_.tensors[x].bytes();
        if (by == 0 || bx == 0 || !addr_[x] || !addr_[y] || !(addr_[y] < addr_[x] + bx && addr_[x] < addr_[y] + by)) continue;
        overlap = true;
        exact = exact && addr_[y] == addr_[x] && by == bx;
      }
    if (!overlap) continue;
    if (exact && k.alias_safe(op)) {
      mode_[o] = is_copy_view(op) ? Mode::view : Mode::inplace;
      continue;
    }
    std::uint64_t total = 0;
    for (auto y : op.outputs)
      if (y != kNoTensor) total = checked_add(total, align_up(g_.tensors[y].bytes(), backend_.buffer_alignment()), "staging");
    mode_[o] = Mode::staged;
    if (!pool_) pool_ = std::make_unique<PoolAllocator>(backend_, options_.pool);  // only when something stages
    staging_[o] = pool_->allocate(total, backend_.buffer_alignment());
  }
}

// A SwapOut's source range may be overwritten only after its copy: the first later op writing an
// overlapping range (an output, or its scratch region) waits for it. A SwapIn's result is read only
// after its copy: its readers wait.
void Executor::order_swaps() {
  swap_ready_.assign(g_.ops.size(), 0);
  swap_done_.assign(g_.ops.size(), 0);
  waits_before_.assign(schedule_.size(), {});
  const bool scratch_matters = backend_.kernels().uses_plan_scratch();
  for (std::size_t step = 0; step < schedule_.size(); ++step) {
    const OpId o = schedule_[step];
    const auto& op = g_.ops[o];
    if (mode_[o] != Mode::swap) continue;
    const bool out = op.type == "SwapOut";
    swap_ready_[o] = backend_.create_event();
    swap_done_[o] = backend_.create_event();
    const TensorId dev = out ? op.inputs[0] : op.outputs[0];
    const std::byte* lo = addr_[dev];
    const std::byte* hi = lo + g_.tensors[dev].bytes();
    auto meets = [&](const std::byte* p, std::uint64_t bytes) { return p && p < hi && lo < p + bytes; };
    for (std::size_t later = step + 1; later < schedule_.size(); ++later) {
      const OpId next_id = schedule_[later];
      const auto& next = g_.ops[next_id];
      bool hit = out && scratch_matters && meets(scratch_[next_id], scratch_bytes_[next_id]);
      for (TensorId t : out ? next.outputs : next.inputs)
        if (t != kNoTensor && meets(addr_[t], g_.tensors[t].bytes())) hit = true;
      if (!hit) continue;
      waits_before_[later].push_back(o);
      if (out) break;
    }
  }
}

// Whether the op at `step` reads or writes bytes in [lo, hi): an input, an output, or its scratch region.
bool Executor::touches(std::size_t step, const std::byte* lo, const std::byte* hi) const {
  const OpId o = schedule_[step];
  auto meets = [&](const std::byte* p, std::uint64_t bytes) { return p && bytes && p < hi && lo < p + bytes; };
  if (backend_.kernels().uses_plan_scratch() && meets(scratch_[o], scratch_bytes_[o])) return true;
  for (const auto* list : {&g_.ops[o].inputs, &g_.ops[o].outputs})
    for (TensorId t : *list)
      if (t != kNoTensor && meets(addr_[t], g_.tensors[t].bytes())) return true;
  return false;
}

// Data parallel: each gradient bucket is reduced after its producers and before any op touches it again.
void Executor::prepare_gradient_sync() {
  const DataParallel& dp = options_.data_parallel;
  if (!dp.collectives) return;
  auto buckets = runtime::gradient_buckets(g_, schedule_, addr_, dp.gradients, dp.bucket_bytes,
                                           [this](std::size_t step, const std::byte* lo, const std::byte* hi) { return touches(step, lo, hi); });
  stats_.reduce_calls = buckets.size();
  for (const auto& b : buckets) stats_.reduced_bytes += b.bytes;
  grad_sync_ = std::make_unique<GradientSync>(std::move(buckets), schedule_.size(), backend_, *dp.collectives, dp.zero_stage != 0);
  if (dp.zero_stage == 0) return;
  zero_ = std::make_unique<ZeroOptimizer>(g_, grad_sync_->buckets(), addr_, zero_state_, backend_, *dp.collectives, dp.zero_stage);
  stats_.zero = zero_->stats();
}

const std::vector<GradBucket>& Executor::gradient_buckets() const noexcept {
  static const std::vector<GradBucket> none;
  return grad_sync_ ? grad_sync_->buckets() : none;
}

void Executor::run_one(std::size_t step, std::vector<TensorRef>& in, std::vector<TensorRef>& out) {
  for (OpId w : waits_before_[step]) backend_.compute_waits(swap_done_[w]);
  if (grad_sync_) grad_sync_->before(step);
  const OpId o = schedule_[step];
  const auto& op = g_.ops[o];
  if (zero_ && zero_->replaces(o)) {  // ZeRO: the update on this rank's shard
    zero_->run(o);
    ++stats_.ops_run;
    if (grad_sync_) grad_sync_->after(step);
    return;
  }
  if (mode_[o] == Mode::concat_in_place) {
    if (arena_) arena_->mark_written(op.outputs[0]);
    ++stats_.ops_run;
    ++stats_.concats_in_place;
    return;
  }
  if (mode_[o] == Mode::swap) {
    const TensorId src = op.inputs[0], dst = op.outputs[0];
    if (g_.tensors[src].bytes() != g_.tensors[dst].bytes())
      fail(ErrorKind::plan_mismatch, op_label(op) + " copies a tensor unchanged; its sizes differ");
    backend_.record_on_compute(swap_ready_[o]);
    backend_.copy_async(addr_[dst], addr_[src], g_.tensors[src].bytes(), swap_ready_[o], swap_done_[o]);
    if (arena_) arena_->mark_written(dst);
    ++stats_.ops_run;
    if (grad_sync_) grad_sync_->after(step);
    return;
  }
  in.clear();
  out.clear();
  for (auto x : op.inputs) in.push_back(ref(x, x == kNoTensor ? nullptr : addr_[x]));
  std::uint64_t at = 0;
  for (auto y : op.outputs) {
    out.push_back(ref(y, y == kNoTensor ? nullptr : (mode_[o] == Mode::staged ? staging_[o] + at : addr_[y])));
    if (y != kNoTensor) at += align_up(g_.tensors[y].bytes(), backend_.buffer_alignment());
  }
  backend_.kernels().run(OpCall{op, o, in, out, scratch_[o], scratch_bytes_[o]});
  for (std::size_t k = 0; k < op.outputs.size(); ++k) {
    const TensorId y = op.outputs[k];
    if (y == kNoTensor) continue;
    if (mode_[o] == Mode::staged) backend_.copy_on_device(addr_[y], out[k].data, out[k].bytes);
    if (arena_) arena_->mark_written(y);
  }
  ++stats_.ops_run;
  if (grad_sync_) grad_sync_->after(step);
  stats_.views_elided += mode_[o] == Mode::view;
  stats_.inplace_ops += mode_[o] == Mode::inplace;
  stats_.staged_ops += mode_[o] == Mode::staged;
}

void Executor::run_schedule() {
  const RandomStepScope step_scope(runs_++);  // each run (a training step) draws its own random masks
  if (arena_) arena_->reset_touched();
  stats_.ops_run = stats_.views_elided = stats_.inplace_ops = stats_.staged_ops = stats_.concats_in_place = 0;
  std::vector<TensorRef> in, out;
  const auto issue_start = std::chrono::steady_clock::now();
  backend_.begin_run();
  if (options_.profile_ops) stats_.op_seconds.assign(g_.ops.size(), 0.0);
  for (std::size_t step = 0; step < schedule_.size(); ++step) {
    if (!options_.profile_ops) {
      run_one(step, in, out);
      continue;
    }
    backend_.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    run_one(step, in, out);
    backend_.synchronize();
    stats_.op_seconds[schedule_[step]] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (grad_sync_) grad_sync_->finish();
  if (zero_) zero_->gather_weights();
  stats_.issue_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - issue_start).count();
  stats_.device_seconds = backend_.end_run();  // waits for the queues
  stats_.touched_bytes = arena_ ? arena_->touched_bytes() : 0;
  stats_.pool_peak_bytes = pool_ ? pool_->stats().peak_in_use_bytes : 0;
}

std::vector<analysis::TensorData> Executor::run(const std::vector<analysis::TensorData>& inputs) {
  const auto t0 = std::chrono::steady_clock::now();
  if (inputs.size() != g_.inputs.size())
    fail(ErrorKind::usage, "graph '" + g_.name + "' takes " + std::to_string(g_.inputs.size()) + " inputs, " +
                               std::to_string(inputs.size()) + " given");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const auto& x = g_.tensors[g_.inputs[i]];
    if (inputs[i].dtype != x.dtype || inputs[i].dims != x.shape() || inputs[i].bytes.size() != x.bytes())
      fail(ErrorKind::usage, "input '" + x.name + "' expects " + analysis::dtype_name(x.dtype) + " " + shape_text(x.shape()) +
                                 ", got " + analysis::dtype_name(inputs[i].dtype) + " " + shape_text(inputs[i].dims));
  }
  for (std::size_t i = 0; i < inputs.size(); ++i)
    backend_.copy_to_device(addr_[g_.inputs[i]], inputs[i].bytes.data(), inputs[i].bytes.size());
  run_schedule();
  std::vector<analysis::TensorData> results;
  for (auto t : g_.outputs) results.push_back(read(t));
  stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return results;
}

std::vector<analysis::TensorData> Executor::run(const std::map<std::string, analysis::TensorData>& inputs) {
  std::vector<analysis::TensorData> ordered;
  for (TensorId t : g_.inputs) {
    auto it = inputs.find(g_.tensors[t].name);
    if (it == inputs.end()) fail(ErrorKind::usage, "no value given for graph input '" + g_.tensors[t].name + "'");
    ordered.push_back(it->second);
  }
  return run(ordered);
}

double Executor::run_device() {
  run_schedule();
  return stats_.device_seconds;
}

analysis::TensorData Executor::read(TensorId t) const {
  if (zero_ && t < g_.tensors.size() && !addr_[t] && zero_->holds(t)) return zero_->read(t);
  if (t >= g_.tensors.size() || !addr_[t]) fail(ErrorKind::usage, "tensor " + std::to_string(t) + " has no memory on the backend");
  const auto& x = g_.tensors[t];
  analysis::TensorData d;
  d.dtype = x.dtype;
  d.dims = x.shape();
  d.bytes.resize(x.bytes());
  backend_.copy_to_host(d.bytes.data(), addr_[t], d.bytes.size());
  return d;
}

}  // namespace memplan::runtime
