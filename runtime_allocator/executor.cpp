// The executor: binds every tensor (arena offset, view source, own buffer or pool block), then runs ops.
#include "runtime_allocator/executor.hpp"

#include <chrono>
#include <map>

#include "runtime_allocator/weights.hpp"

namespace memplan::runtime {

using analysis::kNoOp;
using analysis::kNoTensor;
using analysis::TensorId;

namespace {
constexpr std::uint64_t kBufferAlignment = 64;

std::string shape_text(const std::vector<std::int64_t>& dims) {
  std::string s = "[";
  for (std::size_t k = 0; k < dims.size(); ++k) s += (k ? "," : "") + std::to_string(dims[k]);
  return s + "]";
}

bool is_copy_view(const analysis::Op& op) {
  return op.domain.empty() && (op.type == "Reshape" || op.type == "Flatten" || op.type == "Squeeze" ||
                               op.type == "Unsqueeze" || op.type == "Identity" || op.type == "Dropout");
}
}  // namespace

Executor::Executor(const analysis::Graph& g, const planner::Plan& plan, Backend& backend, ExecOptions options)
    : g_(g), backend_(backend), options_(options) {
  require_weight_data(g);
  schedule_ = plan.schedule.empty() && options.unshared ? analysis::topological_order(g) : plan.schedule;
  if (schedule_.size() != g.ops.size() || !analysis::is_topological(g, schedule_))
    fail(ErrorKind::plan_mismatch, "the plan's schedule is not a topological order of every op of '" + g.name + "'");
  for (auto o : schedule_)
    if (!backend.kernels().supports(g.ops[o]))
      fail(ErrorKind::unsupported, "backend '" + backend.name() + "' has no kernel for op '" + g.ops[o].name + "' (" +
                                       (g.ops[o].domain.empty() ? "" : g.ops[o].domain + "::") + g.ops[o].type + ")");
  pool_ = std::make_unique<PoolAllocator>(backend, options.pool);
  addr_.assign(g.tensors.size(), nullptr);
  if (options.unshared) bind_unshared();
  else bind_planned(plan);
  for (TensorId t = 0; t < g.tensors.size(); ++t) {
    const auto& x = g.tensors[t];
    if (x.producer != kNoOp || !addr_[t] || x.role == analysis::TensorRole::input) continue;
    if (x.data) {
      backend.copy_to_device(addr_[t], x.data->bytes.data(), x.data->bytes.size());
    } else if (x.role == analysis::TensorRole::optimizer_state) {  // momentum, Adam moments and step start at 0
      const std::vector<std::byte> zeros(x.bytes());
      backend.copy_to_device(addr_[t], zeros.data(), zeros.size());
    }
  }
  prepare_ops();
}

Executor::~Executor() = default;

std::byte* Executor::own_buffer(TensorId t) {
  buffers_.emplace_back(backend_, g_.tensors[t].bytes(), kBufferAlignment);
  stats_.separate_bytes = checked_add(stats_.separate_bytes, g_.tensors[t].bytes(), "separate buffers");
  return buffers_.back().data();
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

void Executor::bind_unshared() {
  const auto used = used_tensors(g_);
  for (TensorId t = 0; t < g_.tensors.size(); ++t)
    if (used[t]) addr_[t] = own_buffer(t);
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
  std::map<TensorId, TensorId> view_of;
  for (const auto& a : plan.aliases)
    if (a.kind == planner::AliasKind::view) view_of[a.tensor] = a.source;
  const auto used = used_tensors(g_);
  for (TensorId t = 0; t < g_.tensors.size(); ++t) {
    if (!used[t]) continue;
    if (arena_->in_arena(t)) addr_[t] = arena_->bind(t);
    else if (view_of.count(t)) continue;  // bound to its source below
    else if (g_.tensors[t].producer == kNoOp) addr_[t] = own_buffer(t);
    else addr_[t] = pool_->allocate(bytes[t], kBufferAlignment);  // gradients, optimizer state, host copies
  }
  // A view of a tensor outside the arena (a reshaped weight or input) reads its source's bytes.
  for (const auto& [t, src] : view_of) {
    if (addr_[t] || !used[t]) continue;
    TensorId root = src;
    for (std::size_t hops = 0; !addr_[root] && view_of.count(root) && hops < g_.tensors.size(); ++hops) root = view_of[root];
    if (!addr_[root] || bytes[root] != bytes[t])
      fail(ErrorKind::plan_mismatch, "tensor '" + g_.tensors[t].name + "' is planned as a view of '" + g_.tensors[src].name +
                                         "', which has no buffer of the same size");
    addr_[t] = addr_[root];
  }
}

TensorRef Executor::ref(TensorId t, std::byte* at) const {
  if (t == kNoTensor) return {};
  const auto& x = g_.tensors[t];
  return TensorRef{at, x.dtype, x.shape(), x.bytes()};
}

void Executor::prepare_ops() {
  KernelSet& k = backend_.kernels();
  mode_.assign(g_.ops.size(), Mode::direct);
  staging_.assign(g_.ops.size(), nullptr);
  for (auto o : schedule_) {
    const auto& op = g_.ops[o];
    bool overlap = false, exact = true;
    for (auto y : op.outputs)
      for (auto x : op.inputs) {
        if (y == kNoTensor || x == kNoTensor) continue;
        const std::uint64_t by = g_.tensors[y].bytes(), bx = g_.tensors[x].bytes();
        if (by == 0 || bx == 0 || !(addr_[y] < addr_[x] + bx && addr_[x] < addr_[y] + by)) continue;
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
      if (y != kNoTensor) total = checked_add(total, align_up(g_.tensors[y].bytes(), kBufferAlignment), "staging");
    mode_[o] = Mode::staged;
    staging_[o] = pool_->allocate(total, kBufferAlignment);
  }
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
    backend_.copy_to_device(addr_[g_.inputs[i]], inputs[i].bytes.data(), inputs[i].bytes.size());
  }
  if (arena_) arena_->reset_touched();
  stats_.ops_run = stats_.views_elided = stats_.inplace_ops = stats_.staged_ops = 0;
  KernelSet& kernels = backend_.kernels();
  std::vector<TensorRef> in, out;
  for (auto o : schedule_) {
    const auto& op = g_.ops[o];
    in.clear();
    out.clear();
    for (auto x : op.inputs) in.push_back(ref(x, x == kNoTensor ? nullptr : addr_[x]));
    std::uint64_t at = 0;
    for (auto y : op.outputs) {
      out.push_back(ref(y, y == kNoTensor ? nullptr : (mode_[o] == Mode::staged ? staging_[o] + at : addr_[y])));
      if (y != kNoTensor) at += align_up(g_.tensors[y].bytes(), kBufferAlignment);
    }
    kernels.run(op, in, out);
    for (std::size_t k = 0; k < op.outputs.size(); ++k) {
      const TensorId y = op.outputs[k];
      if (y == kNoTensor) continue;
      if (mode_[o] == Mode::staged) backend_.copy_on_device(addr_[y], out[k].data, out[k].bytes);
      if (arena_) arena_->mark_written(y);
    }
    ++stats_.ops_run;
    stats_.views_elided += mode_[o] == Mode::view;
    stats_.inplace_ops += mode_[o] == Mode::inplace;
    stats_.staged_ops += mode_[o] == Mode::staged;
  }
  backend_.synchronize();
  std::vector<analysis::TensorData> results;
  for (auto t : g_.outputs) {
    const auto& x = g_.tensors[t];
    analysis::TensorData d;
    d.dtype = x.dtype;
    d.dims = x.shape();
    d.bytes.resize(x.bytes());
    backend_.copy_to_host(d.bytes.data(), addr_[t], d.bytes.size());
    results.push_back(std::move(d));
  }
  stats_.touched_bytes = arena_ ? arena_->touched_bytes() : 0;
  stats_.pool_peak_bytes = pool_->stats().peak_in_use_bytes;
  stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return results;
}

}  // namespace memplan::runtime
