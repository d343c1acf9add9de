// TEMPORARY stub of the op registry for the opscli branch until the registry branch lands. DELETE.
#include "analysis/ops.hpp"

#include <vector>

#include "analysis/error.hpp"

namespace memplan::analysis {
namespace {
double zero_flops(const Graph&, const Op&) { return 0.0; }
std::vector<OpInfo> make() {
  std::vector<OpInfo> v;
  auto add = [&](std::string_view d, std::string_view t, OpKind k, GradKind gk, bool det, bool declared) {
    OpInfo i;
    i.id = static_cast<OpTypeId>(v.size());
    i.domain = d;
    i.type = t;
    i.kind = k;
    i.declared_shapes = declared;
    i.flops = &zero_flops;
    i.grad_kind = gk;
    i.deterministic = det;
    i.summary = "stub";
    v.push_back(i);
  };
  add("", "Abs", OpKind::elementwise, GradKind::none, true, false);
  add("", "Add", OpKind::elementwise, GradKind::rule, true, false);
  add("", "And", OpKind::elementwise, GradKind::not_differentiable, true, false);
  add("", "AveragePool", OpKind::elementwise, GradKind::rule, true, false);
  add("", "BatchNormalization", OpKind::elementwise, GradKind::none, true, false);
  add("", "Cast", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Ceil", OpKind::elementwise, GradKind::not_differentiable, true, false);
  add("", "Celu", OpKind::elementwise, GradKind::none, true, false);
  add("", "Clip", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Concat", OpKind::elementwise, GradKind::rule, true, false);
  add("", "ConstantOfShape", OpKind::elementwise, GradKind::not_differentiable, true, false);
  add("", "Conv", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Cos", OpKind::elementwise, GradKind::none, true, false);
  add("", "Div", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Dropout", OpKind::elementwise, GradKind::rule, false, false);
  add("", "Elu", OpKind::elementwise, GradKind::none, true, false);
  add("", "Equal", OpKind::elementwise, GradKind::not_differentiable, true, false);
  add("", "Erf", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Exp", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Expand", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Flatten", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Floor", OpKind::elementwise, GradKind::not_differentiable, true, false);
  add("", "Gather", OpKind::elementwise, GradKind::rule, true, false);
  add("", "GatherElements", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Gelu", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Gemm", OpKind::elementwise, GradKind::rule, true, false);
  add("", "GlobalAveragePool", OpKind::elementwise, GradKind::rule, true, false);
  add("", "GlobalMaxPool", OpKind::elementwise, GradKind::none, true, false);
  add("", "Greater", OpKind::elementwise, GradKind::not_differentiable, true, false);
  add("", "GreaterOrEqual", OpKind::elementwise, GradKind::not_differentiable, true, false);
  add("", "HardSigmoid", OpKind::elementwise, GradKind::none, true, false);
  add("", "HardSwish", OpKind::elementwise, GradKind::none, true, false);
  add("", "Identity", OpKind::elementwise, GradKind::rule, true, false);
  add("", "IsNaN", OpKind::elementwise, GradKind::not_differentiable, true, false);
  add("", "LayerNormalization", OpKind::elementwise, GradKind::rule, true, false);
  add("", "LeakyRelu", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Less", OpKind::elementwise, GradKind::not_differentiable, true, false);
  add("", "LessOrEqual", OpKind::elementwise, GradKind::not_differentiable, true, false);
  add("", "Log", OpKind::elementwise, GradKind::rule, true, false);
  add("", "LogSoftmax", OpKind::elementwise, GradKind::rule, true, false);
  add("", "MatMul", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Max", OpKind::elementwise, GradKind::none, true, false);
  add("", "MaxPool", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Min", OpKind::elementwise, GradKind::none, true, false);
  add("", "Mish", OpKind::elementwise, GradKind::none, true, false);
  add("", "Mul", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Neg", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Not", OpKind::elementwise, GradKind::not_differentiable, true, false);
  add("", "Or", OpKind::elementwise, GradKind::not_differentiable, true, false);
  add("", "PRelu", OpKind::elementwise, GradKind::none, true, false);
  add("", "Pow", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Reciprocal", OpKind::elementwise, GradKind::none, true, false);
  add("", "ReduceMax", OpKind::elementwise, GradKind::none, true, false);
  add("", "ReduceMean", OpKind::elementwise, GradKind::rule, true, false);
  add("", "ReduceMin", OpKind::elementwise, GradKind::none, true, false);
  add("", "ReduceProd", OpKind::elementwise, GradKind::none, true, false);
  add("", "ReduceSum", OpKind::elementwise, GradKind::rule, true, false);
  add("", "ReduceSumSquare", OpKind::elementwise, GradKind::none, true, false);
  add("", "Relu", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Reshape", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Round", OpKind::elementwise, GradKind::not_differentiable, true, false);
  add("", "Selu", OpKind::elementwise, GradKind::none, true, false);
  add("", "Shape", OpKind::elementwise, GradKind::not_differentiable, true, false);
  add("", "Sigmoid", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Sign", OpKind::elementwise, GradKind::not_differentiable, true, false);
  add("", "Sin", OpKind::elementwise, GradKind::none, true, false);
  add("", "Slice", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Softmax", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Softplus", OpKind::elementwise, GradKind::none, true, false);
  add("", "Split", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Sqrt", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Squeeze", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Sub", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Sum", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Tanh", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Tile", OpKind::elementwise, GradKind::none, true, false);
  add("", "Transpose", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Unsqueeze", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Where", OpKind::elementwise, GradKind::rule, true, false);
  add("memplan", "AdamStep", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "AdamUpdate", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "AveragePoolGrad", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "BatchNormGrad", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "BatchNormTraining", OpKind::elementwise, GradKind::rule, true, true);
  add("memplan", "BroadcastTo", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "ClipGrad", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "ConvGradBias", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "ConvGradInput", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "ConvGradWeight", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "DivGradB", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "DropoutGrad", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "ErfGrad", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "FusedElementwise", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "GatherGrad", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "GeluGrad", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "LayerNormGrad", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "LeakyReluGrad", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "LogSoftmaxGrad", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "MSELoss", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "MSELossGrad", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "MatMulGradA", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "MatMulGradB", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "MaxPoolGrad", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "MomentumUpdate", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "PowGradBase", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "PowGradExponent", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "ReduceSumTo", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "ReluGrad", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "SGDUpdate", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "SigmoidGrad", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "SliceGrad", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "SoftmaxGrad", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "SplitGrad", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "SqrtGrad", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "SwapIn", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "SwapOut", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "TanhGrad", OpKind::elementwise, GradKind::none, true, true);
  add("memplan", "WhereGrad", OpKind::elementwise, GradKind::none, true, true);
  return v;
}
const std::vector<OpInfo>& table() {
  static const std::vector<OpInfo> t = make();
  return t;
}
}  // namespace

const char* op_kind_name(OpKind k) noexcept {
  static const char* n[] = {"view", "elementwise", "reduction", "normalization", "layout", "matmul", "convolution",
                            "pooling", "random", "shape", "loss", "optimizer", "memory", "fused"};
  return n[static_cast<int>(k)];
}
const char* grad_kind_name(GradKind k) noexcept {
  static const char* n[] = {"rule", "not_differentiable", "none"};
  return n[static_cast<int>(k)];
}
const OpInfo* OpRegistry::find(std::string_view domain, std::string_view type) const noexcept {
  if (domain == "ai.onnx") domain = "";
  for (const auto& i : table())
    if (i.domain == domain && i.type == type) return &i;
  return nullptr;
}
const OpInfo& OpRegistry::at(const Op& op, std::string_view needed_for) const {
  if (auto* i = find(op)) return *i;
  fail(ErrorKind::unsupported, "op '" + op.name + "' (" + op.type + "): unknown, needed for " + std::string(needed_for));
}
std::span<const OpInfo> OpRegistry::all() const noexcept { return table(); }
const OpRegistry& op_registry() {
  static const OpRegistry r;
  return r;
}
}  // namespace memplan::analysis
