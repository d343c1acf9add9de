// memplan MatMulT as a few strided GEMM calls, planned once from shapes and run by the CPU and CUDA kernels alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace memplan::runtime {

// Row-major C[m, n] (+)= op(A)[m, k] op(B)[k, n], `count` times, operand i of product j at offset_x + j * stride_x
// (elements; a stride of 0 shares the operand). lda / ldb are A's and B's stored row lengths, so op(A) reads
// A[i, l] at l * lda + i where ta is set, i * lda + l otherwise.
struct GemmCall {
  bool ta = false, tb = false;
  std::int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  std::int64_t offset_a = 0, offset_b = 0, offset_c = 0;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0, count = 1;
};

struct MatMulTPlan {
  std::vector<GemmCall> calls;
  // The calls add into C (zeroed first): batches summed down one product at a time. Otherwise each call
  // writes its own C blocks.
  bool accumulate = false;
};

// Plans Y = op(A) op(B) summed down to Y's dims (analysis/matmul_t.hpp): one call where the batch folds into
// the rows (a weight shared by every batch), into the contraction (a weight's gradient summed over the
// batch: one GEMM over the flattened rows) or into a strided batch; one accumulating call per batch
// otherwise. ErrorKind::shape naming `where` when the dims disagree.
MatMulTPlan plan_matmul_t(bool trans_a, bool trans_b, const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b,
                          const std::vector<std::int64_t>& y, const std::string& where);

}  // namespace memplan::runtime
