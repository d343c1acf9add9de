// CPU reference kernels of memplan::FusedAttention and FusedAttentionGrad (analysis/fused_ops.hpp): one query
// row at a time in double; the backward recomputes each row's probabilities from the saved logsumexp
// (FlashAttention-2, Dao 2023, Algorithm 2) and replays the forward's dropout mask.
#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>

#include "analysis/fused_ops.hpp"
#include "runtime_allocator/kernels/cpu_kernels.hpp"
#include "runtime_allocator/kernels/dropout_mask.hpp"

namespace memplan::runtime::cpu {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Runs f(u) for u in [0, n) on a few threads; each u is one independent unit of work.
template <class F>
void parallel_units(std::int64_t n, bool parallel, F f) {
  const std::int64_t workers = parallel ? std::min<std::int64_t>({n, std::max(1u, std::thread::hardware_concurrency()), 16}) : 1;
  if (workers <= 1) {
    for (std::int64_t u = 0; u < n; ++u) f(u);
    return;
  }
  std::vector<std::thread> threads;
  for (std::int64_t w = 0; w < workers; ++w)
    threads.emplace_back([&f, w, n, workers] {
      for (std::int64_t u = w; u < n; u += workers) f(u);
    });
  for (auto& t : threads) t.join();
}

void check_elements(const Op& op, const TensorRef& t, std::int64_t want, const char* what) {
  if (t.data && t.elements() != want)
    unsupported(op, std::string(what) + " has " + std::to_string(t.elements()) + " elements, expected " + std::to_string(want));
}

// What both kernels read: the geometry, Q, K, V, and the bias (float: added to the scores; bool: a mask)
// read under broadcasting against [B, Hq, Sq, Sk].
struct Attention {
  analysis::AttentionGeometry g;
  const float *q = nullptr, *k = nullptr, *v = nullptr;
  const TensorRef* bias = nullptr;
  std::vector<std::int64_t> bias_strides;
  std::uint64_t key = 0, threshold = 0;
  double keep_scale = 1.0;  // 1 / (1 - ratio)

  // Q, K, V at inputs q_slot .. q_slot + 2; the bias (optional) at bias_slot.
  Attention(const Op& op, const Refs& in, std::size_t q_slot, std::size_t bias_slot) {
    const TensorRef &tq = required(op, in, q_slot), &tk = required(op, in, q_slot + 1), &tv = required(op, in, q_slot + 2);
    for (const TensorRef* t : {&tq, &tk, &tv})
      if (t->dtype != DType::f32) unsupported(op, "Q, K and V must be float32");
    g = analysis::attention_geometry(op, tq.shape, tk.shape, tv.shape);
    q = tq.as<float>();
    k = tk.as<float>();
    v = tv.as<float>();
    if (bias_slot < in.size() && in[bias_slot].data) {
      bias = &in[bias_slot];
      if (bias->dtype != DType::f32 && bias->dtype != DType::boolean) unsupported(op, "the bias must be float32 or bool");
      if (bias->shape.size() > 4) unsupported(op, "the bias has rank above 4");
      const std::vector<std::int64_t> full{g.batch, g.q_heads, g.q_len, g.kv_len};
      for (std::size_t d = 0; d < bias->shape.size(); ++d) {
        const std::int64_t b = bias->shape[d], f = full[4 - bias->shape.size() + d];
        if (b != 1 && b != f) unsupported(op, "the bias does not broadcast to [B, Hq, Sq, Sk]");
      }
      bias_strides = broadcast_strides(bias->shape, full);
    }
    if (g.dropout_ratio > 0.0) {
      const auto ratio = static_cast<float>(g.dropout_ratio);
      key = step_key(g.seed);
      threshold = dropout_threshold(ratio);
      keep_scale = 1.0 / (1.0 - static_cast<double>(ratio));
    }
  }

  std::int64_t bias_index(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return b * bias_strides[0] + h * bias_strides[1] + i * bias_strides[2] + j * bias_strides[3];
  }
  const float* q_row(std::int64_t b, std::int64_t h, std::int64_t i) const { return q + at(g.q, b, h, i); }
  const float* k_row(std::int64_t b, std::int64_t kh, std::int64_t j) const { return k + at(g.k, b, kh, j); }
  const float* v_row(std::int64_t b, std::int64_t kh, std::int64_t j) const { return v + at(g.v, b, kh, j); }
  static std::int64_t at(const analysis::HeadStrides& st, std::int64_t b, std::int64_t h, std::int64_t s) {
    return st.offset + b * st.batch + h * st.head + s * st.row;
  }

  // The drop decision of element [b, h, i, j] of the probabilities (true: kept).
  bool keep(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    if (threshold == 0) return true;
    const auto index = static_cast<std::uint64_t>(((b * g.q_heads + h) * g.q_len + i) * g.kv_len + j);
    return dropout_keep(key, index, threshold);
  }

