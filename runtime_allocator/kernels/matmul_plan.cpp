// Planning memplan MatMulT's GEMM calls: fold the batch into rows, contraction or a strided batch when the layouts allow.
#include "runtime_allocator/kernels/matmul_plan.hpp"

#include "analysis/matmul_t.hpp"
#include "analysis/tensor_index.hpp"

namespace memplan::runtime {

using analysis::dims_product;

namespace {

// Dims left-padded with 1 to rank r.
std::vector<std::int64_t> padded(const std::vector<std::int64_t>& d, std::size_t r) {
  std::vector<std::int64_t> p(r - d.size(), 1);
  p.insert(p.end(), d.begin(), d.end());
  return p;
}

// Element strides of each axis of `batch` for an operand whose batch dims are `dims` (0 where broadcast).
std::vector<std::int64_t> strides_over(const std::vector<std::int64_t>& dims, const std::vector<std::int64_t>& batch,
                                       std::int64_t matrix) {
  std::vector<std::int64_t> st = analysis::broadcast_strides(dims, batch);
  for (auto& s : st) s *= matrix;
  return st;
}

}  // namespace

MatMulTPlan plan_matmul_t(bool trans_a, bool trans_b, const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b,
                          const std::vector<std::int64_t>& y, const std::string& where) {
  const analysis::MatMulTGeometry geo = analysis::matmul_t_geometry(trans_a, trans_b, a, b, where);
  const std::vector<std::int64_t> yb = analysis::matmul_t_output_batch(geo, y, where);
  const std::size_t r = geo.batch.size();
  const std::vector<std::int64_t> ab = padded(geo.a_batch, r), bb = padded(geo.b_batch, r);
  const std::int64_t M = geo.m, N = geo.n, K = geo.k, nb = geo.batch_count();
  GemmCall c;
  c.ta = trans_a;
  c.tb = trans_b;
  c.m = M, c.n = N, c.k = K, c.lda = a.back(), c.ldb = b.back(), c.ldc = N;
  MatMulTPlan plan;
  const bool a_full = ab == geo.batch, b_full = bb == geo.batch;
  const bool a_shared = dims_product(ab) == 1, b_shared = dims_product(bb) == 1;
  if (yb == geo.batch) {  // nothing summed
    if (a_full && b_shared && !trans_a) {  // A's rows of every batch are one [nb * M, K] matrix
      c.m = nb * M;
      plan.calls.push_back(c);
      return plan;
    }
    if ((a_full || a_shared) && (b_full || b_shared)) {
      c.count = nb;
      c.stride_a = a_full ? M * K : 0;
      c.stride_b = b_full ? K * N : 0;
      c.stride_c = M * N;
      plan.calls.push_back(c);
      return plan;
    }
  } else if (dims_product(yb) == 1 && a_full && b_full && trans_a && !trans_b) {
    // sum_i A_i^T B_i = [A_0; A_1; ...]^T [B_0; B_1; ...]: the batch joins the contraction.
    c.k = nb * K;
    plan.calls.push_back(c);
    return plan;
  }
  // Any other broadcast: one product per batch, added into the output block it sums into.
  plan.accumulate = true;
  const auto sa = strides_over(ab, geo.batch, M * K), sb = strides_over(bb, geo.batch, K * N), sy = strides_over(yb, geo.batch, M * N);
  for (std::int64_t i = 0; i < nb; ++i) {
    GemmCall p = c;
    std::int64_t rest = i;
    for (std::size_t d = r; d-- > 0;) {
      const std::int64_t q = rest % geo.batch[d];
      rest /= geo.batch[d];
      p.offset_a += q * sa[d];
      p.offset_b += q * sb[d];
      p.offset_c += q * sy[d];
    }
    plan.calls.push_back(p);
  }
  return plan;
}

}  // namespace memplan::runtime
