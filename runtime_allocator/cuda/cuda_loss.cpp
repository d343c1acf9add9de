// The CUDA executor's losses (domain memplan): cross-entropy over a class axis and the sum loss, with their
// gradients (runtime_allocator/cuda/kernels_loss.cu). Semantics follow runtime_allocator/kernels/kernels_loss.cpp.
#include <algorithm>

#include "runtime_allocator/cuda/cuda_context.hpp"
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

// LinearCrossEntropy (float32 X [N, K], W [K, V] or [V, K] with trans_b, labels, bias): per chunk of `chunk` rows
// the logits by cuBLAS into the op's scratch, the rows' loss and d loss / d logits in place (linear_ce_rows), then
// dX's rows = g W^T and dW += X^T g by cuBLAS and dbias += column sums; the mean's scale at the end. The scratch holds
// a chunk's logits and, after them, the per-row losses and labelled flags and the two running sums.
void run_linear_cross_entropy(ExecState& s, const Op& op) {
  const auto xd = s.dims(op.inputs[0]), wd = s.dims(op.inputs[1]);
  for (const TensorId t : {op.inputs[0], op.inputs[1], op.input(3)})
    if (t != kNoTensor && s.tensor(t).dtype != analysis::DType::f32) unsupported(op, "float32 X, W and bias only");
  const bool tb = op.attr_int("trans_b", 0) != 0;
  const std::int64_t n = xd.at(0), k = xd.at(1), v = wd.at(tb ? 0 : 1);
  const std::int64_t chunk = std::clamp<std::int64_t>(op.attr_int("chunk", n), 1, std::max<std::int64_t>(n, 1));
  const std::uint64_t need = static_cast<std::uint64_t>(chunk) * static_cast<std::uint64_t>(v) * 4 +
                             static_cast<std::uint64_t>(chunk) * 8 + 8;
  const analysis::OpId id = s.id_of(op);
  if (!s.scratch[id] || s.scratch_bytes[id] < need)
    unsupported(op, "its planned scratch holds " + std::to_string(s.scratch[id] ? s.scratch_bytes[id] : 0) + " bytes, " +
                        std::to_string(need) + " needed (a chunk's logits)");
  auto* logits = reinterpret_cast<float*>(s.scratch[id]);
  float* row_loss = logits + chunk * v;
  float* row_keep = row_loss + chunk;
  float* acc = row_keep + chunk;
  const float* x = s.f32(op.inputs[0]);
  const float* w = s.f32(op.inputs[1]);
  const float* bias = op.input(3) == kNoTensor ? nullptr : s.f32(op.input(3));
  float* dx = op.output(1) == kNoTensor ? nullptr : s.f32(op.output(1));
  float* dw = op.output(2) == kNoTensor ? nullptr : s.f32(op.output(2));
  float* db = op.output(3) == kNoTensor ? nullptr : s.f32(op.output(3));
  const cudaStream_t stream = s.ctx.stream();
  if (dw) check(cudaMemsetAsync(dw, 0, static_cast<std::size_t>(k * v) * 4, stream), "LinearCrossEntropy dW");
  if (db) check(cudaMemsetAsync(db, 0, static_cast<std::size_t>(v) * 4, stream), "LinearCrossEntropy dbias");
  check(cudaMemsetAsync(acc, 0, 8, stream), "LinearCrossEntropy sums");
  const auto f32 = analysis::DType::f32;
  for (std::int64_t r0 = 0; r0 < n; r0 += chunk) {
    const std::int64_t c = std::min(chunk, n - r0);
    const float* xc = x + r0 * k;
    // Column-major terms: logits^T [V, c] = W' [V, K] x^T [K, c], with W' = W read as [V, K] (W [K, V] row-major as is;
    // W [V, K] row-major transposed).
    blas_gemm(s, op, f32, BlasGemm{.ta = tb, .m = v, .n = c, .k = k, .lda = tb ? k : v, .ldb = k, .ldc = v}, w, xc, logits);
    linear_ce_rows(logits, bias, labels(s, op, 2) + r0, c, v, op.attr_int("ignore_index", -100), row_loss, row_keep, stream);
    linear_ce_accumulate(row_loss, row_keep, c, acc, stream);
    if (dx)  // dx^T [K, c] = W'' [K, V] g^T [V, c]
      blas_gemm(s, op, f32, BlasGemm{.ta = !tb, .m = k, .n = c, .k = v, .lda = tb ? k : v, .ldb = v, .ldc = k}, w, logits, dx + r0 * k);
    if (dw && !tb)  // dW^T [V, K] += g^T [V, c] x [c, K]
      blas_gemm(s, op, f32, BlasGemm{.tb = true, .m = v, .n = k, .k = c, .lda = v, .ldb = k, .ldc = v, .beta = 1.0f}, logits, xc, dw);
    if (dw && tb)  // dW^T [K, V] += x^T [K, c] g [c, V]
      blas_gemm(s, op, f32, BlasGemm{.tb = true, .m = k, .n = v, .k = c, .lda = k, .ldb = v, .ldc = k, .beta = 1.0f}, xc, logits, dw);
    if (db) linear_ce_bias_grad(logits, c, v, db, stream);
  }
  linear_ce_finish(acc, s.f32(op.outputs[0]), dx, n * k, dw, k * v, db, v, stream);
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
  } else if (t == "LinearCrossEntropy") {
    run_linear_cross_entropy(s, op);
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