  // s[j] = scale q_i . k_j + bias; -inf where causal or the mask hides key j.
  void scores(std::int64_t b, std::int64_t h, std::int64_t i, double* s) const {
    const std::int64_t kh = h / g.group();
    const float* qi = q_row(b, h, i);
    for (std::int64_t j = 0; j < g.kv_len; ++j) {
      if (g.causal && j > i) {
        s[j] = kNegInf;
        continue;
      }
      const float* kj = k_row(b, kh, j);
      double dot = 0;
      for (std::int64_t d = 0; d < g.head_dim; ++d) dot += static_cast<double>(qi[d]) * kj[d];
      s[j] = g.scale * dot;
      if (!bias) continue;
      const std::int64_t at = bias_index(b, h, i, j);
      if (bias->dtype == DType::boolean) {
        if (!bias->as<bool>()[at]) s[j] = kNegInf;
      } else {
        s[j] += bias->as<float>()[at];
      }
    }
  }

  // Overwrites the scores s with their softmax (0 where masked) and returns the row's logsumexp
  // (-inf, with s all 0, when every key is masked).
  double softmax(double* s) const {
    double m = kNegInf;
    for (std::int64_t j = 0; j < g.kv_len; ++j) m = std::max(m, s[j]);
    if (m == kNegInf) {
      std::fill_n(s, g.kv_len, 0.0);
      return kNegInf;
    }
    double sum = 0;
    for (std::int64_t j = 0; j < g.kv_len; ++j) sum += std::exp(s[j] - m);
    const double lse = m + std::log(sum);
    for (std::int64_t j = 0; j < g.kv_len; ++j) s[j] = std::exp(s[j] - lse);
    return lse;
  }
};

// O = dropout(softmax(scale Q K^T + bias)) V; LSE = logsumexp of each row of scores (before dropout).
void k_fused_attention(const Op& op, const Refs& in, const Refs& out) {
  const Attention a(op, in, 0, 3);
  const auto& g = a.g;
  const TensorRef* lse_out = out.size() > 1 && out[1].data ? &out[1] : nullptr;
  check_elements(op, out[0], g.batch * g.q_heads * g.q_len * g.v_head_dim, "O");
  if (lse_out) check_elements(op, *lse_out, g.batch * g.q_heads * g.q_len, "LSE");
  float* o = out[0].as<float>();
  parallel_units(g.batch * g.q_heads, true, [&](std::int64_t bh) {
    const std::int64_t b = bh / g.q_heads, h = bh % g.q_heads, kh = h / g.group();
    std::vector<double> p(static_cast<std::size_t>(g.kv_len)), acc(static_cast<std::size_t>(g.v_head_dim));
    for (std::int64_t i = 0; i < g.q_len; ++i) {
      a.scores(b, h, i, p.data());
      const double lse = a.softmax(p.data());
      std::fill(acc.begin(), acc.end(), 0.0);
      for (std::int64_t j = 0; j < g.kv_len; ++j) {
        if (p[j] == 0.0 || !a.keep(b, h, i, j)) continue;
        const double pj = p[j] * a.keep_scale;
        const float* vj = a.v_row(b, kh, j);
        for (std::int64_t d = 0; d < g.v_head_dim; ++d) acc[d] += pj * vj[d];
      }
      float* oi = o + b * g.o.batch + h * g.o.head + i * g.o.row;
      for (std::int64_t d = 0; d < g.v_head_dim; ++d) oi[d] = static_cast<float>(acc[d]);
      if (lse_out) lse_out->as<float>()[bh * g.q_len + i] = static_cast<float>(lse);
    }
  });
}

// Per (batch, kv head): P = exp(S - LSE); dV = P'^T dO; dP' = dO V^T; dP = dropout(dP'); D = rowsum(P dP);
// dS = P (dP - D); dQ = scale dS K; dK = scale dS^T Q summed over the group's query heads; dBias = dS
// summed down to the bias's shape.
void k_fused_attention_grad(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& d_o = required(op, in, 0);
  const Attention a(op, in, 1, 6);
  const auto& g = a.g;
  const TensorRef& lse_in = required(op, in, 5);
  if (d_o.dtype != DType::f32 || lse_in.dtype != DType::f32) unsupported(op, "dO and LSE must be float32");
  check_elements(op, d_o, g.batch * g.q_heads * g.q_len * g.v_head_dim, "dO");
  check_elements(op, lse_in, g.batch * g.q_heads * g.q_len, "LSE");
  auto slot = [&](std::size_t i) -> const TensorRef* { return i < out.size() && out[i].data ? &out[i] : nullptr; };
  const TensorRef *dq_out = slot(0), *dk_out = slot(1), *dv_out = slot(2), *db_out = slot(3);
  if (g.packed) {  // one gradient for the one packed input: every slot of output 0
    if (!dq_out || dk_out || dv_out) unsupported(op, "packed Q, K, V take one gradient, output 0");
    dk_out = dv_out = dq_out;
  }
  if (dq_out) check_elements(op, *dq_out, required(op, in, 1).elements(), "dQ");
  if (dk_out && !g.packed) check_elements(op, *dk_out, required(op, in, 2).elements(), "dK");
  if (dv_out && !g.packed) check_elements(op, *dv_out, required(op, in, 3).elements(), "dV");
  std::vector<double> dbias;
  if (db_out) {
    if (!a.bias || a.bias->dtype != DType::f32) unsupported(op, "dBias of a bias that is not float32");
    check_elements(op, *db_out, a.bias->elements(), "dBias");
    dbias.assign(static_cast<std::size_t>(a.bias->elements()), 0.0);
  }
  const float* lse = lse_in.as<float>();
  const auto D = g.head_dim, Dv = g.v_head_dim, Sk = g.kv_len;
  // dBias sums over broadcast axes across units: then the units run in order, so the sum is deterministic.
  parallel_units(g.batch * g.kv_heads, !db_out, [&](std::int64_t unit) {
    const std::int64_t b = unit / g.kv_heads, kh = unit % g.kv_heads;
    std::vector<double> dk(static_cast<std::size_t>(Sk * D), 0.0), dv(static_cast<std::size_t>(Sk * Dv), 0.0);
    std::vector<double> p(static_cast<std::size_t>(Sk)), dp(static_cast<std::size_t>(Sk)), dq(static_cast<std::size_t>(D));
    for (std::int64_t h = kh * g.group(); h < (kh + 1) * g.group(); ++h)
      for (std::int64_t i = 0; i < g.q_len; ++i) {
        const double l = lse[(b * g.q_heads + h) * g.q_len + i];
        std::fill(dq.begin(), dq.end(), 0.0);
        const float* doi = d_o.as<float>() + b * g.o.batch + h * g.o.head + i * g.o.row;
        if (l != kNegInf) {
          a.scores(b, h, i, p.data());
          double row_dot = 0;  // D_i = sum_j P_ij dP_ij = dO_i . O_i
          for (std::int64_t j = 0; j < Sk; ++j) {
            p[j] = std::exp(p[j] - l);
            dp[j] = 0;
            if (p[j] == 0.0 || !a.keep(b, h, i, j)) continue;
            const float* vj = a.v_row(b, kh, j);
            double dpj = 0;
            for (std::int64_t d = 0; d < Dv; ++d) {
              dpj += static_cast<double>(doi[d]) * vj[d];
              dv[j * Dv + d] += p[j] * a.keep_scale * doi[d];
            }
            dp[j] = dpj * a.keep_scale;
            row_dot += p[j] * dp[j];
          }
          const float* qi = a.q_row(b, h, i);
          for (std::int64_t j = 0; j < Sk; ++j) {
            const double ds = p[j] * (dp[j] - row_dot);
            if (ds == 0.0) continue;
            if (!dbias.empty()) dbias[a.bias_index(b, h, i, j)] += ds;
            const float* kj = a.k_row(b, kh, j);
            for (std::int64_t d = 0; d < D; ++d) {
              dq[d] += g.scale * ds * kj[d];
              dk[j * D + d] += g.scale * ds * qi[d];
            }
          }
        }
        if (dq_out) {
          float* dqi = dq_out->as<float>() + Attention::at(g.q, b, h, i);
          for (std::int64_t d = 0; d < D; ++d) dqi[d] = static_cast<float>(dq[d]);
        }
      }
    for (std::int64_t j = 0; j < Sk; ++j) {
      if (dk_out) {
        float* dkj = dk_out->as<float>() + Attention::at(g.k, b, kh, j);
        for (std::int64_t d = 0; d < D; ++d) dkj[d] = static_cast<float>(dk[j * D + d]);
      }
      if (dv_out) {
        float* dvj = dv_out->as<float>() + Attention::at(g.v, b, kh, j);
        for (std::int64_t d = 0; d < Dv; ++d) dvj[d] = static_cast<float>(dv[j * Dv + d]);
      }
    }
  });
  if (db_out)
    for (std::size_t e = 0; e < dbias.size(); ++e) db_out->as<float>()[e] = static_cast<float>(dbias[e]);
}

}  // namespace

void add_attention_kernels(KernelTable& t) {
  t["memplan::FusedAttention"] = {k_fused_attention, false};
  t["memplan::FusedAttentionGrad"] = {k_fused_attention_grad, false};
}

}  // namespace memplan::runtime::cpu
