// Attention matching: from a Softmax back to Q K^T and forward to P V, through the forms exporters write.
#include <algorithm>
#include <cmath>
#include <set>

#include "analysis/autodiff.hpp"
#include "planner/fusion_attention.hpp"
#include "planner/graph_rewrite.hpp"

namespace memplan::planner {

using analysis::attention_geometry;
using analysis::DType;
using analysis::Graph;
using analysis::head_shape;
using analysis::HeadLayout;
using analysis::kNoOp;
using analysis::kNoTensor;
using analysis::Op;
using analysis::OpId;
using analysis::TensorId;
using Shape = std::vector<std::int64_t>;

bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  for (std::size_t i = 0; i < from.size(); ++i) {
    const std::int64_t f = from[from.size() - 1 - i], t = to[to.size() - 1 - i];
    if (f != 1 && f != t) return false;
  }
  return true;
}

std::int64_t attention_dropout_seed(const Op& dropout) {
  if (const auto* a = dropout.attr("seed"))
    return a->kind == analysis::Attribute::Kind::f ? static_cast<std::int64_t>(a->f) : a->i;
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : dropout.name) h = (h ^ c) * 1099511628211ull;
  return static_cast<std::int64_t>(h >> 1);
}

namespace {

// An additive mask value at or below this masks its key (exp underflows to 0 in float32 for any sane score).
constexpr double kMaskedBelow = -1e4;
// How far a scale constant is followed through the ops computing it (Sqrt, Cast, Div, ...).
constexpr int kScalarDepth = 6;

// True when the constant `x` is a causal mask of [sq, sk] (broadcast over leading axes): a key j > query i
// masked (false, or an additive value <= kMaskedBelow), every other entry attended (true, or exactly 0).
bool is_causal_constant(const analysis::Tensor& x, std::int64_t sq, std::int64_t sk) {
  if (!x.data || x.data->dims.size() < 2) return false;
  const auto& d = x.data->dims;
  if (d[d.size() - 2] != sq || d.back() != sk) return false;
  std::vector<double> v;
  try {
    v = x.data->as_double();
  } catch (const Error&) {
    return false;
  }
  const bool boolean = x.data->dtype == DType::boolean;
  for (std::size_t idx = 0; idx < v.size(); ++idx) {
    const auto j = static_cast<std::int64_t>(idx) % sk, i = (static_cast<std::int64_t>(idx) / sk) % sq;
    const bool attend = j <= i;
    const bool ok = boolean ? ((v[idx] != 0.0) == attend) : (attend ? v[idx] == 0.0 : v[idx] <= kMaskedBelow);
    if (!ok) return false;
  }
  return true;
}

class Matcher {
 public:
  Matcher(const Graph& g, OpId softmax) : g_(g) { m_.softmax = softmax; }

  AttentionMatchResult run() {
    AttentionMatchResult r;
    if (match())
      r.match = std::move(m_);
    else
      r.near_miss = why_.empty() ? "no attention around this softmax" : why_;
    return r;
  }

 private:
  bool miss(const std::string& why) {
    if (why_.empty()) why_ = why;
    return false;
  }
  const Op& op(OpId o) const { return g_.ops[o]; }
  OpId producer(TensorId x) const { return x == kNoTensor ? kNoOp : g_.tensors[x].producer; }
  const std::string& name(TensorId x) const { return g_.tensors[x].name; }
  Shape shape(TensorId x) const { return g_.tensors[x].shape(); }
  std::size_t rank(TensorId x) const { return g_.tensors[x].dims.size(); }
  bool is(OpId o, std::string_view type) const { return o != kNoOp && op(o).domain.empty() && op(o).type == type; }
  bool f32(TensorId x) const { return x != kNoTensor && g_.tensors[x].dtype == DType::f32; }
  // `x` is read once, by `reader`, and is no graph output: its producer may join the group.
  bool only_read_by(TensorId x, OpId reader) const {
    const auto& t = g_.tensors[x];
    return !t.is_graph_output && t.consumers.size() == 1 && t.consumers[0] == reader;
  }
  bool f32_cast(OpId o) const { return is(o, "Cast") && op(o).attr_int("to", 0) == 1 && f32(op(o).input(0)); }
  std::vector<std::int64_t> perm(OpId o) const { return op(o).attr_ints("perm"); }

