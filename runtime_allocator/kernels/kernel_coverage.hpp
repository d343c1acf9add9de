// What a backend runs beyond its kernel table, known without a device: CUDA runs every op whose fused expression
// analysis writes (analysis/fused_expr_types.hpp) as a generated elementwise kernel over float32, bf16 and f16
// tensors. Read by `memplan ops` so that its CUDA column means "the backend implements this op type".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "analysis/graph.hpp"
#include "analysis/ops.hpp"

namespace memplan::runtime {

// The op types `backend` runs through generated kernels: "cuda" when built (its kernel table aside); empty otherwise.
std::vector<analysis::OpTypeId> generated_kernels(std::string_view backend);
// Empty when `backend`'s generated kernels run `op` as typed in g (every tensor of known dtype float32, bf16 or f16;
// Clip's bounds constants); else why not. A tensor whose dtype g does not know is not checked.
std::string generated_kernel_reason(std::string_view backend, const analysis::Graph& g, const analysis::Op& op);

}  // namespace memplan::runtime
