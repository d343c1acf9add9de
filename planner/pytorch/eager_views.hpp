// Tensors an ONNX export materializes that PyTorch eager never allocates, for the eager prediction (eager_model.hpp).
#pragma once

#include <cstdint>
#include <vector>

#include "analysis/graph.hpp"
#include "planner/plan.hpp"

namespace memplan::planner {

// The plan's buffers (indices into plan.buffers) that hold only tensors PyTorch eager has no storage for:
// - index grids of slice assignment: torch.onnx exports `x[:, :, a:, b:] = v` (setitem with slices) as ScatterND over
//   an int64 tensor of every written position, [..., rank] (Range, Expand, Unsqueeze, Concat over shapes and
//   constants), and ScatterND's backward reads it again; PyTorch copies v into a strided view of x (CopySlices) and
//   holds no index tensor. A grid is an integer tensor computed from constants alone that only ScatterND or GatherND
//   read, as their indices, or that only feeds such grids. An index tensor computed from activations (a data-dependent
//   gather) is PyTorch's too and stays.
std::vector<std::uint32_t> buffers_pytorch_never_allocates(const analysis::Graph& g, const Plan& plan);

}  // namespace memplan::planner
