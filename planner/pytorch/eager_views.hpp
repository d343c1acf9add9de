// Tensors an ONNX export materializes that PyTorch eager never allocates, for the eager prediction (eager_model.hpp).
#pragma once

#include <cstdint>
#include <vector>

#include "analysis/graph.hpp"
#include "planner/plan.hpp"

namespace memplan::planner {

// Steps [first, last] over which plan buffer `buffer` holds only tensors PyTorch eager has no storage for.
struct UnallocatedSpan {
  std::uint32_t buffer = 0, first = 0, last = 0;
};

// The spans of the plan's buffers that hold tensors PyTorch eager has no storage for, from the buffer's first step to
// the step before a tensor of PyTorch's own takes its bytes (an in-place result the plan writes over them):
// - index grids of slice assignment: torch.onnx exports `x[:, :, a:, b:] = v` (setitem with slices) as ScatterND over
//   an int64 tensor of every written position, [..., rank] (Range, Expand, Unsqueeze, Concat over shapes and
//   constants), and ScatterND's backward reads it again; PyTorch copies v into a strided view of x (CopySlices) and
//   holds no index tensor. A grid is an integer tensor computed from constants alone that only ScatterND or GatherND
//   read, as their indices, or that only feeds such grids. An index tensor computed from activations (a data-dependent
//   gather) is PyTorch's too and stays.
// - expanded views: `y.expand_as(x)` exports as Expand, whose output the plan materializes (and saves, when a Mul
//   reads it); PyTorch's expand is a view of y's storage, and its elementwise ops read it through strides, their
//   backward included (the gradient's sum over the broadcast dims is a tensor of its own in both). An Expand whose
//   output, or a view of it, an op other than an elementwise one reads (a Reshape of repeated heads, a MatMul, a
//   Concat) is PyTorch's copy too and stays.
// - promoted reads: under torch.autocast an op on no autocast list (add, mul, div, where: the promote policy) reads a
//   bf16/fp16 operand beside a float32 one through TensorIterator's type promotion, with no copy, and its backward
//   saves that operand as it is; the plan gives the op an autocast Cast to float32 (Op::lowered_from "autocast"),
//   saved in its place. The Cast's output is left out where only such elementwise ops read it, and its 16-bit source
//   held instead (pytorch_promoted_sources). The fp32 list's casts (norms, softmax, exp) are autocast's copies, kept.
std::vector<UnallocatedSpan> pytorch_unallocated_spans(const analysis::Graph& g, const Plan& plan);

// A 16-bit tensor PyTorch eager holds to step `until`, where the plan reads a float32 autocast Cast of it instead
// (the promoted reads above): to the last step a reader of such a Cast runs.
struct HeldSource {
  analysis::TensorId tensor = analysis::kNoTensor;
  std::uint32_t until = 0;
};
std::vector<HeldSource> pytorch_promoted_sources(const analysis::Graph& g, const Plan& plan);

}  // namespace memplan::planner
