// The CUDA executor's Range (float32, float64, int32, int64), Trilu (any dtype), IsInf (float32, float64) and NonZero
// (any dtype); kernels in kernels_misc.cu.
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

// The count found is read back (a sync): data with another count than the plan's is refused, as on the CPU.
void run_non_zero(ExecState& s, const Op& op) {
  const TensorId x = op.inputs.at(0), y = op.outputs.at(0);
  const auto d = s.dims(x), out = s.dims(y);
  if (d.size() > 8) unsupported(op, "rank above 8");
  NonZeroShape sh;
  sh.rank = static_cast<int>(d.size());
  for (std::size_t k = 0; k < d.size(); ++k) sh.dims[k] = d[k];
  sh.elem_bytes = elem_bytes(s, x);
  sh.is_float = analysis::dtype_is_float(s.tensor(x).dtype);
  const std::int64_t planned = out.size() == 2 ? out[1] : 0;
  auto* count = static_cast<std::int64_t*>(s.ctx.scratch(sizeof(std::int64_t)));
  non_zero(sh, s.ptr[x], reinterpret_cast<std::int64_t*>(s.ptr[y]), planned, count, s.ctx.stream());
  std::int64_t found = 0;
  check(cudaMemcpyAsync(&found, count, sizeof found, cudaMemcpyDeviceToHost, s.ctx.stream()), "NonZero count");
  check(cudaStreamSynchronize(s.ctx.stream()), "NonZero count");
  if (found != planned)
    unsupported(op, "x has " + std::to_string(found) + " nonzero elements where the plan holds " + std::to_string(planned) +
                        " (NonZero's output size depends on the data)");
}

}  // namespace memplan::runtime::cuda
