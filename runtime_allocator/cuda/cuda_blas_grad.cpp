// MatMulGradA / MatMulGradB and MatMulT on the GPU: cuBLAS products with transposes, in exact float32 (the context's
// math mode: no TF32 unless asked) or bf16/f16 with float32 accumulation (blas_gemm), summed over the batch axes along which an operand was broadcast (as the CPU
// kernels k_matmul_grad and k_matmul_t do).
#include <algorithm>

#include "runtime_allocator/cuda/cuda_state.hpp"
#include "runtime_allocator/kernels/matmul_plan.hpp"

namespace memplan::runtime::cuda {

using analysis::Op;
using analysis::TensorId;

namespace {

// Row-major C[m,n] = op(A) op(B) + beta C for `count` products spaced by the strides (0: shared). cuBLAS is
// column-major, so it computes C^T = op(B)^T op(A)^T. A, B and C of dtype dt (float32, bf16 or f16).
struct RowMajorGemm {
  bool ta = false, tb = false;
  std::int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0, count = 1;
  float beta = 0.0f;
  void run(ExecState& s, const Op& op, analysis::DType dt, const void* a, const void* b, void* c) const {
    blas_gemm(s, op, dt, BlasGemm{tb, ta, n, m, k, ldb, lda, ldc, stride_b, stride_a, stride_c, count, 1.0f, beta}, b, a, c);
  }
};

// Element strides of each batch axis of `dims` against the broadcast batch shape (0 where broadcast).
std::vector<std::int64_t> batch_strides(const std::vector<std::int64_t>& dims, const std::vector<std::int64_t>& batch,
                                        std::int64_t matrix) {
  std::vector<std::int64_t> st(batch.size(), 0);
  std::int64_t stride = matrix;
  for (std::size_t k = 0; k < dims.size(); ++k) {
    const std::size_t j = dims.size() - 1 - k, o = batch.size() - 1 - k;
    if (dims[j] != 1) st[o] = stride;
    stride *= dims[j];
  }
  return st;
}

}  // namespace

void run_matmul_grad(ExecState& s, const Op& op, bool grad_a) {
  auto as = s.dims(grad_a ? op.outputs[0] : op.inputs[0]);  // dA has A's shape, dB has B's
  auto bs = s.dims(grad_a ? op.inputs[1] : op.outputs[0]);
  const TensorId dy = op.inputs[grad_a ? 0 : 1], other = op.inputs[grad_a ? 1 : 0];
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  const std::int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  const std::vector<std::int64_t> ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  std::vector<std::int64_t> batch(std::max(ab.size(), bb.size()), 1);
  for (std::size_t k = 0; k < batch.size(); ++k) {
    const std::size_t back = batch.size() - 1 - k;
    const std::int64_t da = back < ab.size() ? ab[ab.size() - 1 - back] : 1, db = back < bb.size() ? bb[bb.size() - 1 - back] : 1;
    batch[k] = std::max(da, db);
  }
  const std::int64_t nb = dims_product(batch), na = dims_product(ab), nbb = dims_product(bb);
  // dA[M,K] = dY[M,N] B^T with B [K,N];  dB[K,N] = A^T dY with A [M,K].
  RowMajorGemm g;
  if (grad_a)
    g = {false, true, M, K, N, N, N, K};
  else
    g = {true, false, K, N, M, K, N, N};
  const analysis::DType dt = s.tensor(dy).dtype;
  const int eb = elem_bytes(s, dy);
  const void* pdy = s.ptr[dy];
  const void* po = s.ptr[other];
  void* out = s.ptr[op.outputs[0]];
  if (nbb == 1 && na == nb) {  // B shared by every batch: stack the batches into M
    if (grad_a)
      g.m = nb * M;
    else
      g.k = nb * M;
    return grad_a ? g.run(s, op, dt, pdy, po, out) : g.run(s, op, dt, po, pdy, out);
  }
  if (ab == bb) {  // one product per batch, nothing summed
    g.count = nb;
    if (grad_a) {
      g.stride_a = M * N, g.stride_b = K * N, g.stride_c = M * K;
      return g.run(s, op, dt, pdy, po, out);
    }
    g.stride_a = M * K, g.stride_b = M * N, g.stride_c = K * N;
    return g.run(s, op, dt, po, pdy, out);
  }
  // General broadcasting: accumulate each batch's product into the operand's block it came from.
  check(cudaMemsetAsync(out, 0, s.tensor(op.outputs[0]).bytes(), s.ctx.stream()), "zero of '" + op.name + "'");
  g.beta = 1.0f;
  const auto sa = batch_strides(ab, batch, M * K), sb = batch_strides(bb, batch, K * N);
  for (std::int64_t i = 0; i < nb; ++i) {
    std::int64_t r = i, oa = 0, ob = 0;
    for (std::size_t d = batch.size(); d-- > 0;) {
      const std::int64_t q = r % batch[d];
      r /= batch[d];
      oa += q * sa[d];
      ob += q * sb[d];
    }
    if (grad_a)
      g.run(s, op, dt, advance(pdy, i * M * N, eb), advance(po, ob, eb), advance(out, oa, eb));
    else
      g.run(s, op, dt, advance(po, oa, eb), advance(pdy, i * M * N, eb), advance(out, ob, eb));
  }
}

void run_matmul_t(ExecState& s, const Op& op) {
  const MatMulTPlan plan = plan_matmul_t(op.attr_int("trans_a", 0) != 0, op.attr_int("trans_b", 0) != 0, s.dims(op.inputs[0]),
                                         s.dims(op.inputs[1]), s.dims(op.outputs[0]), "op '" + op.name + "' (" + op.type + ")");
  const analysis::DType dt = s.tensor(op.inputs[0]).dtype;
  const int eb = elem_bytes(s, op.inputs[0]);
  const void* a = s.ptr[op.inputs[0]];
  const void* b = s.ptr[op.inputs[1]];
  void* y = s.ptr[op.outputs[0]];
  if (plan.accumulate) check(cudaMemsetAsync(y, 0, s.tensor(op.outputs[0]).bytes(), s.ctx.stream()), "zero of '" + op.name + "'");
  for (const GemmCall& c : plan.calls) {
    const RowMajorGemm g{c.ta, c.tb, c.m, c.n, c.k, c.lda, c.ldb, c.ldc, c.stride_a, c.stride_b, c.stride_c, c.count,
                         plan.accumulate ? 1.0f : 0.0f};
    g.run(s, op, dt, advance(a, c.offset_a, eb), advance(b, c.offset_b, eb), advance(y, c.offset_c, eb));
  }
}

}  // namespace memplan::runtime::cuda
