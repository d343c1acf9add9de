// The CUDA executor: binds tensors to the arena (one cudaMalloc) at planned offsets, uploads weights,
// runs the schedule on the compute stream, and swaps on a copy stream ordered by events.
#include "runtime_allocator/cuda/cuda_executor.hpp"

#include <algorithm>
#include <cstring>

#include "runtime_allocator/cuda/cuda_state.hpp"

namespace memplan::runtime::cuda {

using analysis::Graph;
using analysis::kNoTensor;
using analysis::Op;
using analysis::OpId;
using analysis::TensorId;
using analysis::TensorRole;
using planner::kNotInArena;

namespace {

constexpr std::uint64_t kAlign = 256;

bool is_swap(const Op& op, const char* type) { return op.domain == "memplan" && op.type == type; }

// Deterministic stand-in values for weights whose bytes were never loaded (external data).
void synthesize(const analysis::Tensor& t, std::byte* host) {
  const std::uint64_t n = t.element_count();
  std::uint64_t h = 1469598103934665603ull;
  for (char c : t.name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  if (t.dtype != analysis::DType::f32) {
    std::memset(host, 0, t.bytes());
    return;
  }
  auto* f = reinterpret_cast<float*>(host);
  for (std::uint64_t i = 0; i < n; ++i) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    f[i] = static_cast<float>(static_cast<std::int64_t>(h % 2001) - 1000) * 1e-4f;
  }
}

struct SwapEvents {
  cudaEvent_t ready = nullptr;  // recorded on the compute stream before the copy is queued
  cudaEvent_t done = nullptr;   // recorded on the copy stream after it
};

}  // namespace

bool cuda_available() noexcept { return device_count() > 0; }

struct CudaExecutor::Impl {
  const Graph& g;
  const planner::Plan& plan;
  CudaRunOptions opts;
  Context ctx;
  FusedKernelCache fused;
  Buffer arena, resident, host, workspace;
  ExecState st;
  CudaRunStats stats;
  std::size_t free_before = 0;
  std::vector<SwapEvents> swap_events;           // per op (only swap ops have events)
  std::vector<std::vector<OpId>> waits_before;  // per schedule step: swap ops whose copies must be done first

  Impl(const Graph& graph, const planner::Plan& p, const CudaRunOptions& o)
      : g(graph), plan(p), opts(o), ctx(o.device, o.allow_tf32), st{g, ctx, fused, {}, {}, {}, {}} {
    std::size_t total = 0;
    check(cudaMemGetInfo(&free_before, &total), "cudaMemGetInfo");
    if (plan.tensor_offset.size() != g.tensors.size() || plan.schedule.size() != g.ops.size())
      fail(ErrorKind::plan_mismatch, "the plan was made for another graph (" + std::to_string(plan.tensor_offset.size()) +
                                         " tensors, " + std::to_string(plan.schedule.size()) + " ops in the plan)");
    bind_memory();
    upload_constants();
    order_swaps();
  }

  ~Impl() {
    for (auto& e : swap_events) {
      if (e.ready) cudaEventDestroy(e.ready);
      if (e.done) cudaEventDestroy(e.done);
    }
  }

  void bind_memory() {
    const std::size_t n = g.tensors.size();
    std::vector<std::uint64_t> res_off(n, kNotInArena), host_off(n, kNotInArena);
    std::uint64_t res_bytes = 0, host_bytes = 0;
    for (TensorId t = 0; t < n; ++t) {
      if (plan.tensor_offset[t] != planner::kNotInArena || !g.tensors[t].shape_known()) continue;
      std::uint64_t& cursor = g.tensors[t].on_host ? host_bytes : res_bytes;
      (g.tensors[t].on_host ? host_off : res_off)[t] = cursor;
      cursor = checked_add(cursor, align_up(g.tensors[t].bytes(), kAlign), "resident memory");
    }
    arena = Buffer(plan.arena_bytes, Buffer::Kind::device, "the arena");
    resident = Buffer(res_bytes, Buffer::Kind::device, "inputs and weights");
    host = Buffer(host_bytes, Buffer::Kind::pinned_host, "swapped-out tensors");
    st.ptr.assign(n, nullptr);
    for (TensorId t = 0; t < n; ++t) {
      if (plan.tensor_offset[t] != planner::kNotInArena) {
        if (checked_add(plan.tensor_offset[t], g.tensors[t].bytes(), "tensor end") > plan.arena_bytes)
          fail(ErrorKind::plan_mismatch, "tensor '" + g.tensors[t].name + "' lies outside the plan's arena");
        st.ptr[t] = arena.data() + plan.tensor_offset[t];
      } else if (res_off[t] != kNotInArena) {
        st.ptr[t] = resident.data() + res_off[t];
      } else if (host_off[t] != kNotInArena) {
        st.ptr[t] = host.data() + host_off[t];
      }
    }
    bind_scratch();
    stats.arena_bytes = plan.arena_bytes;
    stats.resident_bytes = res_bytes;
    stats.host_bytes = host_bytes;
  }

