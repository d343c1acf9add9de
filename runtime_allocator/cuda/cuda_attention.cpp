// memplan::FusedAttention and FusedAttentionGrad on the CUDA backend: what the kernels (attention.cu,
// attention_grad.cu) take, checked before a run, and the op's operands read through analysis::attention_geometry.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "analysis/fused_ops.hpp"
#include "runtime_allocator/cuda/attention.hpp"
#include "runtime_allocator/cuda/cuda_state.hpp"
#include "runtime_allocator/kernels/dropout_mask.hpp"

namespace memplan::runtime::cuda {

using analysis::DType;
using analysis::Graph;
using analysis::kNoTensor;
using analysis::Op;
using analysis::TensorId;

namespace {

bool is_grad(const Op& op) { return op.type == analysis::memplan_ops::kFusedAttentionGrad; }

// Input positions of Q, K, V and the bias in the forward (0..3) and the backward (1..3, 6).
struct Slots {
  std::size_t q, k, v, bias;
};
Slots slots_of(const Op& op) { return is_grad(op) ? Slots{1, 2, 3, 6} : Slots{0, 1, 2, 3}; }

std::vector<std::int64_t> score_dims(const analysis::AttentionGeometry& a) { return {a.batch, a.q_heads, a.q_len, a.kv_len}; }

// Why not, when an operand the kernels read or the output O is absent.
std::string absent_operand(const Op& op, const Slots& at) {
  for (std::size_t i : {at.q, at.k, at.v})
    if (op.input(i) == kNoTensor) return "input " + std::to_string(i) + " (Q, K or V) is absent";
  if (!is_grad(op)) return op.output(0) == kNoTensor ? "output 0 (O) is absent" : "";
  for (std::size_t i : {std::size_t{0}, std::size_t{4}, std::size_t{5}})
    if (op.input(i) == kNoTensor) return "input " + std::to_string(i) + " (dO, O or LSE) is absent";
  return {};
}

// Q, K, V (and dO, O) of one dtype: float32, bf16 or f16; LSE float32; each with a concrete shape.
std::string input_dtype_reason(const Graph& g, const Op& op, const Slots& at) {
  const DType dt = g.tensors[op.input(at.q)].dtype;
  if (dt != DType::f32 && !is_half(dt))
    return std::string("dtype ") + analysis::dtype_name(dt) + " of Q (float32, bfloat16 or float16)";
  std::vector<std::size_t> read = {at.q, at.k, at.v};
  if (is_grad(op)) read.insert(read.end(), {0, 4, 5});
  for (std::size_t i : read) {
    const auto& t = g.tensors[op.input(i)];
    const DType want = is_grad(op) && i == 5 ? DType::f32 : dt;
    if (t.dtype != want)
      return std::string("dtype ") + analysis::dtype_name(t.dtype) + " of input " + std::to_string(i) + " (" +
             analysis::dtype_name(want) + " expected)";
    if (!t.shape_known()) return "input " + std::to_string(i) + " has no concrete shape";
  }
  return {};
}

// O, dQ, dK, dV of Q's dtype `dt`; the forward's LSE float32.
std::string output_dtype_reason(const Graph& g, const Op& op, DType dt) {
  for (std::size_t i = 0; i < op.outputs.size() && i < 3; ++i) {
    const DType want = !is_grad(op) && i == 1 ? DType::f32 : dt;  // the forward's output 1 is LSE
    if (op.outputs[i] != kNoTensor && g.tensors[op.outputs[i]].dtype != want)
      return std::string("dtype ") + analysis::dtype_name(g.tensors[op.outputs[i]].dtype) + " of output " + std::to_string(i) +
             " (" + analysis::dtype_name(want) + " expected)";
  }
  return {};
}

// The bias: float32, bool or Q's dtype `dt`, broadcasting to the scores; dBias only of a float32 bias, in float32.
std::string bias_reason(const Graph& g, const Op& op, TensorId bias, const analysis::AttentionGeometry& a, DType dt) {
  const auto& bt = g.tensors[bias];
  if (bt.dtype != DType::f32 && bt.dtype != DType::boolean && bt.dtype != dt)
    return std::string("bias of dtype ") + analysis::dtype_name(bt.dtype) + " (float32, bool or Q's dtype only)";
  if (!bt.shape_known()) return "the bias has no concrete shape";
  const auto bd = bt.shape(), sd = score_dims(a);
  if (bd.size() > 4) return "bias of rank " + std::to_string(bd.size()) + " above 4";
  for (std::size_t k = 0; k < bd.size(); ++k) {
    const std::int64_t want = sd[4 - bd.size() + k];
    if (bd[k] != 1 && bd[k] != want) return "the bias does not broadcast to [B, Hq, Sq, Sk]";
  }
  if (!is_grad(op) || op.output(3) == kNoTensor) return {};
  if (bt.dtype == DType::boolean) return "dBias of a boolean mask";
  if (bt.dtype != DType::f32 || g.tensors[op.output(3)].dtype != DType::f32)
    return "dBias of a bias other than float32 (accumulated in float32)";
  return {};
}

// The geometry the kernels take: packed Q, K, V with one gradient, head dims up to kAttentionMaxHeadDim, int extents.
// ErrorKind::shape from attention_geometry when the operands disagree.
std::string geometry_reason(const Graph& g, const Op& op, const Slots& at, DType dt) {
  const auto a = analysis::attention_geometry(op, g.tensors[op.input(at.q)].shape(), g.tensors[op.input(at.k)].shape(),
                                              g.tensors[op.input(at.v)].shape());
  if (a.packed && is_grad(op) && (op.output(0) == kNoTensor || op.output(1) != kNoTensor || op.output(2) != kNoTensor))
    return "packed Q, K, V take one gradient, output 0";
  if (std::max(a.head_dim, a.v_head_dim) > kAttentionMaxHeadDim)
    return "head dim " + std::to_string(std::max(a.head_dim, a.v_head_dim)) + " above " + std::to_string(kAttentionMaxHeadDim);
  for (std::int64_t d : {a.batch, a.q_heads, a.q_len, a.kv_len})
    if (d > INT_MAX) return "a batch, head count or length above 2^31";
  const TensorId bias = op.input(at.bias);
  return bias == kNoTensor ? std::string() : bias_reason(g, op, bias, a, dt);
}

// Empty when the kernels run `op` as shaped in g, else why not. ErrorKind::shape from attention_geometry (operands
// that disagree) is returned as a reason too.
std::string reason_of(const Graph& g, const Op& op) {
  const Slots at = slots_of(op);
  if (std::string why = absent_operand(op, at); !why.empty()) return why;
  if (std::string why = input_dtype_reason(g, op, at); !why.empty()) return why;
  const DType dt = g.tensors[op.input(at.q)].dtype;
  if (std::string why = output_dtype_reason(g, op, dt); !why.empty()) return why;
  try {
    return geometry_reason(g, op, at, dt);
  } catch (const Error& e) {
    return e.what();
  }
}

AttnStorage storage_of(DType d) { return d == DType::bf16 ? kAttnBf16 : d == DType::f16 ? kAttnF16 : kAttnF32; }

AttnOperand operand(const ExecState& s, TensorId t, const analysis::HeadStrides& st) {
  if (t == kNoTensor) return {};
  const std::int64_t bytes = elem_bytes(s, t);
  return {s.ptr[t] + st.offset * bytes, st.batch, st.head, st.row, storage_of(s.tensor(t).dtype)};
}

bool aligned16(const AttnOperand& t) { return reinterpret_cast<std::uintptr_t>(t.data) % 16 == 0; }

AttentionParams params_of(ExecState& s, const Op& op) {
  if (const std::string why = reason_of(s.g, op); !why.empty())
    fail(ErrorKind::unsupported, "op '" + op.name + "' (" + op.type + ") on CUDA: " + why);
  const Slots at = slots_of(op);
  const auto a = analysis::attention_geometry(op, s.dims(op.input(at.q)), s.dims(op.input(at.k)), s.dims(op.input(at.v)));
  AttentionParams p;
  p.batch = static_cast<int>(a.batch);
  p.q_heads = static_cast<int>(a.q_heads);
  p.kv_heads = static_cast<int>(a.kv_heads);
  p.q_len = static_cast<int>(a.q_len);
  p.kv_len = static_cast<int>(a.kv_len);
  p.head_dim = static_cast<int>(a.head_dim);
  p.v_head_dim = static_cast<int>(a.v_head_dim);
  p.q = operand(s, op.input(at.q), a.q);
  p.k = operand(s, op.input(at.k), a.k);
  p.v = operand(s, op.input(at.v), a.v);
  p.scale = static_cast<float>(a.scale);
  p.causal = a.causal;
  if (a.dropout_ratio > 0.0) {
    p.dropout = true;
    p.dropout_key = step_key(a.seed);
    p.dropout_threshold = dropout_threshold(static_cast<float>(a.dropout_ratio));
    p.dropout_scale = 1.0f / (1.0f - static_cast<float>(a.dropout_ratio));
  }
  if (const TensorId bias = op.input(at.bias); bias != kNoTensor) {
    p.bias = s.ptr[bias];
    p.bias_is_mask = s.tensor(bias).dtype == DType::boolean;
    p.bias_storage = storage_of(s.tensor(bias).dtype);
    const auto st = broadcast_strides(s.dims(bias), score_dims(a));
    std::copy(st.begin(), st.end(), p.bias_strides);
    p.dbias_elements = static_cast<std::int64_t>(s.tensor(bias).element_count());
  }
  return p;
}

bool vec4_ok(const AttentionParams& p) {
  if (p.head_dim % 4 != 0 || p.v_head_dim % 4 != 0) return false;
  for (const AttnOperand* t : {&p.q, &p.k, &p.v, &p.o, &p.d_o, &p.dq, &p.dk, &p.dv})
    if (!aligned16(*t) || t->storage != kAttnF32) return false;
  return true;
}

void run_forward(ExecState& s, const Op& op) {
  AttentionParams p = params_of(s, op);
  const auto a = analysis::attention_geometry(op, s.dims(op.inputs[0]), s.dims(op.inputs[1]), s.dims(op.inputs[2]));
  p.o = operand(s, op.outputs[0], a.o);
  p.lse = op.output(1) == kNoTensor ? nullptr : s.f32(op.output(1));
  p.vec4 = vec4_ok(p);
  attention_forward(p, s.ctx.stream());
}

void run_backward(ExecState& s, const Op& op) {
  AttentionParams p = params_of(s, op);
  const auto a = analysis::attention_geometry(op, s.dims(op.inputs[1]), s.dims(op.inputs[2]), s.dims(op.inputs[3]));
  p.d_o = operand(s, op.inputs[0], a.o);
  p.o = operand(s, op.inputs[4], a.o);
  p.lse = s.f32(op.inputs[5]);
  p.dq = operand(s, op.output(0), a.q);
  // Packed: the one gradient of the one input, each slot written by its own kernel.
  p.dk = operand(s, op.output(a.packed ? 0 : 1), a.k);
  p.dv = operand(s, op.output(a.packed ? 0 : 2), a.v);
  p.dbias = op.output(3) == kNoTensor ? nullptr : s.f32(op.output(3));
  p.vec4 = vec4_ok(p);
  const std::size_t scratch = attention_backward_scratch_bytes(p);
  attention_backward(p, s.ctx.stream(), scratch ? s.ctx.scratch(scratch) : nullptr);
}

}  // namespace

std::string attention_unsupported_reason(const Graph& g, const Op& op) { return reason_of(g, op); }

void run_fused_attention(ExecState& s, const Op& op) {
  if (is_grad(op)) run_backward(s, op);
  else run_forward(s, op);
}

}  // namespace memplan::runtime::cuda
