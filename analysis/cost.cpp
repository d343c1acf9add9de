// FLOPs and bytes per op from concrete shapes: matmuls and convolutions exactly, the rest per element.
#include "analysis/cost.hpp"

#include <set>
#include <unordered_map>

namespace memplan::analysis {
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
double conv_flops(const std::vector<std::int64_t>& y, const std::vector<std::int64_t>& w) {
  if (y.size() < 2 || w.size() < 2) return 0.0;
  return 2.0 * product(y, 0, y.size()) * static_cast<double>(w[1]) * product(w, 2, w.size());
}

// Contraction length of a matmul whose left operand is `a` (its last dim).
double last_dim(const std::vector<std::int64_t>& a) { return a.empty() ? 1.0 : static_cast<double>(a.back()); }

// FLOPs per output element of ops that are not matmuls, convolutions or pure data movement.
double per_element(const std::string& type) {
  static const std::unordered_map<std::string, double> f = {
      {"Erf", 8}, {"ErfGrad", 8}, {"Gelu", 10}, {"GeluGrad", 12}, {"Sigmoid", 4}, {"SigmoidGrad", 3},
      {"Tanh", 4}, {"TanhGrad", 3}, {"Exp", 4}, {"Log", 4}, {"Pow", 8}, {"PowGradBase", 10}, {"PowGradExponent", 10},
      {"Sqrt", 4}, {"SqrtGrad", 2}, {"Softmax", 5}, {"LogSoftmax", 5}, {"SoftmaxGrad", 4}, {"LogSoftmaxGrad", 4},
      {"LayerNormalization", 8}, {"LayerNormGrad", 12}, {"BatchNormalization", 4}, {"BatchNormTraining", 8},
      {"BatchNormGrad", 12}, {"DivGradB", 3}, {"ReluGrad", 1}, {"ClipGrad", 2}, {"DropoutGrad", 2}, {"Dropout", 2},
      {"MSELoss", 3}, {"MSELossGrad", 3}, {"SGDUpdate", 2}, {"MomentumUpdate", 4}, {"AdamUpdate", 14},
  };
  auto it = f.find(type);
  return it == f.end() ? 1.0 : it->second;
}

bool data_movement(const std::string& type) {
  static const std::set<std::string> m = {"Transpose", "Concat", "Split", "SplitGrad", "Slice", "SliceGrad", "Gather",
                                          "GatherGrad", "GatherElements", "GatherElementsGrad", "Expand", "Cast",
                                          "Identity", "Pad", "Tile", "Shape", "ConstantOfShape", "Where", "WhereGrad"};
  return m.count(type) > 0;
}

bool is_view(const Op& op) {
  static const std::set<std::string> v = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"};
  return (op.domain.empty() && v.count(op.type)) || (op.type == "Identity" && op.phase == Phase::forward);
}

double flops_of(const Graph& g, const Op& op) {
  const std::string& t = op.type;
  const TensorId y = op.output(0);
  auto s = [&](std::size_t i) { return shape_of(g, op.input(i)); };
  if (t == "Conv") return conv_flops(shape_of(g, y), s(1)) + (op.input(2) != kNoTensor ? numel(g, y) : 0.0);
  if (t == "ConvGradInput") return conv_flops(s(0), s(1));
  if (t == "ConvGradWeight") return conv_flops(s(0), shape_of(g, y));
  if (t == "MatMul") return 2.0 * numel(g, y) * last_dim(s(0));
  if (t == "MatMulGradA") {  // dA = dY B^T: contraction over N, one M x K product per batch
    const auto b = s(1);
    return 2.0 * numel(g, op.input(0)) * (b.size() >= 2 ? static_cast<double>(b[b.size() - 2]) : last_dim(b));
  }
  if (t == "MatMulGradB") return 2.0 * numel(g, op.input(1)) * last_dim(s(0));
  if (t == "Gemm") {
    const auto a = s(0);
    const double k = a.size() == 2 ? static_cast<double>(op.attr_int("transA", 0) ? a[0] : a[1]) : 1.0;
    return 2.0 * numel(g, y) * k + (op.input(2) != kNoTensor ? numel(g, y) : 0.0);
  }
  if (t == "MaxPool" || t == "AveragePool" || t == "MaxPoolGrad" || t == "AveragePoolGrad") {
    const auto k = op.attr_ints("kernel_shape");
    const TensorId out = t.size() > 4 && t.substr(t.size() - 4) == "Grad" ? op.input(0) : y;
    return numel(g, out) * product(k, 0, k.size());
  }
  if (data_movement(t)) return 0.0;
  if (t.rfind("Reduce", 0) == 0 || t == "GlobalAveragePool" || t == "ConvGradBias" || t == "BroadcastTo")
    return std::max(numel(g, op.input(0)), numel(g, y));
  if (t == "AdamStep") return 1.0;
  // Elementwise and normalization ops: per element of the largest operand.
  double n = 0.0;
  for (TensorId x : op.inputs) n = std::max(n, numel(g, x));
  for (TensorId x : op.outputs) n = std::max(n, numel(g, x));
  return n * per_element(t);
}

}  // namespace

OpCost op_cost(const Graph& g, OpId id) {
  const Op& op = g.ops.at(id);
  OpCost c;
  if (is_view(op)) {
    c.launches = false;
    return c;
  }
  std::set<TensorId> seen;
  for (std::size_t i = 0; i < op.inputs.size(); ++i) {
    TensorId t = op.inputs[i];
    if (t == kNoTensor || !seen.insert(t).second) continue;
    std::uint64_t b = g.tensors[t].bytes();
    // An embedding lookup reads only the rows it gathers, not the whole table.
    if (op.type == "Gather" && i == 0 && op.output(0) != kNoTensor) b = std::min(b, g.tensors[op.outputs[0]].bytes());
    c.bytes_read = checked_add(c.bytes_read, b, "bytes read by op '" + op.name + "'");
  }
  for (TensorId t : op.outputs)
    if (t != kNoTensor) c.bytes_written = checked_add(c.bytes_written, g.tensors[t].bytes(), "bytes written by op '" + op.name + "'");
  c.flops = flops_of(g, op);
  return c;
}

}  // namespace memplan::analysis
