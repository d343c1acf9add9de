// CPU kernels of the ops written as fused expressions (analysis/fused_expr_activations.cpp): Softsign,
// ThresholdedRelu, Shrink, Sum, Mean, and Max/Min of three or more inputs, evaluated as the CUDA kernels are;
// and the two ops their backward rules emit beside them: Trilu (a triangle of the last two axes) and CastLike.
#include <cstring>
#include <vector>

#include "analysis/fused_expr.hpp"
#include "runtime_allocator/kernels/cpu_kernels.hpp"
#include "runtime_allocator/kernels/fused_cpu.hpp"

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

namespace {

// Trilu: elements (i, j) of each trailing matrix kept where j - i >= k (upper) or j - i <= k (lower), else 0.
void k_trilu(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  if (x.shape.size() < 2) unsupported(op, "input of rank below 2");
  const std::int64_t k = in.size() > 1 && in[1].data ? int_values(op, in[1]).at(0) : 0;
  const bool upper = op.attr_int("upper", 1) != 0;
  const std::int64_t rows = x.shape[x.shape.size() - 2], cols = x.shape.back();
  const auto es = static_cast<std::int64_t>(analysis::dtype_bits(x.dtype) / 8);
  const std::int64_t n = x.elements();
  for (std::int64_t e = 0; e < n; ++e) {
    const std::int64_t j = e % cols, i = (e / cols) % rows;
    const bool keep = upper ? j - i >= k : j - i <= k;
    std::byte* dst = out[0].data + e * es;
    if (keep) std::memmove(dst, x.data + e * es, static_cast<std::size_t>(es));
    else std::memset(dst, 0, static_cast<std::size_t>(es));
  }
}

}  // namespace

void add_activation_kernels(KernelTable& t) {
  t["Trilu"] = {k_trilu, true, {kAnyDType}};
  t["CastLike"] = t["Cast"];  // the same conversion, the target dtype read from input 1 by shape inference
  // Sum and Mean of any dtype: kernels_onnx_legacy.cpp.
  for (const char* name : {"Softsign", "ThresholdedRelu", "Shrink", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh"})
    t[name] = {run_activation_expression, true, {kF32}};
}

}  // namespace memplan::runtime::cpu
