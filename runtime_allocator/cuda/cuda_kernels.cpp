// The CUDA KernelSet: support and aliasing read from the kernel table (cuda_ops.cpp) or the fused
// elementwise path, and the per-graph state the kernels run with, pointed at each OpCall's tensors.
#include "runtime_allocator/cuda/cuda_kernels.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>

#include <cuda_runtime.h>

#include "analysis/error.hpp"
#include "analysis/fused_expr.hpp"

namespace memplan::runtime::cuda {

using analysis::kNoTensor;
using analysis::Op;
using analysis::OpId;

namespace {

OpId id_in(const analysis::Graph& g, const Op& op) { return static_cast<OpId>(&op - g.ops.data()); }

// Host bytes of one tensor of a host-run op, 64-byte aligned (the CPU kernels' own buffers are).
struct HostCopy {
  std::byte* p = nullptr;
  explicit HostCopy(std::uint64_t bytes) {
    if (bytes) p = static_cast<std::byte*>(::operator new(bytes, std::align_val_t{64}));
  }
  HostCopy(HostCopy&& o) noexcept : p(o.p) { o.p = nullptr; }
  HostCopy(const HostCopy&) = delete;
  HostCopy& operator=(const HostCopy&) = delete;
  HostCopy& operator=(HostCopy&&) = delete;
  ~HostCopy() {
    if (p) ::operator delete(p, std::align_val_t{64});
  }
};

// refs with their bytes copied from the device into `copies` (null stays null).
std::vector<TensorRef> download(const std::vector<TensorRef>& refs, std::vector<HostCopy>& copies, cudaStream_t stream) {
  std::vector<TensorRef> host = refs;
  for (auto& r : host) {
    if (!r.data) continue;
    copies.emplace_back(std::max<std::uint64_t>(r.bytes, 1));
    if (r.bytes) check(cudaMemcpyAsync(copies.back().p, r.data, r.bytes, cudaMemcpyDefault, stream), "host fallback: download");
    r.data = copies.back().p;
  }
  check(cudaStreamSynchronize(stream), "host fallback: download");
  return host;
}

}  // namespace

CudaKernels::CudaKernels(Context& ctx, bool side_workspace, bool host_fallback)
    : ctx_(ctx), side_workspace_(side_workspace), host_(host_fallback ? make_cpu_kernels() : nullptr) {}
CudaKernels::~CudaKernels() = default;

bool CudaKernels::falls_back(const analysis::Graph& g, const Op& op, std::string* why) const {
  std::string cuda = cuda_unsupported_reason(g, op);
  const bool host = !cuda.empty() && host_ && host_->unsupported_reason(g, op).empty();
  if (why) *why = std::move(cuda);
  return host;
}

void CudaKernels::fall_back(const Op& op, const std::string& why) {
  if (on_host_.insert(&op).second) fallbacks_.push_back({op.name, (op.domain.empty() ? "" : op.domain + "::") + op.type, why});
}

std::string CudaKernels::unsupported_reason(const analysis::Graph& g, const Op& op) const {
  std::string why;
  return falls_back(g, op, &why) ? std::string{} : why;
}

std::string cuda_unsupported_reason(const analysis::Graph& g, const Op& op) {
  if (half_elementwise_expr(g, op)) return {};  // bf16/f16 elementwise ops and casts between float dtypes
  if (op.domain == analysis::kMemplanDomain && op.type == analysis::kFusedOpType) return elementwise_dtype_reason(g, op);
  if (const CudaKernel* k = cuda_kernel(op)) {
    std::string why = constraint_reason(g, op, k->accepts);
    return why.empty() && k->reason ? k->reason(g, op) : why;
  }
  const OpId id = id_in(g, op);
  if (id < g.ops.size() && analysis::elementwise_expr(g, id)) return {};
  return "no kernel";
}

ExecState* CudaKernels::state_of(const Op& op) const {
  for (const auto& s : states_)
    if (&op >= s->g.ops.data() && &op < s->g.ops.data() + s->g.ops.size()) return s.get();
  return nullptr;
}

bool CudaKernels::alias_safe(const Op& op) const {
  if (on_host_.count(&op)) return true;  // every input is copied down before any output is written
  const ExecState* s = state_of(op);
  // Generated kernels read element i first; a 16-bit one may share bytes only with an operand of its element size.
  if (s && half_elementwise_expr(s->g, op)) {
    const std::uint64_t out = analysis::dtype_bits(s->g.tensors[op.outputs[0]].dtype);
    for (analysis::TensorId t : op.inputs)
      if (t != kNoTensor && analysis::dtype_bits(s->g.tensors[t].dtype) != out) return false;
    return true;
  }
  if (const CudaKernel* k = cuda_kernel(op)) return k->alias_safe;
  return s && analysis::elementwise_expr(s->g, s->id_of(op)).has_value();  // generated kernels read element i first
}

void CudaKernels::prepare(const analysis::Graph& g) {
  ExecState* s = nullptr;
  for (const auto& p : states_)
    if (&p->g == &g) s = p.get();
  if (!s) {
    states_.push_back(std::make_unique<ExecState>(ExecState{g, ctx_, fused_, {}, {}, {}, {}}));
    s = states_.back().get();
  }
  s->ptr.assign(g.tensors.size(), nullptr);
  s->scratch.assign(g.ops.size(), nullptr);
  s->scratch_bytes.assign(g.ops.size(), 0);
  s->prepared.assign(g.ops.size(), nullptr);
  for (const Op& op : g.ops) {
    std::string why;
    if (falls_back(g, op, &why)) fall_back(op, why);
  }
  if (host_) host_->prepare(g);
  if (!side_workspace_) return;
  std::uint64_t ws = 0;
  for (OpId o = 0; o < g.ops.size(); ++o) ws = std::max(ws, op_workspace_bytes(*s, o));
  if (ws > workspace_.size()) workspace_ = Buffer(ws, Buffer::Kind::device, "cuDNN workspace");
}

std::uint64_t CudaKernels::preferred_workspace(const analysis::Graph& g, OpId id) {
  ExecState s{g, ctx_, fused_, {}, {}, {}, {}};  // shapes and the device only: no tensor is bound
  return op_workspace_bytes(s, id);
}

void CudaKernels::run(const OpCall& call) {
  ExecState* s = state_of(call.op);
  if (!s) fail(ErrorKind::runtime, "op '" + call.op.name + "' of a graph the CUDA kernels were not prepared for");
  const Op& op = call.op;
  for (std::size_t k = 0; k < op.inputs.size() && k < call.in.size(); ++k)
    if (op.inputs[k] != kNoTensor) s->ptr[op.inputs[k]] = call.in[k].data;
  for (std::size_t k = 0; k < op.outputs.size() && k < call.out.size(); ++k)
    if (op.outputs[k] != kNoTensor) s->ptr[op.outputs[k]] = call.out[k].data;
  const OpId id = call.id;
  s->scratch[id] = side_workspace_ ? workspace_.data() : call.scratch;
  s->scratch_bytes[id] = side_workspace_ ? workspace_.size() : call.scratch_bytes;
  if (on_host_.count(&op)) return run_on_host(call);
  try {
    run_op(*s, id);
  } catch (const Error& e) {
    // A kernel that refuses the op only once it sees it (an attribute value, a constant's dtype) refuses before it
    // queues work: the op runs on the host from now on, where the CPU kernels take it.
    if (e.kind() != ErrorKind::unsupported || !host_ || !host_->unsupported_reason(s->g, op).empty()) throw;
    fall_back(op, e.what());
    run_on_host(call);
  }
}

// Inputs and outputs downloaded (an output's bytes too: a kernel may read what it accumulates into), the CPU kernel
// run on the copies, the outputs uploaded; the compute stream drains first, so every producer has finished.
void CudaKernels::run_on_host(const OpCall& call) {
  const cudaStream_t stream = ctx_.stream();
  check(cudaStreamSynchronize(stream), "host fallback: drain the compute stream");
  std::vector<HostCopy> copies;
  const std::vector<TensorRef> in = download(call.in, copies, stream), out = download(call.out, copies, stream);
  HostCopy scratch(call.scratch_bytes);
  host_->run(OpCall{call.op, call.id, in, out, scratch.p, call.scratch_bytes});
  for (std::size_t k = 0; k < out.size(); ++k)
    if (out[k].data && out[k].bytes)
      check(cudaMemcpyAsync(call.out[k].data, out[k].data, out[k].bytes, cudaMemcpyDefault, stream), "host fallback: upload");
  check(cudaStreamSynchronize(stream), "host fallback: upload");  // the host copies go with this scope
}

}  // namespace memplan::runtime::cuda
