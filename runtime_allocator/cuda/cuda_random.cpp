// The CUDA executor's RandomNormal(Like), RandomUniform and Bernoulli: the CPU kernels' values bit for bit (one
// counter-based draw per element under the op's step key); kernels in kernels_random.cu and kernels_pad_random.cu.
#include "runtime_allocator/cuda/cuda_state.hpp"
#include "runtime_allocator/cuda/kernels_pad_random.hpp"
#include "runtime_allocator/cuda/kernels_random.hpp"
#include "runtime_allocator/kernels/random_uniform.hpp"

namespace memplan::runtime::cuda {

using analysis::DType;
using analysis::Op;
using analysis::TensorId;

namespace {

std::uint64_t op_key(const Op& op) {
  return step_key(static_cast<std::uint64_t>(op.attr_int("seed", static_cast<std::int64_t>(kDefaultRandomSeed))));
}

void require_float(const Op& op, DType d) {
  if (d != DType::f32 && d != DType::f64)
    unsupported(op, std::string("dtype ") + analysis::dtype_name(d) + " (float32 and float64 only)");
}

}  // namespace

void run_random_normal(ExecState& s, const Op& op) {
  const TensorId y = op.outputs.at(0);
  require_float(op, s.tensor(y).dtype);
  random_normal(s.ptr[y], s.tensor(y).dtype == DType::f64, static_cast<std::int64_t>(s.tensor(y).element_count()), op_key(op),
                op.attr_float("mean", 0.0), op.attr_float("scale", 1.0), s.ctx.stream());
}

void run_random_uniform(ExecState& s, const Op& op) {
  const TensorId y = op.outputs.at(0);
  require_float(op, s.tensor(y).dtype);
  const double low = op.attr_float("low", 0.0), high = op.attr_float("high", 1.0);
  const auto n = static_cast<std::int64_t>(s.tensor(y).element_count());
  if (s.tensor(y).dtype == DType::f32)
    random_uniform_f32(s.f32(y), n, op_key(op), static_cast<float>(low), static_cast<float>(high), s.ctx.stream());
  else
    random_uniform_f64(reinterpret_cast<double*>(s.ptr[y]), n, op_key(op), low, high, s.ctx.stream());
}

void run_bernoulli(ExecState& s, const Op& op) {
  const TensorId p = op.inputs.at(0), y = op.outputs.at(0);
  require_float(op, s.tensor(p).dtype);
  int code = 0;
  switch (s.tensor(y).dtype) {
    case DType::f32: code = 0; break;
    case DType::f64: code = 1; break;
    case DType::i32: code = 2; break;
    case DType::i64: code = 3; break;
    case DType::boolean:
    case DType::u8: code = 4; break;
    default: unsupported(op, std::string("output dtype ") + analysis::dtype_name(s.tensor(y).dtype));
  }
  bernoulli(s.ptr[p], s.tensor(p).dtype == DType::f64, s.ptr[y], code, static_cast<std::int64_t>(s.tensor(y).element_count()),
            op_key(op), s.ctx.stream());
}

}  // namespace memplan::runtime::cuda
