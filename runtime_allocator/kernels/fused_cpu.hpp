// CPU evaluation of memplan::FusedElementwise ops (the expression built by planner/fusion).
#pragma once

#include <vector>

#include "analysis/fused_expr.hpp"
#include "runtime_allocator/backend.hpp"

namespace memplan::runtime {

// out[0][i] = expr(in[0][..], in[1][..], ...) with numpy broadcasting of float32 operands; an output may
// share bytes with a same-shaped input (each element is read before it is written).
void run_fused_cpu(const analysis::Op& op, const std::vector<TensorRef>& in, const std::vector<TensorRef>& out);
// The same for an expression given beside the op (an activation's, analysis::build_activation).
void run_expression_cpu(const analysis::Op& op, const analysis::FusedExpr& e, const std::vector<TensorRef>& in,
                        const std::vector<TensorRef>& out);

}  // namespace memplan::runtime
