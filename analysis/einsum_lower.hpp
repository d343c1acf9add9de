// Einsum lowered at import to ops with kernels and backward rules everywhere: Transpose, Reshape, Unsqueeze,
// Squeeze, ReduceSum and one MatMul (several contracted letters merged into one axis by a Reshape, as torch.einsum's
// bmm reads them), so that no stage needs an Einsum of its own.
#pragma once

#include <cstdint>

#include "analysis/graph.hpp"

namespace memplan::analysis {

// Appends the ops computing Einsum `op` (its inputs and outputs already tensors of g) and returns true; returns false,
// g untouched, for what the lowering does not cover: an ellipsis, a letter repeated in one operand (a diagonal),
// more than two operands. `opset` picks the axes attribute (12) or input (13 on) of Unsqueeze, Squeeze and ReduceSum.
bool lower_einsum(Graph& g, const Op& op, std::int64_t opset);

}  // namespace memplan::analysis
