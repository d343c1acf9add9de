// FLOP formulas of the op registry from concrete shapes: matmuls, convolutions and pools exactly, the rest per element.
#include <algorithm>

#include "analysis/fused_ops.hpp"
#include "analysis/matmul_t.hpp"
#include "analysis/ops_detail.hpp"

namespace memplan::analysis::ops_detail {
namespace {

double numel(const Graph& g, TensorId t) { return t == kNoTensor ? 0.0 : static_cast<double>(g.tensors[t].element_count()); }
std::vector<std::int64_t> shape_of(const Graph& g, TensorId t) { return g.tensors.at(t).shape(); }
double product(const std::vector<std::int64_t>& s, std::size_t from, std::size_t to) {
  double p = 1.0;
  for (std::size_t k = from; k < to && k < s.size(); ++k) p *= static_cast<double>(s[k]);
  return p;
}

// 2 * N * Cout * prod(out spatial) * Cin/group * prod(kernel): the same count for the forward conv and
// both of its gradients; `y` is the conv's output (dY for the gradients), `w` its weight.
double conv_count(const std::vector<std::int64_t>& y, const std::vector<std::int64_t>& w) {
  if (y.size() < 2 || w.size() < 2) return 0.0;
  return 2.0 * product(y, 0, y.size()) * static_cast<double>(w[1]) * product(w, 2, w.size());
}

// Contraction length of a matmul whose left operand is `a` (its last dim).
double last_dim(const std::vector<std::int64_t>& a) { return a.empty() ? 1.0 : static_cast<double>(a.back()); }

double window(const Op& op) {
  const auto k = op.attr_ints("kernel_shape");
  return product(k, 0, k.size());
}

}  // namespace

double conv_flops(const Graph& g, const Op& op) {
  const TensorId y = op.output(0);
  return conv_count(shape_of(g, y), shape_of(g, op.input(1))) + (op.input(2) != kNoTensor ? numel(g, y) : 0.0);
}
double conv_grad_input_flops(const Graph& g, const Op& op) { return conv_count(shape_of(g, op.input(0)), shape_of(g, op.input(1))); }
double conv_transpose_flops(const Graph& g, const Op& op) {
  return conv_grad_input_flops(g, op) + (op.input(2) != kNoTensor ? numel(g, op.output(0)) : 0.0);
}
double conv_grad_weight_flops(const Graph& g, const Op& op) { return conv_count(shape_of(g, op.input(0)), shape_of(g, op.output(0))); }

double matmul_flops(const Graph& g, const Op& op) { return 2.0 * numel(g, op.output(0)) * last_dim(shape_of(g, op.input(0))); }
// LinearCrossEntropy: the head's forward matmul and its two gradient matmuls, X [N, K] x W [K, V] each.
double linear_cross_entropy_flops(const Graph& g, const Op& op) {
  return 6.0 * numel(g, op.input(0)) *
         static_cast<double>(memplan_ops::linear_cross_entropy_classes(shape_of(g, op.input(1)), op.attr_int("trans_b", 0)));
}
// dA = dY B^T: contraction over N, one M x K product per batch.
double matmul_grad_a_flops(const Graph& g, const Op& op) {
  const auto b = shape_of(g, op.input(1));
  return 2.0 * numel(g, op.input(0)) * (b.size() >= 2 ? static_cast<double>(b[b.size() - 2]) : last_dim(b));
}
double matmul_grad_b_flops(const Graph& g, const Op& op) { return 2.0 * numel(g, op.input(1)) * last_dim(shape_of(g, op.input(0))); }
// Every broadcast batch's product counts, also where the output sums batches down.
double matmul_t_flops(const Graph& g, const Op& op) {
  const MatMulTGeometry geo = matmul_t_geometry(g, op);
  return 2.0 * static_cast<double>(geo.batch_count()) * static_cast<double>(geo.m) * static_cast<double>(geo.n) *
         static_cast<double>(geo.k);
}
double gemm_flops(const Graph& g, const Op& op) {
  const TensorId y = op.output(0);
  const auto a = shape_of(g, op.input(0));
  const double k = a.size() == 2 ? static_cast<double>(op.attr_int("transA", 0) ? a[0] : a[1]) : 1.0;
  return 2.0 * numel(g, y) * k + (op.input(2) != kNoTensor ? numel(g, y) : 0.0);
}

double pool_flops(const Graph& g, const Op& op) { return numel(g, op.output(0)) * window(op); }
double pool_grad_flops(const Graph& g, const Op& op) { return numel(g, op.input(0)) * window(op); }

double no_flops(const Graph&, const Op&) { return 0.0; }
double reduction_flops(const Graph& g, const Op& op) { return std::max(numel(g, op.input(0)), numel(g, op.output(0))); }
double one_flop(const Graph&, const Op&) { return 1.0; }

namespace {
// Score elements one FusedAttention(Grad) computes: B Hq Sq Sk, about half of it under a causal mask.
double score_elements(const AttentionGeometry& a) {
  const double n = static_cast<double>(a.batch) * static_cast<double>(a.q_heads) * static_cast<double>(a.q_len) *
                   static_cast<double>(a.kv_len);
  return a.causal ? 0.5 * n : n;
}
// S = Q K^T, the softmax (about 5 per score), O = P V.
double forward_flops(const AttentionGeometry& a) {
  return score_elements(a) * (2.0 * static_cast<double>(a.head_dim) + 2.0 * static_cast<double>(a.v_head_dim) + 5.0);
}
}  // namespace

double attention_flops(const Graph& g, const Op& op) {
  const TensorId q = op.input(0), k = op.input(1), v = op.input(2);
  return forward_flops(attention_geometry(op, shape_of(g, q), shape_of(g, k), shape_of(g, v)));
}

double onnx_attention_flops(const Graph& g, const Op& op) {
  auto q = shape_of(g, op.input(0)), k = shape_of(g, op.input(1)), v = shape_of(g, op.input(2));
  if (q.size() == 3 && k.size() == 3 && v.size() == 3) {
    const std::int64_t hq = std::max<std::int64_t>(1, op.attr_int("q_num_heads", 1)), hkv = std::max<std::int64_t>(1, op.attr_int("kv_num_heads", 1));
    q = {q[0], hq, q[1], q[2] / hq};
    k = {k[0], hkv, k[1], k[2] / hkv};
    v = {v[0], hkv, v[1], v[2] / hkv};
  }
  if (q.size() != 4 || k.size() != 4 || v.size() != 4) return 0.0;
  AttentionGeometry a;
  a.batch = q[0];
  a.q_heads = q[1];
  a.q_len = q[2];
  a.kv_len = k[2] + (op.input(4) != kNoTensor ? shape_of(g, op.input(4)).at(2) : 0);
  a.head_dim = q[3];
  a.v_head_dim = v[3];
  a.causal = op.attr_int("is_causal", 0) != 0;
  return forward_flops(a);
}

double attention_grad_flops(const Graph& g, const Op& op) {
  const TensorId q = op.input(1), k = op.input(2), v = op.input(3);
  const auto a = attention_geometry(op, shape_of(g, q), shape_of(g, k), shape_of(g, v));
  const double s = score_elements(a);
  // S = Q K^T again, dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q.
  return s * (6.0 * static_cast<double>(a.head_dim) + 4.0 * static_cast<double>(a.v_head_dim) + 8.0);
}

double largest_operand(const Graph& g, const Op& op) {
  double n = 0.0;
  for (TensorId x : op.inputs) n = std::max(n, numel(g, x));
  for (TensorId x : op.outputs) n = std::max(n, numel(g, x));
  return n;
}

std::uint32_t batch_norm_inplace(const Op& op) {
  return op.attr_int("training_mode", 0) == 0 && op.output(1) == kNoTensor ? 1u : 0u;
}

}  // namespace memplan::analysis::ops_detail
