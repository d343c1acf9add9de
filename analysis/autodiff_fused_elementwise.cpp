// Backward rule of memplan::FusedElementwise: per wanted input, one fused kernel that rebuilds the group's
// inside values from its inputs and applies the chain rule (analysis/fused_expr_grad.cpp). Only the
// group's external inputs are saved for backward, as torch.compile's fused kernels do.
#include "analysis/autodiff.hpp"
#include "analysis/fused_expr.hpp"

namespace memplan::analysis::autodiff {
namespace {

void fused_elementwise(GradContext& c) { expression_grads(c, FusedExpr::parse(c.fwd().attr_string("expr", ""))); }

}  // namespace

void expression_grads(GradContext& c, const FusedExpr& e) {
  const Op fwd = c.fwd();
  if (e.num_inputs > fwd.inputs.size())
    fail(ErrorKind::invalid_graph, c.where() + ": its expression reads " + std::to_string(e.num_inputs) + " operands of " +
                                       std::to_string(fwd.inputs.size()));
  const Shape full_shape = c.shape(c.out(0));
  for (std::size_t i = 0; i < e.num_inputs; ++i) {
    if (!c.wants(i)) continue;
    const FusedExpr gi = gradient_expr(e, static_cast<std::uint32_t>(i));
    if (gi.nodes.size() == 1 && gi.nodes[0].op == ElemOp::input) {  // dy itself (a bias, a residual): no kernel
      c.give_reduced(i, c.dy());
      continue;
    }
    // Operands: the ones the gradient reads (forward inputs, then dy), renumbered in that order.
    std::vector<std::uint32_t> renumber(gi.num_inputs, 0);
    std::vector<bool> read(gi.num_inputs, false);
    for (const ExprNode& n : gi.nodes)
      if (n.op == ElemOp::input) read[n.a] = true;
    std::vector<TensorId> operands;
    for (std::uint32_t k = 0; k < gi.num_inputs; ++k) {
      if (!read[k]) continue;
      renumber[k] = static_cast<std::uint32_t>(operands.size());
      operands.push_back(k < e.num_inputs ? fwd.inputs[k] : c.dy());
    }
    FusedExpr compact = gi;
    compact.num_inputs = static_cast<std::uint32_t>(operands.size());
    for (ExprNode& n : compact.nodes)
      if (n.op == ElemOp::input) n.a = renumber[n.a];
    const TensorId full = c.full_or_grad(i, full_shape);
    c.emit(std::string(kFusedOpType), std::string(kMemplanDomain), std::move(operands), {full},
           {{"expr", attr_s(compact.to_string())}});
    c.give_reduced(i, full);
  }
}

void add_fused_elementwise_grads(GradTable& t) { t[std::string(kFusedOpType)] = {fused_elementwise, kAll, 1u}; }

}  // namespace memplan::analysis::autodiff