  // Each op's workspace: its scratch region in the arena, or with side_workspace one buffer beside the
  // arena, sized for the algorithm cuDNN ranks first for every convolution, shared by all.
  void bind_scratch() {
    st.scratch.assign(g.ops.size(), nullptr);
    st.scratch_bytes.assign(g.ops.size(), 0);
    st.prepared.assign(g.ops.size(), nullptr);
    if (opts.side_workspace) {
      std::uint64_t ws = 0;
      for (OpId o = 0; o < g.ops.size(); ++o) ws = std::max(ws, op_workspace_bytes(st, o));
      workspace = Buffer(ws, Buffer::Kind::device, "cuDNN workspace");
      st.scratch.assign(g.ops.size(), workspace.data());
      st.scratch_bytes.assign(g.ops.size(), ws);
      stats.workspace_bytes = ws;
      return;
    }
    for (const auto& sc : plan.scratch) {
      if (sc.op >= g.ops.size() || checked_add(sc.offset, sc.bytes, "scratch end") > plan.arena_bytes)
        fail(ErrorKind::plan_mismatch, "a scratch region of the plan lies outside its arena or names no op");
      st.scratch[sc.op] = arena.data() + sc.offset;
      st.scratch_bytes[sc.op] = sc.bytes;
    }
  }

  void upload_constants() {
    for (TensorId t = 0; t < g.tensors.size(); ++t) {
      const auto& x = g.tensors[t];
      if (x.producer != analysis::kNoOp || x.role == TensorRole::input || !st.ptr[t] || x.bytes() == 0) continue;
      if (x.data && x.data->bytes.size() == x.bytes()) {
        check(cudaMemcpy(st.ptr[t], x.data->bytes.data(), x.bytes(), cudaMemcpyHostToDevice), "upload of '" + x.name + "'");
        continue;
      }
      std::vector<std::byte> tmp(x.bytes());  // optimizer state (moments, step count) starts at zero
      if (x.role != TensorRole::optimizer_state) {
        if (!opts.synthesize_missing_weights && (x.role == TensorRole::weight || x.data))
          fail(ErrorKind::runtime, "weight '" + x.name + "' has no data (external data is never loaded)");
        synthesize(x, tmp.data());
      }
      check(cudaMemcpy(st.ptr[t], tmp.data(), tmp.size(), cudaMemcpyHostToDevice), "upload of '" + x.name + "'");
    }
  }

  // A SwapOut's source range may be overwritten only after its copy: the first later op writing an
  // overlapping range waits for it. A SwapIn's result is read only after its copy: its readers wait.
  void order_swaps() {
    swap_events.assign(g.ops.size(), {});
    waits_before.assign(plan.schedule.size(), {});
    for (std::size_t step = 0; step < plan.schedule.size(); ++step) {
      const OpId o = plan.schedule[step];
      const Op& op = g.ops[o];
      const bool out = is_swap(op, "SwapOut"), in = is_swap(op, "SwapIn");
      if (!out && !in) continue;
      check(cudaEventCreateWithFlags(&swap_events[o].ready, cudaEventDisableTiming), "cudaEventCreate");
      check(cudaEventCreateWithFlags(&swap_events[o].done, cudaEventDisableTiming), "cudaEventCreate");
      const TensorId dev = out ? op.inputs[0] : op.outputs[0];
      const std::byte* lo = st.ptr[dev];
      const std::byte* hi = lo + g.tensors[dev].bytes();
      auto meets = [&](const std::byte* p, std::uint64_t bytes) { return p && p < hi && lo < p + bytes; };
      for (std::size_t later = step + 1; later < plan.schedule.size(); ++later) {
        const OpId next_id = plan.schedule[later];
        const Op& next = g.ops[next_id];
        bool hit = out && !opts.side_workspace && meets(st.scratch[next_id], st.scratch_bytes[next_id]);  // writes its workspace
        for (TensorId t : out ? next.outputs : next.inputs)
          if (t != kNoTensor && meets(st.ptr[t], g.tensors[t].bytes())) hit = true;
        if (!hit) continue;
        waits_before[later].push_back(o);
        if (out) break;
      }
    }
  }

