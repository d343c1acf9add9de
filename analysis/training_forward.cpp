// The forward half of a training graph: which weights train, and forward ops made to output what backward saves.
#include <algorithm>
#include <set>

#include "analysis/autodiff.hpp"
#include "analysis/fused_ops.hpp"
#include "analysis/ops.hpp"
#include "analysis/training.hpp"

namespace memplan::analysis {
namespace {

bool is_op(const Op& op, std::string_view type) { return op.type == type && (op.domain.empty() || op.domain == "ai.onnx"); }

bool has_bit(std::uint32_t mask, std::size_t i) { return i < 32 && ((mask >> i) & 1u); }

// Input slots that hold a layer's parameters (PyTorch nn.Parameter in the exported module), as the op
// registry declares them; a rank-1 parameter slot (a Linear bias, a per-channel scale) needs rank 1.
bool parameter_slot(const Graph& g, const OpInfo& info, const Op& op, std::size_t i) {
  if (has_bit(info.parameter_inputs, i)) return true;
  if (!has_bit(info.rank1_parameter_inputs, i)) return false;
  const Tensor& x = g.tensors[op.inputs[i]];
  return x.rank_known && x.dims.size() == 1;
}

using autodiff::unique_name;

TensorId new_output(Graph& g, const std::string& base, DType dtype, const std::vector<std::int64_t>& shape) {
  Tensor t;
  t.name = unique_name(g, base);
  t.dtype = dtype;
  for (auto d : shape) t.dims.push_back(Dim::of(d));
  t.rank_known = true;
  return g.add_tensor(std::move(t));
}

// Keeps a present optional output, or makes a new tensor for it.
void ensure_output(Graph& g, Op& op, std::size_t i, const std::string& suffix, DType dtype,
                   const std::vector<std::int64_t>& shape) {
  if (op.outputs.size() <= i) op.outputs.resize(i + 1, kNoTensor);
  if (op.outputs[i] != kNoTensor) return;
  op.outputs[i] = new_output(g, g.tensors[op.outputs[0]].name + suffix, dtype, shape);
}

// X's shape with the normalized axes (from `axis` on) set to 1: LayerNorm's and RMSNorm's saved statistics.
std::vector<std::int64_t> normalized_stats_shape(const Graph& g, const Op& op) {
  auto s = g.tensors[op.inputs.at(0)].shape();
  const auto axis = op.attr_int("axis", -1);
  const auto a = static_cast<std::size_t>(axis < 0 ? axis + static_cast<std::int64_t>(s.size()) : axis);
  for (std::size_t k = a; k < s.size(); ++k) s[k] = 1;
  return s;
}

// Identity of a float weight: its output becomes a weight of its own (true; the Identity is then dropped).
bool weight_of_its_own(Graph& g, const Op& op) {
  const Tensor& src = g.tensors[op.inputs[0]];
  if (src.role != TensorRole::weight || src.producer != kNoOp || !dtype_is_float(src.dtype)) return false;
  Tensor& dst = g.tensors[op.outputs[0]];
  dst.role = TensorRole::weight;
  dst.data = src.data;
  dst.external_data = src.external_data;
  dst.external_location = src.external_location;
  dst.external_offset = src.external_offset;
  dst.external_length = src.external_length;
  return true;
}

// A normalization's statistics that its backward reads, as outputs (true when `op` is one): BatchNormalization
// becomes memplan BatchNormTraining (an inference-form one, from an eval-mode export, which the CLI warns about, trains
// as PyTorch would train the module: batch statistics, running statistics updated); LayerNormalization gets its
// Mean/InvStdDev, InstanceNormalization and GroupNormalization their float32 mean and inverse std per sample and
// channel, or group (as PyTorch's instance and group norms save them).
bool save_norm_statistics(Graph& g, Op& op) {
  if (is_op(op, "BatchNormalization")) {
    const Tensor& x = g.tensors[op.inputs.at(0)];
    const std::vector<std::int64_t> c{x.shape().at(1)};
    const DType dt = x.dtype;
    op.type = memplan_ops::kBatchNormTraining;
    op.domain = kMemplanDomain;
    op.attrs.erase("training_mode");
    ensure_output(g, op, 1, "/running_mean", dt, c);
    ensure_output(g, op, 2, "/running_var", dt, c);
    ensure_output(g, op, 3, "/saved_mean", dt, c);
    ensure_output(g, op, 4, "/saved_invstd", dt, c);
    // Running statistics are module buffers updated in place: persistent, never arena.
    g.tensors[op.outputs[1]].role = TensorRole::weight;
    g.tensors[op.outputs[2]].role = TensorRole::weight;
    return true;
  }
  if (is_op(op, "LayerNormalization")) {
    const auto s = normalized_stats_shape(g, op);
    const DType stash = op.attr_int("stash_type", 1) == 1 ? DType::f32 : g.tensors[op.outputs[0]].dtype;
    ensure_output(g, op, 1, "/mean", stash, s);
    ensure_output(g, op, 2, "/invstd", stash, s);
    return true;
  }
  if (is_op(op, "InstanceNormalization") || is_op(op, "GroupNormalization")) {
    auto s = g.tensors[op.inputs.at(0)].shape();
    if (op.type == "GroupNormalization") s = {s.at(0), op.attr_int("num_groups", 0)};
    for (std::size_t k = 2; k < s.size(); ++k) s[k] = 1;
    ensure_output(g, op, 1, "/mean", DType::f32, s);
    ensure_output(g, op, 2, "/invstd", DType::f32, s);
    return true;
  }
  return false;
}

// ONNX Dropout runs in training mode when input 2 is true; unknown (computed) counts as training.
bool dropout_training(const Graph& g, const Op& op) {
  TensorId m = op.input(2);
  if (m == kNoTensor) return false;
  const Tensor& t = g.tensors[m];
  if (!t.data) return true;
  auto v = t.data->as_int64();
  return !v.empty() && v[0] != 0;
}

// A training Dropout whose ratio is a constant 0 keeps every element and scales by 1/(1 - 0): the identity
// (PyTorch's F.dropout returns its input for p == 0 and saves no mask). Only when nothing reads the mask.
bool dropout_is_identity(const Graph& g, const Op& op) {
  const TensorId r = op.input(1);
  if (r == kNoTensor || !g.tensors[r].data) return false;
  const auto ratio = g.tensors[r].data->as_double();
  if (ratio.size() != 1 || ratio[0] != 0.0) return false;
  const TensorId mask = op.output(1);
  return mask == kNoTensor || (g.tensors[mask].consumers.empty() && !g.tensors[mask].is_graph_output);
}

}  // namespace

std::vector<bool> trainable_weights(const Graph& g, const TrainingOptions& opts) {
  const std::set<std::string> frozen(opts.frozen.begin(), opts.frozen.end());
  std::vector<bool> param(g.tensors.size(), false), never(g.tensors.size(), false);
  for (const Op& op : g.ops) {
    const OpInfo* info = op_registry().find(op);
    if (!info) continue;
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      TensorId t = op.inputs[i];
      if (t == kNoTensor) continue;
      // Slots that never train (running statistics, clip bounds) whatever their size.
      if (has_bit(info->frozen_inputs, i)) never[t] = true;
      else if (parameter_slot(g, *info, op, i)) param[t] = true;
    }
  }
  std::vector<bool> out(g.tensors.size(), false);
  for (TensorId t = 0; t < g.tensors.size(); ++t) {
    const Tensor& x = g.tensors[t];
    if (x.role != TensorRole::weight || x.producer != kNoOp || !dtype_is_float(x.dtype) || never[t] ||
        x.consumers.empty() || frozen.count(x.name) || !x.shape_known())
      continue;
    // A float constant with its value in the graph (a Constant node, a folded shape computation) only
    // trains in a parameter slot; an initializer whose bytes stayed on disk trains when it is not a scalar.
    const bool value_in_graph = x.data != nullptr && !x.external_data;
    out[t] = param[t] || (!value_in_graph && x.element_count() > 1);
  }
  return out;
}

