// The CUDA executor's Range (float32, float64, int32, int64), Trilu (any dtype) and IsInf (float32, float64); kernels
// in kernels_misc.cu.
#include "runtime_allocator/cuda/cuda_state.hpp"
#include "runtime_allocator/cuda/kernels_misc.hpp"

namespace memplan::runtime::cuda {

using analysis::DType;
using analysis::kNoTensor;
using analysis::Op;
using analysis::TensorId;

void run_range(ExecState& s, const Op& op) {
  const TensorId y = op.outputs.at(0);
  const DType d = s.tensor(y).dtype;
  for (std::size_t i = 0; i < 3; ++i)
    if (op.input(i) == kNoTensor || s.tensor(op.input(i)).element_count() != 1 || s.tensor(op.input(i)).dtype != d)
      unsupported(op, "start, limit and delta must be scalars of the output's dtype");
  RangeDType dt{};
  switch (d) {
    case DType::f32:
      dt = RangeDType::f32;
      break;
    case DType::f64:
      dt = RangeDType::f64;
      break;
    case DType::i32:
      dt = RangeDType::i32;
      break;
    case DType::i64:
      dt = RangeDType::i64;
      break;
    default:
      unsupported(op, std::string("dtype ") + analysis::dtype_name(d));
  }
  range(dt, s.ptr[op.inputs[0]], s.ptr[op.inputs[2]], s.ptr[y], static_cast<std::int64_t>(s.tensor(y).element_count()),
        s.ctx.stream());
}

void run_trilu(ExecState& s, const Op& op) {
  const TensorId x = op.inputs.at(0), y = op.outputs.at(0);
  const auto d = s.dims(x);
  if (d.size() < 2) unsupported(op, "input of rank below 2");
  std::int64_t k = 0;
  if (op.input(1) != kNoTensor) {
    const auto& kt = s.tensor(op.input(1));
    if (!kt.data) unsupported(op, "k must be a constant");
    k = kt.data->as_int64().at(0);
  }
  trilu(s.ptr[x], s.ptr[y], static_cast<std::int64_t>(s.tensor(x).element_count()), d[d.size() - 2], d.back(), k,
        op.attr_int("upper", 1) != 0, elem_bytes(s, x), s.ctx.stream());
}

void run_is_inf(ExecState& s, const Op& op) {
  const TensorId x = op.inputs.at(0), y = op.outputs.at(0);
  const DType d = s.tensor(x).dtype;
  if (d != DType::f32 && d != DType::f64)
    unsupported(op, std::string("dtype ") + analysis::dtype_name(d) + " (float32, float64)");
  is_inf(s.ptr[x], d == DType::f64, reinterpret_cast<bool*>(s.ptr[y]), static_cast<std::int64_t>(s.tensor(x).element_count()),
         op.attr_int("detect_positive", 1) != 0, op.attr_int("detect_negative", 1) != 0, s.ctx.stream());
}

}  // namespace memplan::runtime::cuda
