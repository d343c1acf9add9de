// The generated-kernel coverage of the backends (see kernel_coverage.hpp).
#include "runtime_allocator/kernels/kernel_coverage.hpp"

#include "analysis/fused_expr_types.hpp"

namespace memplan::runtime {

std::vector<analysis::OpTypeId> generated_kernels(std::string_view backend) {
  std::vector<analysis::OpTypeId> ids;
#ifdef MEMPLAN_HAVE_CUDA
  if (backend == "cuda")
    for (const auto& info : analysis::op_registry().all())
      if (analysis::elementwise_expr_covers(info)) ids.push_back(info.id);
#else
  (void)backend;
#endif
  return ids;
}

std::string generated_kernel_reason(std::string_view backend, const analysis::Graph& g, const analysis::Op& op) {
  if (backend != "cuda") return "no generated kernels";
  for (const auto* list : {&op.inputs, &op.outputs})
    for (analysis::TensorId t : *list) {
      if (t == analysis::kNoTensor) continue;
      const analysis::DType d = g.tensors[t].dtype;
      if (d != analysis::DType::undefined && d != analysis::DType::f32 && d != analysis::DType::bf16 && d != analysis::DType::f16)
        return std::string("dtype ") + analysis::dtype_name(d) + " of tensor '" + g.tensors[t].name + "'";
    }
  if (op.type == "Clip")
    for (std::size_t i = 1; i < op.inputs.size() && i < 3; ++i)
      if (op.inputs[i] != analysis::kNoTensor && !g.tensors[op.inputs[i]].data) return "a bound computed at run time";
  return {};
}

}  // namespace memplan::runtime
