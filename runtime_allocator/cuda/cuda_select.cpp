// The CUDA executor's ArgMax, ArgMin and TopK over float32, float64, int32 and int64 (kernels in kernels_select.cu), and
// Size (the element count written from the host).
#include "runtime_allocator/cuda/cuda_state.hpp"
#include "runtime_allocator/cuda/kernels_select.hpp"

namespace memplan::runtime::cuda {

using analysis::DType;
using analysis::kNoTensor;
using analysis::Op;
using analysis::TensorId;

namespace {

SelectDType select_dtype(const ExecState& s, const Op& op) {
  switch (s.tensor(op.inputs.at(0)).dtype) {
    case DType::f32:
      return SelectDType::f32;
    case DType::f64:
      return SelectDType::f64;
    case DType::i32:
      return SelectDType::i32;
    case DType::i64:
      return SelectDType::i64;
    default:
      unsupported(
          op, std::string("dtype ") + analysis::dtype_name(s.tensor(op.inputs[0]).dtype) + " (float32, float64, int32, int64)");
  }
}

}  // namespace

void run_arg_max(ExecState& s, const Op& op) {
  const auto d = s.dims(op.inputs.at(0));
  const std::size_t axis = norm_axis(op.attr_int("axis", 0), d.size(), op);
  if (d.empty() || d[axis] == 0) unsupported(op, "an empty axis");
  arg_select(select_dtype(s, op), s.ptr[op.inputs[0]], reinterpret_cast<std::int64_t*>(s.ptr[op.outputs.at(0)]),
             dims_product(d, 0, axis), d[axis], dims_product(d, axis + 1), op.type == "ArgMax",
             op.attr_int("select_last_index", 0) != 0, s.ctx.stream());
}

void run_top_k(ExecState& s, const Op& op) {
  const auto d = s.dims(op.inputs.at(0));
  const std::size_t axis = norm_axis(op.attr_int("axis", -1), d.size(), op);
  const TensorId values = op.output(0), indices = op.output(1);
  const TensorId shaped = values != kNoTensor ? values : indices;
  const std::int64_t k = s.dims(shaped).at(axis);  // the outputs' extent along the axis
  top_k(select_dtype(s, op), s.ptr[op.inputs[0]], values == kNoTensor ? nullptr : s.ptr[values],
        indices == kNoTensor ? nullptr : reinterpret_cast<std::int64_t*>(s.ptr[indices]), dims_product(d, 0, axis), d[axis],
        dims_product(d, axis + 1), k, op.attr_int("largest", 1) != 0, s.ctx.stream());
}

void run_size(ExecState& s, const Op& op) {
  const TensorId out = op.outputs.at(0);
  if (s.tensor(out).dtype != DType::i64 || s.tensor(out).element_count() != 1) unsupported(op, "an int64 scalar output expected");
  const auto n = static_cast<std::int64_t>(s.tensor(op.inputs.at(0)).element_count());
  // From pageable memory: the call returns once `n` is staged.
  check(cudaMemcpyAsync(s.ptr[out], &n, sizeof n, cudaMemcpyHostToDevice, s.ctx.stream()), "Size '" + op.name + "'");
}

}  // namespace memplan::runtime::cuda
