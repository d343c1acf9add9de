// CPU kernels of the ops written as fused expressions (analysis/fused_expr_activations.cpp): Softsign,
// ThresholdedRelu, Shrink, Sum, Mean, and Max/Min of three or more inputs, evaluated as the CUDA kernels are.
#include <vector>

#include "analysis/fused_expr.hpp"
#include "runtime_allocator/cpu_kernels.hpp"
#include "runtime_allocator/fused_cpu.hpp"

namespace memplan::runtime::cpu {

void run_activation_expression(const Op& op, const Refs& in, const Refs& out) {
  analysis::FusedExpr e;
  e.num_inputs = static_cast<std::uint32_t>(in.size());
  std::vector<std::uint32_t> xs;
  for (std::uint32_t k = 0; k < e.num_inputs; ++k) {
    required(op, in, k);
    xs.push_back(e.add({analysis::ElemOp::input, k, 0, 0.0, 0.0}));
  }
  if (xs.empty()) unsupported(op, "no inputs");
  analysis::build_activation(e, op, xs);
  run_expression_cpu(op, e, in, out);
}

void add_activation_kernels(KernelTable& t) {
  for (const char* name : {"Softsign", "ThresholdedRelu", "Shrink", "Sum", "Mean"})
    t[name] = {run_activation_expression, true, {kF32}};
}

}  // namespace memplan::runtime::cpu
