// The CUDA executor's comparison, logic, integer arithmetic, Cast and Sin/Cos ops (cuda_compare.cpp), run
// from run_extra_op.
#pragma once

#include <vector>

#include "runtime_allocator/cuda/cuda_state.hpp"
#include "runtime_allocator/cuda/kernels_layers.hpp"

namespace memplan::runtime::cuda {

// Runs op when it is one of Equal, Greater, GreaterOrEqual, Less, LessOrEqual, And, Or, Xor, Not, Cast, Sin,
// Cos, or integer Add, Sub, Mul, Min, Max; false for any other op.
bool run_compare_op(ExecState& s, const analysis::Op& op);

// The operands' numpy broadcasting strides over the output dims `out` (at most 3 operands, rank 8);
// defined in cuda_training_layers.cpp.
BroadcastShape broadcast_shape(const ExecState& s, const analysis::Op& op, const std::vector<std::int64_t>& out,
                               const std::vector<analysis::TensorId>& operands);

}  // namespace memplan::runtime::cuda
