// apply_autocast: PyTorch's autocast policies per op, output dtypes, and the Casts (weights' cached once).
#include "analysis/autocast.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <string_view>
#include <utility>

#include "analysis/autodiff.hpp"
#include "analysis/fused_expr.hpp"
#include "analysis/ops.hpp"

namespace memplan::analysis {
namespace {


// FusedElementwise: float32 when its expression holds an op of the fp32 list (a tanh GELU's pow, a
// softmax's exp), else its inputs' dtype, as the ops it replaced ran one by one.
AutocastPolicy fused_policy(const Op& op) {
  const Attribute* e = op.attr("expr");
  if (!e) return AutocastPolicy::promote;
  for (const ExprNode& n : FusedExpr::parse(e->s).nodes)
    if (n.op == ElemOp::exp || n.op == ElemOp::log || n.op == ElemOp::pow || n.op == ElemOp::reciprocal)
      return AutocastPolicy::fp32;
  return AutocastPolicy::promote;
}

// Input slots whose dtype the op does not compute in (they keep theirs): Dropout's ratio, Resize's roi and
// scales, batch norm's float32 scale, bias and statistics (cuDNN runs a bf16 input with them).
bool own_dtype_slot(const Op& op, std::size_t i) {
  if (op.type == "Dropout") return i >= 1;
  if (op.type == "Resize" || op.type == "Upsample") return i >= 1;
  if (op.type == "BatchNormalization" || op.type == memplan_ops::kBatchNormTraining) return i >= 1;
  return false;
}

// Outputs that keep the dtype the graph gave them: saved statistics (float32 as PyTorch keeps them) of
// normalizations and attention's logsumexp.
bool own_dtype_output(const Op& op, std::size_t i) {
  if (i == 0) return false;
  const OpInfo* info = op_registry().find(op);
  return (info && info->kind == OpKind::normalization) || op.type == memplan_ops::kFusedAttention;
}

bool is_float(const Graph& g, TensorId t) { return t != kNoTensor && dtype_is_float(g.tensors[t].dtype); }

bool is_initializer(const Tensor& t) { return t.role == TensorRole::weight && t.producer == kNoOp; }

// PyTorch's wrapped numbers and 0-dim tensors do not take part in type promotion.
bool promotes(const Tensor& t) {
  if (t.rank_known && t.dims.empty()) return false;
  const bool constant = t.data != nullptr || is_initializer(t);
  return !(constant && t.shape_known() && t.element_count() == 1);
}

DType wider(DType a, DType b) {
  if (a == DType::undefined) return b;
  if (b == DType::undefined || a == b) return a;
  if (a == DType::f64 || b == DType::f64) return DType::f64;
  return DType::f32;  // f32 with anything, or bf16 with f16
}

class Autocaster {
 public:
  Autocaster(Graph& g, DType low) : g_(g), low_(low), low_producer_(g.tensors.size(), false) {}

  AutocastStats run() {
    std::vector<Op> ops = std::move(g_.ops);
    g_.ops.clear();
    orig_ = &ops;
    for (Op& op : ops) {
      if (!weight_view_in_low(op)) visit(op);
      out_.push_back(std::move(op));
    }
    orig_ = nullptr;
    g_.ops = std::move(out_);
    g_.relink();
    return stats_;
  }

 private:
  // The dtype `op` computes in, or undefined when its dtypes are left alone.
  DType compute_dtype(const Op& op, AutocastPolicy p) const {
    if (p == AutocastPolicy::lower) return low_;
    if (p == AutocastPolicy::fp32) return DType::f32;
    DType all = DType::undefined, promoting = DType::undefined;
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      const TensorId t = op.inputs[i];
      if (!is_float(g_, t) || own_dtype_slot(op, i)) continue;
      all = wider(all, g_.tensors[t].dtype);
      if (promotes(g_.tensors[t])) promoting = wider(promoting, g_.tensors[t].dtype);
    }
    // An exported Linear's or Conv's bias, Add(low-precision matmul output, initializer), and a fused group of
    // that bias add with its activation (GELU, ReLU): when the float inputs are low-precision op outputs and
    // initializers only, the op runs low, as F.linear's output and the activation after it did.
    if ((op.type == "Add" && op.inputs.size() == 2) || op.type == memplan_ops::kFusedElementwise) {
      DType low = DType::undefined;
      bool other = false;
      for (std::size_t i = 0; i < op.inputs.size(); ++i) {
        const TensorId t = op.inputs[i];
        if (!is_float(g_, t) || own_dtype_slot(op, i)) continue;
        if (t < low_producer_.size() && low_producer_[t]) low = g_.tensors[t].dtype;
        else if (!is_initializer(g_.tensors[t]) && promotes(g_.tensors[t])) other = true;
      }
      if (low != DType::undefined && !other) return low;
    }
    return promoting != DType::undefined ? promoting : all;
  }

  AutocastPolicy policy_of(const Op& op) const {
    // The ops of an unrolled LSTM, GRU or RNN run as PyTorch's one recurrent kernel, which autocast lowers whole
    // (its inputs, states and weights cast; every gate in low precision).
    const bool recurrent = op.lowered_from == "LSTM" || op.lowered_from == "GRU" || op.lowered_from == "RNN";
    const AutocastPolicy p = recurrent ? AutocastPolicy::lower : autocast_policy(op);
    if (p == AutocastPolicy::keep) return p;
    for (std::size_t i = 0; i < op.inputs.size(); ++i)
      if (is_float(g_, op.inputs[i]) && !own_dtype_slot(op, i)) return p;
    return AutocastPolicy::keep;  // no float input: its outputs' dtypes are its own (ConstantOfShape, Range)
  }

