// The CUDA executor's losses (domain memplan): cross-entropy over a class axis and the sum loss, with their
// gradients (runtime_allocator/cuda/kernels_loss.cu). Semantics follow runtime_allocator/kernels/kernels_loss.cpp.
#include "runtime_allocator/cuda/cuda_state.hpp"
#include "runtime_allocator/cuda/kernels_loss.hpp"

namespace memplan::runtime::cuda {

using analysis::kNoTensor;
using analysis::Op;
using analysis::TensorId;

namespace {

LogitsType logits_type(const ExecState& s, const Op& op) {
  switch (s.tensor(op.inputs[0]).dtype) {
    case analysis::DType::f32: return LogitsType::f32;
    case analysis::DType::bf16: return LogitsType::bf16;
    case analysis::DType::f16: return LogitsType::f16;
    default: fail(ErrorKind::unsupported, "op '" + op.name + "' (" + op.type + "): logits must be float32, bfloat16 or float16");
  }
}

const std::int64_t* labels(const ExecState& s, const Op& op, std::size_t i) {
  if (s.tensor(op.inputs.at(i)).dtype != analysis::DType::i64)
    fail(ErrorKind::unsupported, "op '" + op.name + "' (" + op.type + "): int64 labels only");
  return reinterpret_cast<const std::int64_t*>(s.ptr[op.inputs[i]]);
}

ClassRows rows(const ExecState& s, const Op& op) {
  const auto dims = s.dims(op.inputs[0]);
  return class_rows(dims, static_cast<std::int64_t>(norm_axis(op.attr_int("axis", 1), dims.size(), op)));
}

}  // namespace

bool run_loss_op(ExecState& s, const Op& op) {
  if (op.domain != "memplan") return false;
  const std::string& t = op.type;
  const std::int64_t ignore = op.attr_int("ignore_index", -100);
  if (t == "CrossEntropyLoss") {
    float* lse = op.output(1) == kNoTensor ? nullptr : s.f32(op.output(1));
    if (!lse) fail(ErrorKind::unsupported, "op '" + op.name + "': CrossEntropyLoss needs its logsumexp output on CUDA");
    cross_entropy(s.ptr[op.inputs[0]], logits_type(s, op), labels(s, op, 1), s.f32(op.outputs[0]), lse, rows(s, op), ignore,
                  s.ctx.stream());
  } else if (t == "CrossEntropyLossGrad") {
    const TensorId dloss = op.input(3);
    cross_entropy_grad(s.ptr[op.inputs[0]], logits_type(s, op), s.f32(op.inputs.at(1)), labels(s, op, 2),
                       dloss == kNoTensor ? nullptr : s.f32(dloss), s.ptr[op.outputs[0]], rows(s, op), ignore, s.ctx.stream());
  } else if (t == "SumLoss") {
    sum_loss(s.f32(op.inputs[0]), s.f32(op.outputs[0]), static_cast<std::int64_t>(s.tensor(op.inputs[0]).element_count()),
             s.ctx.stream());
  } else if (t == "SumLossGrad") {
    const TensorId dloss = op.input(0);
    if (s.tensor(op.outputs[0]).dtype != analysis::DType::f32)
      fail(ErrorKind::unsupported, "op '" + op.name + "': SumLossGrad writes float32 only on CUDA");
    fill_loss_grad(dloss == kNoTensor ? nullptr : s.f32(dloss), s.f32(op.outputs[0]),
                   static_cast<std::int64_t>(s.tensor(op.outputs[0]).element_count()), s.ctx.stream());
  } else {
    return false;
  }
  return true;
}

}  // namespace memplan::runtime::cuda
