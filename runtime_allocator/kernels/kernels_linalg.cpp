// CPU matrix kernels: a blocked float32 GEMM (k summed in order, so results are deterministic), Gemm, MatMul, MatMulT.
#include <algorithm>
#include <vector>

#include "runtime_allocator/kernels/cpu_kernels.hpp"
#include "runtime_allocator/kernels/matmul_plan.hpp"

namespace memplan::runtime::cpu {

// B is packed row-major when it is strided so the inner loop runs over contiguous memory.
void gemm_acc(std::int64_t M, std::int64_t N, std::int64_t K, const float* a, std::int64_t a_row, std::int64_t a_col,
              const float* b, std::int64_t b_row, std::int64_t b_col, float* c) {
  std::vector<float> packed;
  if (b_col != 1) {
    packed.resize(static_cast<std::size_t>(K * N));
    for (std::int64_t k = 0; k < K; ++k)
      for (std::int64_t j = 0; j < N; ++j) packed[static_cast<std::size_t>(k * N + j)] = b[k * b_row + j * b_col];
    b = packed.data();
    b_row = N;
  }
  constexpr std::int64_t kBlockI = 64, kBlockJ = 256;
  for (std::int64_t i0 = 0; i0 < M; i0 += kBlockI)
    for (std::int64_t j0 = 0; j0 < N; j0 += kBlockJ) {
      const std::int64_t i1 = std::min(M, i0 + kBlockI), j1 = std::min(N, j0 + kBlockJ);
      for (std::int64_t i = i0; i < i1; ++i) {
        float* ci = c + i * N;
        for (std::int64_t k = 0; k < K; ++k) {
          const float aik = a[i * a_row + k * a_col];
          const float* bk = b + k * b_row;
          for (std::int64_t j = j0; j < j1; ++j) ci[j] += aik * bk[j];
        }
      }
    }
}

namespace {

void k_gemm(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& a = required(op, in, 0);
  const TensorRef& b = required(op, in, 1);
  if (a.dtype != DType::f32 || b.dtype != DType::f32 || a.shape.size() != 2 || b.shape.size() != 2)
    unsupported(op, "float32 matrices expected");
  const bool ta = op.attr_int("transA", 0) != 0, tb = op.attr_int("transB", 0) != 0;
  const float alpha = static_cast<float>(op.attr_float("alpha", 1.0)), beta = static_cast<float>(op.attr_float("beta", 1.0));
  const std::int64_t M = ta ? a.shape[1] : a.shape[0], K = ta ? a.shape[0] : a.shape[1];
  const std::int64_t N = tb ? b.shape[0] : b.shape[1];
  if ((tb ? b.shape[1] : b.shape[0]) != K) unsupported(op, "inner dimensions differ");
  float* y = out[0].as<float>();
  std::fill(y, y + M * N, 0.0f);
  gemm_acc(M, N, K, a.as<float>(), ta ? 1 : K, ta ? M : 1, b.as<float>(), tb ? 1 : N, tb ? K : 1, y);
  const bool has_c = in.size() > 2 && in[2].data;
  if (alpha != 1.0f)
    for (std::int64_t i = 0; i < M * N; ++i) y[i] *= alpha;
  if (has_c && beta != 0.0f) {
    const float* pc = in[2].as<float>();
    broadcast_loop(out[0].shape, {&in[2].shape}, [&](std::int64_t i, const Offsets& o) { y[i] += beta * pc[o[0]]; });
  }
}

// numpy matmul: 1-D operands are promoted (and the added dim dropped), batch dims broadcast.
void k_matmul(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& a = required(op, in, 0);
  const TensorRef& b = required(op, in, 1);
  if (a.dtype != DType::f32 || b.dtype != DType::f32) unsupported(op, "float32 only");
  std::vector<std::int64_t> as = a.shape, bs = b.shape;
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  const std::int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  if (bs[bs.size() - 2] != K) unsupported(op, "inner dimensions differ");
  const std::vector<std::int64_t> abatch(as.begin(), as.end() - 2), bbatch(bs.begin(), bs.end() - 2);
  std::vector<std::int64_t> batch(std::max(abatch.size(), bbatch.size()), 1);
  for (std::size_t k = 0; k < batch.size(); ++k) {
    const std::size_t ia = abatch.size() + k, ib = bbatch.size() + k;
    const std::int64_t da = ia >= batch.size() ? abatch[ia - batch.size()] : 1;
    const std::int64_t db = ib >= batch.size() ? bbatch[ib - batch.size()] : 1;
    batch[k] = std::max(da, db);
  }
  float* y = out[0].as<float>();
  std::fill(y, y + out[0].elements(), 0.0f);
  broadcast_loop(batch, {&abatch, &bbatch}, [&](std::int64_t i, const Offsets& o) {
    gemm_acc(M, N, K, a.as<float>() + o[0] * M * K, K, 1, b.as<float>() + o[1] * K * N, N, 1, y + i * M * N);
  });
}

// memplan MatMulT: the planned calls, each product added into the zeroed output.
void k_matmul_t(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& a = required(op, in, 0);
  const TensorRef& b = required(op, in, 1);
  if (a.dtype != DType::f32 || b.dtype != DType::f32) unsupported(op, "float32 only");
  const MatMulTPlan plan = plan_matmul_t(op.attr_int("trans_a", 0) != 0, op.attr_int("trans_b", 0) != 0, a.shape, b.shape,
                                         out[0].shape, "op '" + op.name + "' (" + op.type + ")");
  float* y = out[0].as<float>();
  std::fill(y, y + out[0].elements(), 0.0f);
  for (const GemmCall& c : plan.calls)
    for (std::int64_t j = 0; j < c.count; ++j)
      gemm_acc(c.m, c.n, c.k, a.as<float>() + c.offset_a + j * c.stride_a, c.ta ? 1 : c.lda, c.ta ? c.lda : 1,
               b.as<float>() + c.offset_b + j * c.stride_b, c.tb ? 1 : c.ldb, c.tb ? c.ldb : 1, y + c.offset_c + j * c.stride_c);
}

}  // namespace

void add_linalg_kernels(KernelTable& t) {
  t["Gemm"] = {k_gemm, false, {kF32, 2}};
  t["MatMul"] = {k_matmul, false};
  t["memplan::MatMulT"] = {k_matmul_t, false};
}

}  // namespace memplan::runtime::cpu
