// memplan RMSNormalization and RMSNormGrad on the CUDA backend: shapes read here, kernels in kernels_norms.cu.
#include <string>

#include "analysis/ops.hpp"
#include "runtime_allocator/cuda/cuda_state.hpp"
#include "runtime_allocator/cuda/kernels_norms.hpp"

namespace memplan::runtime::cuda {

namespace {

using analysis::kNoTensor;
using analysis::Op;
using analysis::TensorId;

float* optional_f32(ExecState& s, TensorId t) { return t == kNoTensor ? nullptr : s.f32(t); }

struct RowGeometry {
  std::int64_t rows = 0, n = 0;
};

// X as [rows, n] with n the normalized dims (from `axis` on); the scale, when present, covers them.
RowGeometry row_geometry(ExecState& s, const Op& op, TensorId x, TensorId scale) {
  const auto d = s.dims(x);
  const std::size_t axis = norm_axis(op.attr_int("axis", -1), d.size(), op);
  const RowGeometry r{dims_product(d, 0, axis), dims_product(d, axis)};
  if (scale != kNoTensor && static_cast<std::int64_t>(s.tensor(scale).element_count()) != r.n)
    fail(ErrorKind::unsupported, "op '" + op.name + "': the scale must cover the normalized dims");
  return r;
}

}  // namespace

bool run_norm_op(ExecState& s, const Op& op) {
  if (op.domain != analysis::kMemplanDomain) return false;
  if (op.type == analysis::memplan_ops::kRMSNormalization) {
    const auto r = row_geometry(s, op, op.inputs[0], op.input(1));
    rms_norm(s.f32(op.inputs[0]), optional_f32(s, op.input(1)), s.f32(op.outputs[0]), optional_f32(s, op.output(1)), r.rows, r.n,
             static_cast<float>(op.attr_float("epsilon", 1e-6)), s.ctx.stream());
    return true;
  }
  if (op.type == analysis::memplan_ops::kRMSNormGrad) {
    const auto r = row_geometry(s, op, op.inputs[1], op.input(2));
    rms_norm_grad(s.f32(op.inputs[0]), s.f32(op.inputs[1]), optional_f32(s, op.input(2)), s.f32(op.inputs.at(3)),
                  optional_f32(s, op.output(0)), optional_f32(s, op.output(1)), r.rows, r.n, s.ctx.stream());
    return true;
  }
  return false;
}

}  // namespace memplan::runtime::cuda