  // Exporters split F.linear(x, W) into MatMul(x, Transpose(W)); autocast cast W itself (a leaf: cached)
  // and transposed the copy. So a view or layout op of an initializer read only by low-precision ops runs on
  // the weight's cached low-precision copy.
  bool weight_view_in_low(Op& op) {
    const OpInfo* info = op_registry().find(op);
    if (!info || (info->kind != OpKind::view && info->kind != OpKind::layout) || op.outputs.size() != 1) return false;
    const TensorId w = op.input(0), y = op.output(0);
    if (!is_float(g_, w) || !is_initializer(g_.tensors[w]) || !is_float(g_, y)) return false;
    for (std::size_t i = 1; i < op.inputs.size(); ++i)
      if (is_float(g_, op.inputs[i])) return false;
    const auto& readers = g_.tensors[y].consumers;
    if (readers.empty() || g_.tensors[y].is_graph_output) return false;
    for (OpId c : readers)
      if (autocast_policy((*orig_)[c]) != AutocastPolicy::lower) return false;
    op.inputs[0] = cast(op, w, low_);
    g_.tensors[y].dtype = low_;
    return true;
  }

  void visit(Op& op) {
    const AutocastPolicy p = policy_of(op);
    if (p == AutocastPolicy::keep) return;
    const DType to = compute_dtype(op, p);
    if (to == DType::undefined) return;
    stats_.lower_ops += p == AutocastPolicy::lower;
    stats_.fp32_ops += p == AutocastPolicy::fp32;
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      const TensorId t = op.inputs[i];
      if (!is_float(g_, t) || own_dtype_slot(op, i) || g_.tensors[t].dtype == to) continue;
      if (p == AutocastPolicy::promote && !promotes(g_.tensors[t])) continue;  // a scalar read as it is
      op.inputs[i] = cast(op, t, to);
    }
    // Float outputs follow the compute dtype, except saved statistics the op keeps in float32.
    for (std::size_t i = 0; i < op.outputs.size(); ++i) {
      const TensorId t = op.outputs[i];
      if (!is_float(g_, t) || own_dtype_output(op, i)) continue;
      g_.tensors[t].dtype = to;
      if (t >= low_producer_.size()) low_producer_.resize(t + 1, false);
      low_producer_[t] = p == AutocastPolicy::lower;
    }
  }

  // The tensor `op` reads instead of `t` in dtype `to`: a weight's cached cast, or a cast of its own.
  TensorId cast(const Op& reader, TensorId t, DType to) {
    const bool weight = is_initializer(g_.tensors[t]);
    if (weight) {
      auto it = cache_.find({t, to});
      if (it != cache_.end()) return it->second;
    }
    const Tensor& src = g_.tensors[t];
    Tensor c;
    c.name = autodiff::unique_name(g_, weight ? src.name + "/autocast_" + dtype_name(to)
                                              : reader.name + "/autocast/" + src.name);
    c.dtype = to;
    c.dims = src.dims;
    c.rank_known = src.rank_known;
    const std::string cname = c.name;
    const TensorId id = g_.add_tensor(std::move(c));
    Op op;
    op.name = cname + "/Cast";
    op.type = "Cast";
    op.lowered_from = std::string(kAutocastCast);
    op.inputs = {t};
    op.outputs = {id};
    Attribute a;
    a.kind = Attribute::Kind::i;
    a.i = static_cast<std::int64_t>(to);
    op.attrs["to"] = a;
    op.phase = Phase::forward;
    out_.push_back(std::move(op));
    if (weight) {
      cache_[{t, to}] = id;
      ++stats_.weight_casts;
    } else {
      ++stats_.activation_casts;
    }
    return id;
  }

  Graph& g_;
  DType low_;
  std::vector<bool> low_producer_;  // per tensor: made by a low-precision op
  std::map<std::pair<TensorId, DType>, TensorId> cache_;
  std::vector<Op> out_;
  const std::vector<Op>* orig_ = nullptr;  // the ops being rewritten (consumer ids index them)
  AutocastStats stats_;
};

}  // namespace

const char* autocast_policy_name(AutocastPolicy p) noexcept {
  switch (p) {
    case AutocastPolicy::lower: return "lower";
    case AutocastPolicy::fp32: return "fp32";
    case AutocastPolicy::promote: return "promote";
    case AutocastPolicy::keep: return "keep";
  }
  return "?";
}

AutocastPolicy autocast_policy(const Op& op) {
  const bool onnx = op.domain.empty() || op.domain == "ai.onnx";
  const bool mine = op.domain == kMemplanDomain;
  if (!onnx && !mine) return AutocastPolicy::keep;
  if (mine && op.type == memplan_ops::kFusedElementwise) return fused_policy(op);
  const OpInfo* info = op_registry().find(op);
  return info ? info->autocast : AutocastPolicy::promote;
}

AutocastStats apply_autocast(Graph& g, DType low) {
  if (low != DType::bf16 && low != DType::f16)
    fail(ErrorKind::usage, std::string("autocast to ") + dtype_name(low) + ": only bfloat16 and float16");
  return Autocaster(g, low).run();
}

}  // namespace memplan::analysis
