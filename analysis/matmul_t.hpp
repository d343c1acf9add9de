// memplan::MatMulT: a batched matrix product that reads transposed operands through strides, and its geometry.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/graph.hpp"

namespace memplan::analysis {

// memplan::MatMulT (planner/fusion_layouts.cpp makes it from MatMul(Transpose(x)); its backward rule emits it)
//   inputs   0 A, 1 B: float32, rank >= 2. op(X) is X with its last two axes swapped where the flag is set
//            (attrs trans_a, trans_b; default 0), X itself otherwise: op(A) is [..., M, K], op(B) [..., K, N].
//   outputs  0 Y = op(A) op(B) with the batch axes broadcast as numpy matmul's, then summed down to Y's
//            declared batch axes (each equal to the broadcast one, or 1, or missing on the left): Y is
//            [..., M, N]. The summing lets one product give the gradient of a broadcast operand (a Linear's
//            weight: dW = sum over the batch of dY^T X, one GEMM over the flattened rows).
struct MatMulTGeometry {
  bool trans_a = false, trans_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  std::vector<std::int64_t> a_batch, b_batch;  // the operands' batch dims as stored
  std::vector<std::int64_t> batch;             // their numpy broadcast
  std::int64_t batch_count() const;            // product of `batch`
  std::vector<std::int64_t> full_output() const;  // batch + [m, n]: Y's shape when nothing is summed
};

// ErrorKind::shape naming `where` (an op) when the operands' ranks, inner dims or batch dims disagree.
MatMulTGeometry matmul_t_geometry(bool trans_a, bool trans_b, const std::vector<std::int64_t>& a,
                                  const std::vector<std::int64_t>& b, const std::string& where);
// The geometry of `op` from its operands' concrete shapes.
MatMulTGeometry matmul_t_geometry(const Graph& g, const Op& op);

// Y's batch dims left-padded with 1 to the broadcast batch's rank; ErrorKind::shape naming `where` when Y is
// not [..., M, N] or a batch dim is neither the broadcast one nor 1.
std::vector<std::int64_t> matmul_t_output_batch(const MatMulTGeometry& geo, const std::vector<std::int64_t>& y,
                                                const std::string& where);

}  // namespace memplan::analysis