namespace autodiff {

std::string unique_name(const Graph& g, const std::string& base) {
  if (g.find(base) == kNoTensor) return base;
  for (int k = 1;; ++k)
    if (std::string n = base + "#" + std::to_string(k); g.find(n) == kNoTensor) return n;
}

// Rewrites the forward ops in place (docs/saved-tensors.md): Identity of a weight becomes a weight of
// its own (exporters re-create deduplicated parameters that way, and each has its own gradient);
// BatchNormalization in training mode becomes memplan BatchNormTraining with saved mean and invstd;
// LayerNormalization, MaxPool and training Dropout get their optional Mean/InvStdDev, Indices, mask (a
// Dropout of constant ratio 0 whose mask nothing reads becomes an Identity instead);
// InstanceNormalization and GroupNormalization their float32 mean and inverse std per sample and channel or group
// (outputs 1 and 2, as PyTorch's instance and group norms save them); memplan RMSNormalization its InvStdDev;
// memplan FusedAttention gets its per-row logsumexp (float32 [B, Hq, Sq]), which its backward reads.
void prepare_forward(Graph& g) {
  std::vector<bool> drop(g.ops.size(), false);
  for (OpId o = 0; o < g.ops.size(); ++o) {
    Op& op = g.ops[o];
    if (op.domain == kMemplanDomain && op.type == memplan_ops::kRMSNormalization && op.output(0) != kNoTensor) {
      ensure_output(g, op, 1, "/invstd", DType::f32, normalized_stats_shape(g, op));
      continue;
    }
    if (op.domain == kMemplanDomain && op.type == memplan_ops::kFusedAttention && op.output(0) != kNoTensor) {
      const auto geo = attention_geometry(op, g.tensors[op.inputs.at(0)].shape(), g.tensors[op.inputs.at(1)].shape(),
                                          g.tensors[op.inputs.at(2)].shape());
      ensure_output(g, op, 1, "/lse", DType::f32, {geo.batch, geo.q_heads, geo.q_len});
      continue;
    }
    if (!(op.domain.empty() || op.domain == "ai.onnx")) continue;
    if (op.type == "Identity" && op.input(0) != kNoTensor && op.output(0) != kNoTensor) {
      drop[o] = weight_of_its_own(g, op);
      continue;
    }
    if (op.output(0) == kNoTensor) continue;
    if (save_norm_statistics(g, op)) continue;
    if (is_op(op, "MaxPool")) {
      ensure_output(g, op, 1, "/indices", DType::i64, g.tensors[op.outputs[0]].shape());
    } else if (is_op(op, "Dropout") && dropout_training(g, op) && dropout_is_identity(g, op)) {
      op.type = "Identity";  // a view: no mask, no copy; its gradient passes through
      op.attrs.clear();
      op.inputs.resize(1);
      op.outputs.resize(1);
    } else if (is_op(op, "Dropout") && dropout_training(g, op)) {
      ensure_output(g, op, 1, "/mask", DType::boolean, g.tensors[op.inputs.at(0)].shape());
    }
  }
  std::vector<Op> kept;
  kept.reserve(g.ops.size());
  for (OpId o = 0; o < g.ops.size(); ++o)
    if (!drop[o]) kept.push_back(std::move(g.ops[o]));
  g.ops = std::move(kept);
  g.relink();
}

}  // namespace autodiff
}  // namespace memplan::analysis
