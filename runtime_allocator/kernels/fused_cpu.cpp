// CPU evaluation of memplan::FusedElementwise ops: FusedExpr::evaluate per element, broadcasting operands.
#include "runtime_allocator/kernels/fused_cpu.hpp"

#include "analysis/fused_expr.hpp"

namespace memplan::runtime {

void run_fused_cpu(const analysis::Op& op, const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) {
  run_expression_cpu(op, analysis::FusedExpr::parse(op.attr_string("expr", "")), in, out);
}

void run_expression_cpu(const analysis::Op& op, const analysis::FusedExpr& e, const std::vector<TensorRef>& in,
                        const std::vector<TensorRef>& out) {
  if (in.size() < e.num_inputs || out.empty() || !out[0].data)
    fail(ErrorKind::invalid_graph, "fused op '" + op.name + "' has " + std::to_string(in.size()) + " inputs for an expression of " +
                                       std::to_string(e.num_inputs));
  const auto& od = out[0].shape;
  const std::size_t rank = od.size();
  // Per operand: element stride along each output dim (0 where broadcast).
  std::vector<std::vector<std::int64_t>> strides(e.num_inputs, std::vector<std::int64_t>(rank, 0));
  for (std::uint32_t k = 0; k < e.num_inputs; ++k) {
    if (!in[k].data) continue;
    if (in[k].dtype != analysis::DType::f32) fail(ErrorKind::unsupported, "fused op '" + op.name + "': float32 operands only");
    const auto& d = in[k].shape;
    if (d.size() > rank) fail(ErrorKind::shape, "fused op '" + op.name + "': an operand outranks the output");
    std::int64_t s = 1;
    for (std::size_t b = 0; b < d.size(); ++b) {
      const std::size_t j = d.size() - 1 - b, o = rank - 1 - b;
      if (d[j] != 1 && d[j] != od[o]) fail(ErrorKind::shape, "fused op '" + op.name + "': operand does not broadcast");
      strides[k][o] = d[j] == 1 ? 0 : s;
      s *= d[j];
    }
  }
  const std::int64_t n = out[0].elements();
  std::vector<float> operands(e.num_inputs, 0.0f), scratch(e.nodes.size());
  std::vector<std::int64_t> idx(rank, 0);
  float* y = out[0].as<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::uint32_t k = 0; k < e.num_inputs; ++k) {
      if (!in[k].data) continue;
      std::int64_t off = 0;
      for (std::size_t d = 0; d < rank; ++d) off += idx[d] * strides[k][d];
      operands[k] = in[k].as<float>()[off];
    }
    y[i] = e.evaluate(operands.data(), scratch.data());
    for (std::size_t d = rank; d-- > 0;) {  // odometer over the output's multi-index
      if (++idx[d] < od[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace memplan::runtime
