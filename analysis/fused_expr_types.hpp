// Which op types elementwise_expr (fused_expr.hpp) writes as a fused expression, known from the type alone.
#pragma once

#include <string_view>

#include "analysis/ops.hpp"

namespace memplan::analysis {

// True when elementwise_expr gives an expression for an op of this type whose tensors are float32 (and whose scalar
// parameters, Clip's bounds, are constants): the simple ops, the activations and variadic ops of
// fused_expr_activations.cpp, Gelu, memplan FusedElementwise.
bool elementwise_expr_covers(const OpInfo& info);

}  // namespace memplan::analysis
