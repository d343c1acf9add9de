// Schema rules of memplan's own ops: attributes, ranks and dtypes checked, output shapes computed from the inputs
// (analysis/fused_ops.hpp and fused_expr.hpp say what the ops compute); the driver compares them with the declared ones.
#include <cmath>
#include <string>

#include "analysis/fused_expr.hpp"
#include "analysis/fused_ops.hpp"
#include "analysis/shape_rules.hpp"

namespace memplan::analysis::shape_detail {
namespace {

void require_dtype(const OpContext& c, std::size_t i, bool ok, const char* expected) {
  if (!c.has_input(i) || ok) return;
  c.fail_shape("input " + std::to_string(i) + " '" + c.input(i).name + "' is " + dtype_name(c.in_dtype(i)) + ", expected " + expected);
}

bool is_float(DType d) { return d == DType::f32 || d == DType::f16 || d == DType::bf16; }

double finite_attr(const OpContext& c, const char* key, double fallback) {
  const double v = c.op().attr_float(key, fallback);
  if (!std::isfinite(v)) c.fail_shape(std::string("attribute '") + key + "' is " + std::to_string(v) + ", not a finite number");
  return v;
}

// memplan::RMSNormalization: X [.., normalized axes], scale covering the normalized axes; Y like X, InvStdDev with the
// normalized axes set to 1. The CPU and CUDA kernels take float32 only.
void rms_norm_op(OpContext& c) {
  require_dtype(c, 0, c.in_dtype(0) == DType::f32, "float32");
  require_dtype(c, 1, c.has_input(1) && c.in_dtype(1) == DType::f32, "float32");
  const Shape x = c.in_shape(0);
  if (x.empty()) c.fail_shape("input 'X' has rank 0; the normalized axes need rank 1 or more");
  const std::size_t axis = c.axis(c.op().attr_int("axis", -1), x.size(), "attribute 'axis'");
  const double eps = finite_attr(c, "epsilon", 1e-6);
  if (eps < 0.0) c.fail_shape("attribute 'epsilon' is " + std::to_string(eps) + ", expected 0 or more");
  if (c.has_input(1)) {
    const Shape normalized(x.begin() + static_cast<std::ptrdiff_t>(axis), x.end());
    const Shape s = c.in_shape(1);
    if (s.size() > normalized.size() || c.product(s) != c.product(normalized) || broadcast(c, s, normalized) != normalized)
      c.fail_shape("scale " + shape_str(s) + " does not cover the normalized axes " + shape_str(normalized));
  }
  c.set_output(0, DType::f32, x);
  Shape inv = x;
  for (std::size_t k = axis; k < inv.size(); ++k) inv[k] = 1;
  c.set_output(1, DType::f32, inv);
}

// memplan::FusedAttention: the geometry (layouts, heads, batch, dims, dropout, packed slots) as the kernels read it.
void fused_attention_op(OpContext& c) {
  for (std::size_t i = 0; i < 3; ++i) require_dtype(c, i, is_float(c.in_dtype(i)), "float32, float16 or bfloat16");
  c.require_same_dtype(0, 1);
  c.require_same_dtype(0, 2);
  (void)finite_attr(c, "scale", 1.0);
  const std::int64_t causal = c.op().attr_int("causal", 0);
  if (causal != 0 && causal != 1) c.fail_shape("attribute 'causal' is " + std::to_string(causal) + ", expected 0 or 1");
  const AttentionGeometry g = attention_geometry(c.op(), c.in_shape(0), c.in_shape(1), c.in_shape(2));
  if (c.has_input(3)) {
    const DType b = c.in_dtype(3);
    require_dtype(c, 3, is_float(b) || b == DType::boolean, "a float dtype or bool");
    const Shape bias = c.in_shape(3), scores{g.batch, g.q_heads, g.q_len, g.kv_len};
    if (bias.size() > 4 || broadcast(c, bias, scores) != scores)
      c.fail_shape("bias " + shape_str(bias) + " does not broadcast to the scores " + shape_str(scores));
  }
  c.set_output(0, c.in_dtype(0), head_shape(g.o_layout, g.batch, g.q_heads, g.q_len, g.v_head_dim));
  c.set_output(1, DType::f32, {g.batch, g.q_heads, g.q_len});
}

// memplan::FusedElementwise: the expression parsed and checked against the op's operands; the output is their
// numpy broadcast.
void fused_elementwise_op(OpContext& c) {
  if (!c.op().attr("expr")) c.fail_shape("attribute 'expr' is missing");
  FusedExpr e;
  try {
    e = FusedExpr::parse(c.op().attr_string("expr", ""));
  } catch (const Error& err) {
    c.fail_shape(err.what());
  }
  for (std::size_t i = 0; i < e.nodes.size(); ++i)
    if (e.nodes[i].op == ElemOp::input && (e.nodes[i].a >= c.num_inputs() || !c.has_input(e.nodes[i].a)))
      c.fail_shape("expression node " + std::to_string(i) + " reads operand " + std::to_string(e.nodes[i].a) + ", but the op has " +
                   std::to_string(c.num_inputs()) + " inputs");
  // Under autocast a group runs at its operands' widest float dtype (analysis/autocast.cpp), float32 otherwise.
  Shape out;
  DType dtype = DType::undefined;
  for (std::size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.has_input(i)) c.fail_shape("input " + std::to_string(i) + " is empty");
    require_dtype(c, i, is_float(c.in_dtype(i)), "float32, float16 or bfloat16");
    if (dtype == DType::undefined || c.in_dtype(i) == DType::f32) dtype = c.in_dtype(i);
    out = broadcast(c, out, c.in_shape(i));
  }
  c.set_output(0, dtype == DType::undefined ? DType::f32 : dtype, out);
}

// memplan::AllReduce: the sum over the ranks, in place: the output is the input's shape and dtype.
void all_reduce_op(OpContext& c) {
  const std::int64_t ranks = c.op().attr_int("ranks", 1);
  if (ranks < 1) c.fail_shape("attribute 'ranks' is " + std::to_string(ranks) + ", expected 1 or more");
  c.set_output(0, c.in_dtype(0), c.in_shape(0));
}

}  // namespace

void add_memplan_rules(RuleTable& t) {
  t[std::string(memplan_ops::kRMSNormalization)].shape = &rms_norm_op;
  t[std::string(memplan_ops::kFusedAttention)].shape = &fused_attention_op;
  t[std::string(memplan_ops::kFusedElementwise)].shape = &fused_elementwise_op;
  t[std::string(memplan_ops::kAllReduce)].shape = &all_reduce_op;
}

}  // namespace memplan::analysis::shape_detail
