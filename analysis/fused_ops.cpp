// Geometry of memplan's fused transformer ops, read the same way by shapes, cost and kernels.
#include "analysis/fused_ops.hpp"

#include <string>

namespace memplan::analysis {

HeadLayout head_layout_from_name(std::string_view name) {
  if (name == "bhsd") return HeadLayout::bhsd;
  if (name == "bshd") return HeadLayout::bshd;
  if (name == "packed") return HeadLayout::packed;
  fail(ErrorKind::unsupported, "attention layout '" + std::string(name) + "' is not bhsd, bshd or packed");
}

const char* head_layout_name(HeadLayout l) noexcept {
  return l == HeadLayout::bshd ? "bshd" : l == HeadLayout::packed ? "packed" : "bhsd";
}

std::vector<std::int64_t> head_shape(HeadLayout layout, std::int64_t batch, std::int64_t heads, std::int64_t len, std::int64_t dim) {
  if (layout == HeadLayout::bshd) return {batch, len, heads, dim};
  if (layout == HeadLayout::packed) return {batch, len, 3, heads, dim};
  return {batch, heads, len, dim};
}

namespace {

struct Dims {
  std::int64_t b, h, s, d;
};

Dims dims_of(const Op& op, const char* what, HeadLayout l, const std::vector<std::int64_t>& x) {
  if (l == HeadLayout::packed) {
    if (x.size() != 5 || x[2] != 3)
      fail(ErrorKind::shape, "op '" + op.name + "' (" + op.type + "): packed " + what + " is not [B, S, 3, H, D]");
    return {x[0], x[3], x[1], x[4]};
  }
  if (x.size() != 4)
    fail(ErrorKind::shape, "op '" + op.name + "' (" + op.type + "): " + what + " has rank " + std::to_string(x.size()) + ", not 4");
  if (l == HeadLayout::bshd) return {x[0], x[2], x[1], x[3]};
  return {x[0], x[1], x[2], x[3]};
}

HeadStrides strides_of(HeadLayout l, std::int64_t heads, std::int64_t len, std::int64_t dim, std::int64_t slot = 0) {
  if (l == HeadLayout::bshd) return {len * heads * dim, dim, heads * dim};
  if (l == HeadLayout::packed) return {len * 3 * heads * dim, dim, 3 * heads * dim, slot * heads * dim};
  return {heads * len * dim, len * dim, dim};
}

}  // namespace

AttentionGeometry attention_geometry(const Op& op, const std::vector<std::int64_t>& q, const std::vector<std::int64_t>& k,
                                     const std::vector<std::int64_t>& v) {
  AttentionGeometry g;
  g.q_layout = head_layout_from_name(op.attr_string("q_layout", "bhsd"));
  g.k_layout = head_layout_from_name(op.attr_string("k_layout", "bhsd"));
  g.v_layout = head_layout_from_name(op.attr_string("v_layout", "bhsd"));
  g.o_layout = head_layout_from_name(op.attr_string("o_layout", "bhsd"));
  const Dims dq = dims_of(op, "Q", g.q_layout, q), dk = dims_of(op, "K", g.k_layout, k), dv = dims_of(op, "V", g.v_layout, v);
  auto bad = [&](const std::string& what) { fail(ErrorKind::shape, "op '" + op.name + "' (" + op.type + "): " + what); };
  if (dq.b != dk.b || dq.b != dv.b) bad("Q, K and V disagree on the batch");
  if (dq.d != dk.d) bad("Q and K disagree on the head dim");
  if (dk.h != dv.h || dk.s != dv.s) bad("K and V disagree on heads or length");
  if (dk.h <= 0 || dq.h % dk.h != 0) bad("the query heads are not a multiple of the key/value heads");
  g.batch = dq.b;
  g.q_heads = dq.h;
  g.kv_heads = dk.h;
  g.q_len = dq.s;
  g.kv_len = dk.s;
  g.head_dim = dq.d;
  g.v_head_dim = dv.d;
  g.scale = op.attr_float("scale", 1.0);
  g.causal = op.attr_int("causal", 0) != 0;
  g.dropout_ratio = op.attr_float("dropout_ratio", 0.0);
  if (!(g.dropout_ratio >= 0.0 && g.dropout_ratio < 1.0)) bad("dropout_ratio is outside [0, 1)");
  g.seed = static_cast<std::uint64_t>(op.attr_int("seed", 0));
  const int packed = (g.q_layout == HeadLayout::packed) + (g.k_layout == HeadLayout::packed) + (g.v_layout == HeadLayout::packed);
  if (packed != 0 && packed != 3) bad("Q, K and V are packed together or not at all");
  if (g.o_layout == HeadLayout::packed) bad("O cannot be packed");
  g.packed = packed == 3;
  std::int64_t slot[3] = {0, 1, 2};
  if (g.packed) {
    if (q != k || q != v) bad("packed Q, K and V are not one shape");
    slot[0] = op.attr_int("q_slot", 0);
    slot[1] = op.attr_int("k_slot", 1);
    slot[2] = op.attr_int("v_slot", 2);
    for (int i = 0; i < 3; ++i)
      if (slot[i] < 0 || slot[i] > 2 || slot[i] == slot[(i + 1) % 3]) bad("packed slots must be distinct, in 0..2");
  }
  g.q = strides_of(g.q_layout, g.q_heads, g.q_len, g.head_dim, slot[0]);
  g.k = strides_of(g.k_layout, g.kv_heads, g.kv_len, g.head_dim, slot[1]);
  g.v = strides_of(g.v_layout, g.kv_heads, g.kv_len, g.v_head_dim, slot[2]);
  g.o = strides_of(g.o_layout, g.q_heads, g.q_len, g.v_head_dim);
  return g;
}

}  // namespace memplan::analysis