  // A constant value, followed through the small ops that compute it (they join the group when nothing
  // else reads them).
  std::optional<double> scalar(TensorId x, int depth = 0) {
    if (x == kNoTensor) return std::nullopt;
    if (auto c = scalar_constant(g_, x)) return c;
    const OpId p = producer(x);
    if (p == kNoOp || depth > kScalarDepth || g_.tensors[x].element_count() != 1) return std::nullopt;
    const Op& o = op(p);
    std::optional<double> v;
    if (is(p, "Cast") || is(p, "Identity"))
      v = scalar(o.input(0), depth + 1);
    else if (is(p, "Sqrt") || is(p, "Reciprocal") || is(p, "Neg")) {
      if (auto a = scalar(o.input(0), depth + 1)) v = is(p, "Sqrt") ? std::sqrt(*a) : is(p, "Neg") ? -*a : 1.0 / *a;
    } else if (is(p, "Mul") || is(p, "Div")) {
      auto a = scalar(o.input(0), depth + 1), b = scalar(o.input(1), depth + 1);
      if (a && b) v = is(p, "Mul") ? *a * *b : *a / *b;
    }
    if (v) helpers_.insert(p);
    return v;
  }

  // Multiplies `scale_` by a Mul/Div of `x` by a constant that leaves x's shape; returns the operand scaled.
  std::optional<TensorId> scaled_operand(OpId p) {
    const Op& o = op(p);
    const TensorId out = o.output(0);
    if (is(p, "Mul")) {
      for (int i = 0; i < 2; ++i) {
        const TensorId x = o.input(i), c = o.input(1 - i);
        if (!f32(x) || shape(x) != shape(out)) continue;
        if (auto v = scalar(c)) {
          scale_ *= *v;
          return x;
        }
      }
    } else if (is(p, "Div") && f32(o.input(0)) && shape(o.input(0)) == shape(out)) {
      if (auto v = scalar(o.input(1)); v && *v != 0.0) {
        scale_ /= *v;
        return o.input(0);
      }
    }
    return std::nullopt;
  }

  // Walks back from `x` (read by `reader`) through f32 Casts and scalings; `reader` ends as x's reader; `scaled`
  // is set when a scaling was walked.
  TensorId walk_scale(TensorId x, OpId& reader, bool* scaled = nullptr) {
    while (only_read_by(x, reader)) {
      const OpId p = producer(x);
      if (p == kNoOp) break;
      std::optional<TensorId> next;
      if (f32_cast(p))
        next = op(p).input(0);
      else if (is(p, "Mul") || is(p, "Div"))
        next = scaled_operand(p);
      if (!next) break;
      if (scaled != nullptr && !f32_cast(p)) *scaled = true;
      members_.insert(p);
      reader = p;
      x = *next;
    }
    return x;
  }

  // Q, K or V as read from `x` (bhsd, read by `reader`): through a grouped-query expansion (K and V) and a
  // Transpose(0,2,1,3) of a [B,S,H,D] tensor, which is then read in layout bshd. `removable`: the reader
  // is replaced, so the ops producing x may be replaced too when nothing else reads their results.
  AttentionOperand resolve(TensorId x, OpId reader, bool removable, bool grouped) {
    if (grouped && removable) {
      const OpId r = producer(x);
      if (is(r, "Reshape") && only_read_by(x, reader)) {
        const TensorId ex = op(r).input(0);
        const OpId e = producer(ex);
        const TensorId un = e != kNoOp ? op(e).input(0) : kNoTensor;
        const OpId u = producer(un);
        if (is(e, "Expand") && is(u, "Unsqueeze") && only_read_by(ex, r) && only_read_by(un, e)) {
          const TensorId kv = op(u).input(0);
          const Shape s = shape(kv), su = shape(un), se = shape(ex), sx = shape(x);
          // [B,Hkv,S,D] -> [B,Hkv,1,S,D] -> [B,Hkv,n,S,D] -> [B,Hkv*n,S,D]: query head h reads kv head h / n.
          if (s.size() == 4 && su == Shape{s[0], s[1], 1, s[2], s[3]} && se.size() == 5 && se[0] == s[0] && se[1] == s[1] &&
              se[3] == s[2] && se[4] == s[3] && sx == Shape{s[0], s[1] * se[2], s[2], s[3]}) {
            members_.insert({r, e, u});
            x = kv;
            reader = u;
          }
        }
      }
    }
    AttentionOperand a{x, HeadLayout::bhsd};
    const OpId t = producer(x);
    if (is(t, "Transpose") && rank(op(t).input(0)) == 4 && perm(t) == std::vector<std::int64_t>{0, 2, 1, 3}) {
      a = {op(t).input(0), HeadLayout::bshd};
      if (removable && only_read_by(x, reader)) members_.insert(t);
    }
    return a;
  }

