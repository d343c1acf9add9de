// memplan RMSNormalization and RMSNormGrad, InstanceNormalization, GroupNormalization and GroupNormGrad on the CUDA
// backend: shapes read here, kernels in kernels_norms.cu and kernels_group_norm.cu.
#include <algorithm>
#include <string>

#include "analysis/ops.hpp"
#include "runtime_allocator/cuda/cuda_state.hpp"
#include "runtime_allocator/cuda/kernels_norms.hpp"
#include "runtime_allocator/kernels/norm_groups.hpp"

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

const float* f32_operand(ExecState& s, const Op& op, std::size_t i) {
  const TensorId t = op.input(i);
  if (t == kNoTensor || s.tensor(t).dtype != analysis::DType::f32)
    fail(ErrorKind::unsupported, "op '" + op.name + "': input " + std::to_string(i) + " must be float32");
  return s.f32(t);
}

float* f32_result(ExecState& s, const Op& op, std::size_t i) {
  const TensorId t = op.output(i);
  if (t == kNoTensor || !s.ptr[t]) return nullptr;
  if (s.tensor(t).dtype != analysis::DType::f32)
    fail(ErrorKind::unsupported, "op '" + op.name + "': output " + std::to_string(i) + " must be float32");
  return s.f32(t);
}

// The rows of x (input `x_slot`) for its scale (input `scale_slot`): runtime_allocator/kernels/norm_groups.hpp.
GroupNormShape group_shape(ExecState& s, const Op& op, std::size_t x_slot, std::size_t scale_slot) {
  const NormGroups g = norm_groups(op, s.dims(op.inputs.at(x_slot)),
                                   static_cast<std::int64_t>(s.tensor(op.inputs.at(scale_slot)).element_count()));
  return {g.samples, g.channels, g.groups, g.plane, g.scale_per_group};
}

void run_group_norm(ExecState& s, const Op& op) {
  GroupNormArgs a;
  a.shape = group_shape(s, op, 0, 1);
  a.storage = float_storage(op, s.tensor(op.inputs[0]).dtype);
  a.x = s.ptr[op.inputs[0]];
  a.scale = f32_operand(s, op, 1);
  a.bias = f32_operand(s, op, 2);
  a.y = s.ptr[op.outputs.at(0)];
  a.mean = f32_result(s, op, 1);
  a.invstd = f32_result(s, op, 2);
  a.epsilon = static_cast<float>(op.attr_float("epsilon", 1e-5));
  group_norm(a, s.ctx.stream());
}

void run_group_norm_grad(ExecState& s, const Op& op) {
  GroupNormGradArgs a;
  a.shape = group_shape(s, op, 1, 2);
  a.storage = float_storage(op, s.tensor(op.inputs[1]).dtype);
  a.dy = s.ptr[op.inputs.at(0)];
  a.x = s.ptr[op.inputs[1]];
  a.scale = f32_operand(s, op, 2);
  a.mean = f32_operand(s, op, 3);
  a.invstd = f32_operand(s, op, 4);
  a.dx = op.output(0) == kNoTensor ? nullptr : s.ptr[op.outputs[0]];
  a.dscale = f32_result(s, op, 1);
  a.dbias = f32_result(s, op, 2);
  const auto n = static_cast<std::size_t>(2 * a.shape.samples * a.shape.channels);
  group_norm_grad(a, static_cast<float*>(s.ctx.scratch(std::max<std::size_t>(n, 1) * sizeof(float))), s.ctx.stream());
}

}  // namespace

bool run_norm_op(ExecState& s, const Op& op) {
  const bool onnx = op.domain.empty() || op.domain == "ai.onnx";
  if (onnx && (op.type == "InstanceNormalization" || op.type == "GroupNormalization")) return run_group_norm(s, op), true;
  if (op.domain != analysis::kMemplanDomain) return false;
  if (op.type == "GroupNormGrad") return run_group_norm_grad(s, op), true;
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
