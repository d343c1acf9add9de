// Kernel tables against the op registry: keys resolved to analysis::OpTypeId, constraints checked per op.
#include <string>

#include "analysis/error.hpp"
#include "runtime_allocator/backend.hpp"
#include "runtime_allocator/kernels/cpu_kernels.hpp"

namespace memplan::runtime {

#ifdef MEMPLAN_HAVE_CUDA
namespace cuda {
std::vector<analysis::OpTypeId> registered_cuda_kernels();  // cuda_ops.cpp (declared in cuda_state.hpp)
}
#endif

std::vector<analysis::OpTypeId> registered_kernels(std::string_view backend) {
  if (backend == "cpu") return cpu::registered_cpu_kernels();
#ifdef MEMPLAN_HAVE_CUDA
  if (backend == "cuda") return cuda::registered_cuda_kernels();
#endif
  return {};
}

std::optional<KernelConstraints> kernel_constraints(std::string_view backend, analysis::OpTypeId id) {
  if (backend == "cpu") return cpu::cpu_kernel_constraints(id);
  return std::nullopt;
}

analysis::OpTypeId kernel_op_id(std::string_view key) {
  constexpr std::string_view kPrefix = "memplan::";
  const bool own = key.substr(0, kPrefix.size()) == kPrefix;
  const analysis::OpInfo* info =
      own ? analysis::op_registry().find(analysis::kMemplanDomain, key.substr(kPrefix.size())) : analysis::op_registry().find("", key);
  if (!info) fail(ErrorKind::unsupported, "kernel table: op '" + std::string(key) + "' is not in the op registry");
  return info->id;
}

std::string constraint_reason(const analysis::Graph& g, const analysis::Op& op, const KernelConstraints& c) {
  if (!op.inputs.empty() && op.inputs[0] != analysis::kNoTensor) {
    const analysis::DType d = g.tensors[op.inputs[0]].dtype;
    if (d != analysis::DType::undefined && !(c.dtypes & dtype_bit(d)))
      return std::string("dtype ") + analysis::dtype_name(d) + " of input 0";
  }
  if (c.max_rank == kAnyRank) return {};
  auto rank_reason = [&](const std::vector<analysis::TensorId>& ts, const char* what) -> std::string {
    for (std::size_t i = 0; i < ts.size(); ++i) {
      if (ts[i] == analysis::kNoTensor) continue;
      const std::size_t r = g.tensors[ts[i]].dims.size();
      if (r > c.max_rank)
        return "rank " + std::to_string(r) + " above " + std::to_string(c.max_rank) + " (" + what + " " + std::to_string(i) + ")";
    }
    return {};
  };
  std::string r = rank_reason(op.inputs, "input");
  return r.empty() ? rank_reason(op.outputs, "output") : r;
}

}  // namespace memplan::runtime