  // `x` comes from a MatMul through ops a scores chain may hold.
  bool leads_to_scores(TensorId x, int depth) const {
    const OpId p = producer(x);
    if (p == kNoOp || depth > 16) return false;
    if (is(p, "MatMul")) return true;
    if (f32_cast(p) || is(p, "Reshape")) return leads_to_scores(op(p).input(0), depth + 1);
    if (is(p, "Where")) return leads_to_scores(op(p).input(1), depth + 1);
    if (is(p, "Mul") || is(p, "Div") || is(p, "Add"))
      return leads_to_scores(op(p).input(0), depth + 1) || (!is(p, "Div") && leads_to_scores(op(p).input(1), depth + 1));
    return false;
  }

  // miss() for the walks that return the next tensor: kNoTensor.
  TensorId missed(const std::string& why) {
    miss(why);
    return kNoTensor;
  }

  bool match();
  bool match_scores_chain(TensorId x);
  TensorId scores_step(OpId p, bool& scaled, bool& reshaped);
  TensorId bias_add_step(OpId p);
  TensorId mask_where_step(OpId p);
  bool check_scores_chain(TensorId x, const std::vector<OpId>& chain, bool reshaped);
  bool match_qk();
  bool match_pv(TensorId p);
  TensorId probs_step(TensorId cur);
  TensorId nan_guarded(TensorId cur);
  bool take_dropout(OpId c);
  void take_output_transpose();
  bool check_geometry();
  void take_helpers();
  bool check_closed();