  void run_swap(OpId o, bool out) {
    const Op& op = g.ops[o];
    const TensorId src = op.inputs[0], dst = op.outputs[0];
    const auto& ev = swap_events[o];
    check(cudaEventRecord(ev.ready, ctx.stream()), "event before '" + op.name + "'");
    check(cudaStreamWaitEvent(ctx.copy_stream(), ev.ready, 0), "copy stream wait for '" + op.name + "'");
    check(cudaMemcpyAsync(st.ptr[dst], st.ptr[src], g.tensors[src].bytes(), out ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                          ctx.copy_stream()),
          "copy of '" + op.name + "'");
    check(cudaEventRecord(ev.done, ctx.copy_stream()), "event after '" + op.name + "'");
  }

  double run_schedule() {
    cudaEvent_t start = nullptr, stop = nullptr;
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    check(cudaEventRecord(start, ctx.stream()), "cudaEventRecord");
    for (std::size_t step = 0; step < plan.schedule.size(); ++step) {
      for (OpId w : waits_before[step])
        check(cudaStreamWaitEvent(ctx.stream(), swap_events[w].done, 0), "wait for '" + g.ops[w].name + "'");
      const OpId o = plan.schedule[step];
      const Op& op = g.ops[o];
      if (is_swap(op, "SwapOut")) run_swap(o, true);
      else if (is_swap(op, "SwapIn")) run_swap(o, false);
      else run_op(st, o);
    }
    check(cudaEventRecord(stop, ctx.stream()), "cudaEventRecord");
    ctx.synchronize();
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    std::size_t free_now = 0, total = 0;
    check(cudaMemGetInfo(&free_now, &total), "cudaMemGetInfo");
    stats.peak_device_bytes = std::max<std::uint64_t>(stats.peak_device_bytes, free_before > free_now ? free_before - free_now : 0);
    stats.last_run_seconds = ms / 1e3;
    stats.fused_kernels = fused.compiled_count();
    stats.nvrtc_seconds = fused.compile_seconds();
    return stats.last_run_seconds;
  }
};

CudaExecutor::CudaExecutor(const Graph& g, const planner::Plan& plan, const CudaRunOptions& opts)
    : impl_(std::make_unique<Impl>(g, plan, opts)) {}

CudaExecutor::~CudaExecutor() = default;

std::vector<HostValue> CudaExecutor::run(const std::map<std::string, HostValue>& inputs) {
  Impl& m = *impl_;
  for (TensorId t : m.g.inputs) {
    const auto& x = m.g.tensors[t];
    auto it = inputs.find(x.name);
    if (it == inputs.end()) fail(ErrorKind::usage, "no value given for graph input '" + x.name + "'");
    if (it->second.bytes.size() != x.bytes() || it->second.dtype != x.dtype)
      fail(ErrorKind::shape, "graph input '" + x.name + "' expects " + std::to_string(x.bytes()) + " bytes of " +
                                 analysis::dtype_name(x.dtype));
    check(cudaMemcpyAsync(m.st.ptr[t], it->second.bytes.data(), x.bytes(), cudaMemcpyHostToDevice, m.ctx.stream()),
          "upload of input '" + x.name + "'");
  }
  m.run_schedule();
  std::vector<HostValue> out;
  for (TensorId t : m.g.outputs) out.push_back(read(t));
  return out;
}

double CudaExecutor::run_device() { return impl_->run_schedule(); }

HostValue CudaExecutor::read(TensorId t) const {
  const Impl& m = *impl_;
  if (t >= m.g.tensors.size() || !m.st.ptr[t]) fail(ErrorKind::usage, "tensor " + std::to_string(t) + " has no device memory");
  const auto& x = m.g.tensors[t];
  HostValue v{x.dtype, x.shape(), std::vector<std::byte>(x.bytes())};
  check(cudaMemcpy(v.bytes.data(), m.st.ptr[t], v.bytes.size(), cudaMemcpyDeviceToHost), "download of '" + x.name + "'");
  return v;
}

const CudaRunStats& CudaExecutor::stats() const noexcept { return impl_->stats; }

}  // namespace memplan::runtime::cuda
