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

// The gradient outputs FusedAttentionGrad writes (null: not asked for), checked against the inputs' sizes; packed
// Q, K, V take one gradient, output 0, for all three.
struct AttentionGrads {
  const TensorRef *dq = nullptr, *dk = nullptr, *dv = nullptr, *db = nullptr;
};

AttentionGrads attention_grads(const Op& op, const Refs& in, const Refs& out, const Attention& a) {
  auto slot = [&](std::size_t i) -> const TensorRef* { return i < out.size() && out[i].data ? &out[i] : nullptr; };
  AttentionGrads r{slot(0), slot(1), slot(2), slot(3)};
  if (a.g.packed) {
    if (!r.dq || r.dk || r.dv) unsupported(op, "packed Q, K, V take one gradient, output 0");
    r.dk = r.dv = r.dq;
  }
  if (r.dq) check_elements(op, *r.dq, required(op, in, 1).elements(), "dQ");
  if (r.dk && !a.g.packed) check_elements(op, *r.dk, required(op, in, 2).elements(), "dK");
  if (r.dv && !a.g.packed) check_elements(op, *r.dv, required(op, in, 3).elements(), "dV");
  if (r.db) {
    if (!a.bias || a.bias->dtype != DType::f32) unsupported(op, "dBias of a bias that is not float32");
    check_elements(op, *r.db, a.bias->elements(), "dBias");
  }
  return r;
}

// One (batch, kv head)'s backward: its query heads' rows one by one, dK and dV summed over them.
class AttentionGradUnit {
 public:
  AttentionGradUnit(const Attention& a, const TensorRef& d_o, const float* lse, std::int64_t b, std::int64_t kh,
                    std::vector<double>& dbias)
      : a_(a), g_(a.g), d_o_(d_o), lse_(lse), b_(b), kh_(kh), dbias_(dbias),
        dk_(static_cast<std::size_t>(g_.kv_len * g_.head_dim), 0.0), dv_(static_cast<std::size_t>(g_.kv_len * g_.v_head_dim), 0.0),
        p_(static_cast<std::size_t>(g_.kv_len)), dp_(static_cast<std::size_t>(g_.kv_len)), dq_(static_cast<std::size_t>(g_.head_dim)) {}

  // Row i of query head h: P, dP (dropout applied), D_i = sum_j P_ij dP_ij, dV += P'^T dO, then dS = P (dP - D):
  // dQ_i = scale dS K, dK += scale dS^T Q, dBias += dS. Writes dQ_i when asked for.
  void row(std::int64_t h, std::int64_t i, const TensorRef* dq_out) {
    const double l = lse_[(b_ * g_.q_heads + h) * g_.q_len + i];
    std::fill(dq_.begin(), dq_.end(), 0.0);
    const float* doi = d_o_.as<float>() + b_ * g_.o.batch + h * g_.o.head + i * g_.o.row;
    if (l != kNegInf) scores_grad(h, i, probabilities_grad(h, i, l, doi));
    if (!dq_out) return;
    float* dqi = dq_out->as<float>() + Attention::at(g_.q, b_, h, i);
    for (std::int64_t d = 0; d < g_.head_dim; ++d) dqi[d] = static_cast<float>(dq_[d]);
  }

  void write(const AttentionGrads& out) const {
    const auto D = g_.head_dim, Dv = g_.v_head_dim;
    for (std::int64_t j = 0; j < g_.kv_len; ++j) {
      if (out.dk) {
        float* dkj = out.dk->as<float>() + Attention::at(g_.k, b_, kh_, j);
        for (std::int64_t d = 0; d < D; ++d) dkj[d] = static_cast<float>(dk_[j * D + d]);
      }
      if (out.dv) {
        float* dvj = out.dv->as<float>() + Attention::at(g_.v, b_, kh_, j);
        for (std::int64_t d = 0; d < Dv; ++d) dvj[d] = static_cast<float>(dv_[j * Dv + d]);
      }
    }
  }

 private:
  // P_ij = exp(S_ij - LSE_i) and dP_ij (dropout's mask and scale), dV accumulated; returns D_i = dO_i . O_i.
  double probabilities_grad(std::int64_t h, std::int64_t i, double l, const float* doi) {
    const auto Dv = g_.v_head_dim;
    a_.scores(b_, h, i, p_.data());
    double row_dot = 0;
    for (std::int64_t j = 0; j < g_.kv_len; ++j) {
      p_[j] = std::exp(p_[j] - l);
      dp_[j] = 0;
      if (p_[j] == 0.0 || !a_.keep(b_, h, i, j)) continue;
      const float* vj = a_.v_row(b_, kh_, j);
      double dpj = 0;
      for (std::int64_t d = 0; d < Dv; ++d) {
        dpj += static_cast<double>(doi[d]) * vj[d];
        dv_[j * Dv + d] += p_[j] * a_.keep_scale * doi[d];
      }
      dp_[j] = dpj * a_.keep_scale;
      row_dot += p_[j] * dp_[j];
    }
    return row_dot;
  }

  void scores_grad(std::int64_t h, std::int64_t i, double row_dot) {
    const auto D = g_.head_dim;
    const float* qi = a_.q_row(b_, h, i);
    for (std::int64_t j = 0; j < g_.kv_len; ++j) {
      const double ds = p_[j] * (dp_[j] - row_dot);
      if (ds == 0.0) continue;
      if (!dbias_.empty()) dbias_[a_.bias_index(b_, h, i, j)] += ds;
      const float* kj = a_.k_row(b_, kh_, j);
      for (std::int64_t d = 0; d < D; ++d) {
        dq_[d] += g_.scale * ds * kj[d];
        dk_[j * D + d] += g_.scale * ds * qi[d];
      }
    }
  }

  const Attention& a_;
  const analysis::AttentionGeometry& g_;
  const TensorRef& d_o_;
  const float* lse_;
  std::int64_t b_, kh_;
  std::vector<double>& dbias_;
  std::vector<double> dk_, dv_, p_, dp_, dq_;
};

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
  const AttentionGrads grads = attention_grads(op, in, out, a);
  std::vector<double> dbias(grads.db ? static_cast<std::size_t>(a.bias->elements()) : 0, 0.0);
  // dBias sums over broadcast axes across units: then the units run in order, so the sum is deterministic.
  parallel_units(g.batch * g.kv_heads, !grads.db, [&](std::int64_t unit) {
    AttentionGradUnit u(a, d_o, lse_in.as<float>(), unit / g.kv_heads, unit % g.kv_heads, dbias);
    for (std::int64_t h = (unit % g.kv_heads) * g.group(); h < (unit % g.kv_heads + 1) * g.group(); ++h)
      for (std::int64_t i = 0; i < g.q_len; ++i) u.row(h, i, grads.dq);
    u.write(grads);
  });
  if (grads.db)
    for (std::size_t e = 0; e < dbias.size(); ++e) grads.db->as<float>()[e] = static_cast<float>(dbias[e]);
}

}  // namespace

void add_attention_kernels(KernelTable& t) {
  t["memplan::FusedAttention"] = {k_fused_attention, false};
  t["memplan::FusedAttentionGrad"] = {k_fused_attention_grad, false};
}

}  // namespace memplan::runtime::cpu