  const Graph& g_;
  AttentionMatch m_;
  std::set<OpId> members_, helpers_;
  double scale_ = 1.0;
  bool scores_scaled_ = false;
  std::string why_;
};

bool Matcher::match() {
  const Op& sm = op(m_.softmax);
  const TensorId x = sm.input(0), p = sm.output(0);
  if (x == kNoTensor || p == kNoTensor || !f32(x)) return miss("softmax input is not float32");
  if (rank(x) != 4) return miss("softmax input '" + name(x) + "' is not 4-D");
  // Opset 13 made Softmax one axis (default -1); before, it coerced to 2-D at `axis` (default 1): the same
  // only when that axis is the last.
  std::int64_t axis = sm.attr_int("axis", g_.opset == 0 || g_.opset >= 13 ? -1 : 1);
  if (axis < 0) axis += 4;
  if (axis != 3) return miss("softmax over axis " + std::to_string(axis) + ", not the last");
  members_.insert(m_.softmax);
  if (!match_scores_chain(x) || !match_qk() || !match_pv(p) || !check_geometry()) return false;
  take_helpers();
  if (!check_closed()) return false;
  m_.scale = scale_;
  m_.members.assign(members_.begin(), members_.end());
  return true;
}

// Softmax input back to MatMul(Q, K^T): f32 Casts, scalings (before any bias), bias Adds, Where(mask,
// scores, -inf) and Reshapes that come back to the scores' shape.
bool Matcher::match_scores_chain(TensorId x) {
  OpId reader = m_.softmax;
  TensorId cur = x;
  bool& scaled = scores_scaled_;  // match_qk reads it
  bool reshaped = false;
  std::vector<OpId> chain;  // the ops walked, latest first
  while (true) {
    if (!only_read_by(cur, reader)) return miss("score tensor '" + name(cur) + "' is read outside the attention");
    const OpId p = producer(cur);
    if (p == kNoOp) return miss("the softmax input comes from no MatMul");
    if (is(p, "MatMul")) {
      m_.scores = p;
      members_.insert(p);
      break;
    }
    const TensorId next = scores_step(p, scaled, reshaped);
    if (next == kNoTensor) return false;
    members_.insert(p);
    chain.push_back(p);
    reader = p;
    cur = next;
  }
  return check_scores_chain(x, chain, reshaped);
}

// One op between the scores and the softmax, walked back: the tensor it reads the scores from (kNoTensor: a miss).
TensorId Matcher::scores_step(OpId p, bool& scaled, bool& reshaped) {
  const Op& o = op(p);
  if (f32_cast(p)) return o.input(0);
  if (is(p, "Mul") || is(p, "Div")) {
    auto s = scaled_operand(p);
    if (!s) return missed("'" + o.name + "' scales the scores by a non-constant");
    scaled = true;
    return *s;
  }
  if (scaled) return missed("the scores are scaled after '" + o.name + "' (" + o.type + ") adds to them");
  if (is(p, "Add")) return bias_add_step(p);
  if (is(p, "Where")) return mask_where_step(p);
  if (is(p, "Reshape")) {
    reshaped = true;
    return o.input(0);
  }
  return missed("'" + o.name + "' (" + o.type + ") between the scores and the softmax");
}

// An Add of a float32 bias to the scores: the bias joins m_.biases (earliest first).
TensorId Matcher::bias_add_step(OpId p) {
  const Op& o = op(p);
  for (int i = 0; i < 2; ++i) {
    const TensorId a = o.input(i), b = o.input(1 - i);
    if (f32(a) && shape(a) == shape(o.output(0)) && leads_to_scores(a, 0) && f32(b)) {
      m_.biases.insert(m_.biases.begin(), b);
      return a;
    }
  }
  return missed("'" + o.name + "' adds a bias that is not float32 or broadcasts the scores");
}

// Where(mask, scores, -inf): the boolean mask (one at most).
TensorId Matcher::mask_where_step(OpId p) {
  const Op& o = op(p);
  const auto fill = scalar(o.input(2));
  if (g_.tensors[o.input(0)].dtype != DType::boolean || !f32(o.input(1)) || shape(o.input(1)) != shape(o.output(0)) || !fill ||
      *fill > kMaskedBelow || m_.bool_mask != kNoTensor)
    return missed("'" + o.name + "' is no Where(mask, scores, -inf)");
  m_.bool_mask = o.input(0);
  return o.input(1);
}

// The chain walked as a whole: one kind of mask, the scores' shape, and reshapes only around a float bias.
bool Matcher::check_scores_chain(TensorId x, const std::vector<OpId>& chain, bool reshaped) {
  if (!m_.biases.empty() && m_.bool_mask != kNoTensor) return miss("the scores get both a float bias and a boolean mask");
  if (shape(op(m_.scores).output(0)) != shape(x)) return miss("the scores' shape differs from the softmax input's");
  if (reshaped && m_.bool_mask != kNoTensor) return miss("a boolean mask between reshapes of the scores");
  if (reshaped && !m_.biases.empty()) {
    // The ops after the first Add stay: applied to the Expand of that Add's bias they compute the whole
    // bias (each adds or reshapes in flat order), which reaches the softmax input's tensor.
    std::size_t first = chain.size() - 1;  // the chain is latest first: the first Add has the highest index
    while (!is(chain[first], "Add")) --first;
    for (std::size_t i = 0; i < first; ++i) members_.erase(chain[i]);
    m_.reshaped_bias_add = chain[first];
    m_.reshaped_bias_source = m_.biases.front();
    m_.biases = {x};
  }
  return true;
}

// MatMul(Q, K^T): scalings on either side, then K^T as a Transpose of K (bhsd or bshd) or as it is; SDPA's
// exported form when Q and K^T (after its transpose) are scaled and the scores are not.
bool Matcher::match_qk() {
  const Op& mm = op(m_.scores);
  if (rank(mm.input(0)) != 4 || rank(mm.input(1)) != 4) return miss("the scores MatMul's operands are not 4-D");
  OpId reader = m_.scores;
  bool q_scaled = false, k_scaled = false;
  const TensorId q = walk_scale(mm.input(0), reader, &q_scaled);
  m_.q = resolve(q, reader, members_.count(reader) > 0, false);
  reader = m_.scores;
  const TensorId kt = walk_scale(mm.input(1), reader, &k_scaled);
  m_.sdpa_form = q_scaled && k_scaled && !scores_scaled_;
  const OpId t = producer(kt);
  const bool removable = only_read_by(kt, reader);
  if (is(t, "Transpose") && rank(op(t).input(0)) == 4) {
    const auto pm = perm(t);
    if (pm == std::vector<std::int64_t>{0, 1, 3, 2} || pm == std::vector<std::int64_t>{0, 2, 3, 1}) {
      if (removable) members_.insert(t);
      OpId k_reader = t;
      TensorId k = op(t).input(0);
      if (removable) k = walk_scale(k, k_reader);
      if (pm[1] == 1)
        m_.k = resolve(k, k_reader, removable, true);
      else
        m_.k = {k, HeadLayout::bshd};  // [B,Sk,H,D] -> [B,H,D,Sk]
      return true;
    }
  }
  m_.k_transposed = kt;
  return true;
}

// Softmax output forward to MatMul(P, V): f32 Casts, the SDPA exporter's Where(IsNaN(P), 0, P), Dropout.
bool Matcher::match_pv(TensorId p) {
  TensorId cur = p;
  for (TensorId next = probs_step(cur); next != cur; next = probs_step(cur)) {
    if (next == kNoTensor) return false;
    cur = next;
  }
  const OpId pv = g_.tensors[cur].consumers[0];
  members_.insert(pv);
  const TensorId v = op(pv).input(1);
  if (rank(v) != 4) return miss("V '" + name(v) + "' is not 4-D");
  m_.v = resolve(v, pv, true, true);
  m_.output = op(pv).output(0);
  m_.output_op = pv;
  take_output_transpose();
  return true;
}

// One op reading the probabilities, walked forward: the tensor it passes them on as; `cur` itself where its reader is
// MatMul(P, V); kNoTensor: a miss.
TensorId Matcher::probs_step(TensorId cur) {
  const auto& t = g_.tensors[cur];
  if (t.is_graph_output) return missed("probabilities '" + t.name + "' are a graph output");
  if (const TensorId guarded = nan_guarded(cur); guarded != kNoTensor) return guarded;
  if (t.consumers.size() != 1) return missed("probabilities '" + t.name + "' are read outside the attention");
  const OpId c = t.consumers[0];
  const Op& o = op(c);
  if (f32_cast(c)) {
    members_.insert(c);
    return o.output(0);
  }
  if (is(c, "Dropout") && o.input(0) == cur) return take_dropout(c) ? o.output(0) : kNoTensor;
  if (is(c, "MatMul") && o.input(0) == cur && o.input(1) != cur) return cur;
  return missed("'" + o.name + "' (" + o.type + ") reads the probabilities");
}

// The SDPA exporter's Where(IsNaN(P), 0, P) read from `cur`: its output, kNoTensor where there is none.
TensorId Matcher::nan_guarded(TensorId cur) {
  const auto& t = g_.tensors[cur];
  if (t.consumers.size() != 2) return kNoTensor;
  const OpId a = t.consumers[0], b = t.consumers[1];
  const OpId nan = is(a, "IsNaN") ? a : b, w = nan == a ? b : a;
  if (!is(nan, "IsNaN") || !is(w, "Where") || op(w).input(0) != op(nan).output(0) || op(w).input(2) != cur ||
      !only_read_by(op(nan).output(0), w) || !is_scalar_constant(g_, op(w).input(1), 0.0))
    return kNoTensor;
  members_.insert({nan, w});
  return op(w).output(0);
}

// A Dropout on the probabilities: an identity at inference, the attention's dropout in training.
bool Matcher::take_dropout(OpId c) {
  const Op& o = op(c);
  // Opset 12 made training a runtime input (absent: inference, an identity); before, always identity.
  const auto ratio = o.input(1) == kNoTensor ? std::optional<double>(0.5) : scalar(o.input(1));
  const auto training = o.input(2) == kNoTensor ? std::optional<double>(0.0) : scalar(o.input(2));
  if (!ratio || !training) return miss("dropout '" + o.name + "' has a non-constant ratio or training mode");
  if (*training != 0.0 && *ratio > 0.0 && g_.opset >= 12) {
    if (m_.dropout_ratio > 0.0) return miss("two training dropouts on the probabilities");
    m_.dropout_ratio = *ratio;
    m_.seed = attention_dropout_seed(o);
  }
  members_.insert(c);
  return true;
}

// A Transpose(0,2,1,3) that alone reads the output joins: the output is written in layout bshd.
void Matcher::take_output_transpose() {
  const auto& o = g_.tensors[m_.output];
  if (o.is_graph_output || o.consumers.size() != 1) return;
  const OpId t = o.consumers[0];
  if (is(t, "Transpose") && perm(t) == std::vector<std::int64_t>{0, 2, 1, 3}) {
    members_.insert(t);
    m_.output = op(t).output(0);
    m_.o_layout = HeadLayout::bshd;
    m_.output_op = t;
  }
}

bool Matcher::check_geometry() {
  Op proto;
  proto.name = op(m_.softmax).name;
  proto.type = "FusedAttention";
  auto layout = [&](const char* key, HeadLayout l) {
    proto.attrs[key] = analysis::autodiff::attr_s(analysis::head_layout_name(l));
  };
  layout("q_layout", m_.q.layout);
  layout("k_layout", m_.k.layout);
  layout("v_layout", m_.v.layout);
  layout("o_layout", m_.o_layout);
  Shape k;
  if (m_.k_transposed != kNoTensor) {
    k = shape(m_.k_transposed);
    std::swap(k[2], k[3]);
  } else {
    k = shape(m_.k.tensor);
  }
  if (!f32(m_.q.tensor) || !f32(m_.v.tensor) || !f32(m_.output) ||
      !f32(m_.k_transposed != kNoTensor ? m_.k_transposed : m_.k.tensor))
    return miss("Q, K, V or O is not float32");
  analysis::AttentionGeometry a;
  try {
    a = attention_geometry(proto, shape(m_.q.tensor), k, shape(m_.v.tensor));
  } catch (const Error& e) {
    return miss(e.what());
  }
  const Shape scores{a.batch, a.q_heads, a.q_len, a.kv_len};
  if (shape(op(m_.scores).output(0)) != scores) return miss("the scores are not [B, Hq, Sq, Sk] of Q and K");
  if (shape(m_.output) != head_shape(m_.o_layout, a.batch, a.q_heads, a.q_len, a.v_head_dim))
    return miss("the output is not [B, Hq, Sq, Dv] of P and V");
  for (TensorId b : m_.biases)
    if (!broadcasts_to(shape(b), scores)) return miss("bias '" + name(b) + "' does not broadcast to the scores");
  if (m_.bool_mask != kNoTensor && !broadcasts_to(shape(m_.bool_mask), scores))
    return miss("mask '" + name(m_.bool_mask) + "' does not broadcast to the scores");
  // A constant bias of zeros (a padding mask with no padding input) adds nothing; an all-true mask masks nothing.
  std::erase_if(m_.biases, [&](TensorId b) { return is_scalar_constant(g_, b, 0.0, 0.0); });
  if (m_.bool_mask != kNoTensor && is_scalar_constant(g_, m_.bool_mask, 1.0, 0.0)) m_.bool_mask = kNoTensor;
  // A constant causal mask (0 / -inf, or true / false) is the causal attribute instead.
  const TensorId only = m_.bool_mask != kNoTensor ? m_.bool_mask : m_.biases.size() == 1 ? m_.biases[0] : kNoTensor;
  if (only != kNoTensor && m_.reshaped_bias_add == kNoOp && is_causal_constant(g_.tensors[only], a.q_len, a.kv_len)) {
    m_.causal = true;
    m_.biases.clear();
    m_.bool_mask = kNoTensor;
  }
  return true;
}

// The ops computing a scale constant join when only the group reads them.
void Matcher::take_helpers() {
  for (bool changed = true; changed;) {
    changed = false;
    for (auto it = helpers_.rbegin(); it != helpers_.rend(); ++it) {
      if (members_.count(*it)) continue;
      const TensorId out = op(*it).output(0);
      const auto& c = g_.tensors[out].consumers;
      if (g_.tensors[out].is_graph_output || op(*it).outputs.size() != 1 || c.empty()) continue;
      if (std::all_of(c.begin(), c.end(), [&](OpId r) { return members_.count(r) > 0; })) {
        members_.insert(*it);
        changed = true;
      }
    }
  }
}

// Nothing outside the group reads a tensor the group removes.
bool Matcher::check_closed() {
  const TensorId kept_bias = m_.reshaped_bias_add != kNoOp ? op(m_.reshaped_bias_add).output(0) : kNoTensor;
  for (OpId o : members_)
    for (TensorId t : op(o).outputs) {
      if (t == kNoTensor || t == m_.output || t == kept_bias) continue;
      const auto& x = g_.tensors[t];
      if (x.is_graph_output) return miss("'" + x.name + "' inside the attention is a graph output");
      for (OpId c : x.consumers)
        if (!members_.count(c)) return miss("'" + x.name + "' inside the attention is read by '" + op(c).name + "'");
    }
  return true;
}

}  // namespace

AttentionMatchResult match_attention(const Graph& g, OpId softmax) { return Matcher(g, softmax).run(); }

}  // namespace memplan::planner
