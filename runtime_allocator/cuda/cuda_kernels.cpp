// The CUDA KernelSet: support and aliasing read from the kernel table (cuda_ops.cpp) or the fused
// elementwise path, and the per-graph state the kernels run with, pointed at each OpCall's tensors.
#include "runtime_allocator/cuda/cuda_kernels.hpp"

#include <algorithm>

#include "analysis/fused_expr.hpp"

namespace memplan::runtime::cuda {

using analysis::kNoTensor;
using analysis::Op;
using analysis::OpId;

namespace {

OpId id_in(const analysis::Graph& g, const Op& op) { return static_cast<OpId>(&op - g.ops.data()); }

}  // namespace

std::string CudaKernels::unsupported_reason(const analysis::Graph& g, const Op& op) const { return cuda_unsupported_reason(g, op); }

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
  run_op(*s, id);
}

}  // namespace memplan::runtime::cuda
