// The op registry's table: per op type its kind, FLOP formula, in-place and training facts, and one line saying what it does.
#include "analysis/ops_detail.hpp"

#include <string>

namespace memplan::analysis::ops_detail {
namespace {

using K = OpKind;

OpSpec onnx(std::string_view type, OpKind kind, FlopsFn flops, std::string_view summary) {
  OpSpec s;
  s.type = type;
  s.kind = kind;
  s.flops = flops;
  s.summary = summary;
  return s;
}
OpSpec mine(std::string_view type, OpKind kind, FlopsFn flops, std::string_view summary) {
  OpSpec s = onnx(type, kind, flops, summary);
  s.domain = kMemplanDomain;
  return s;
}
OpSpec inplace(OpSpec s, std::uint32_t inputs) {
  s.inplace_inputs = inputs;
  return s;
}
OpSpec inplace_fn(OpSpec s, InplaceFn fn) {
  s.inplace = fn;
  return s;
}
// Output k rewrites input j in place (pairs {k, j}): an optimizer's updated weight and state.
OpSpec rewrites(OpSpec s, std::initializer_list<std::pair<int, int>> pairs) {
  for (auto [k, j] : pairs) s.rewrites.at(static_cast<std::size_t>(k)) = static_cast<std::int8_t>(j);
  return s;
}
// The operand slots of a memplan op's schema (OpArity): at most max_in / max_out, the masked slots required.
OpSpec slots(OpSpec s, std::uint8_t max_in, std::uint32_t required_in, std::uint8_t max_out, std::uint32_t required_out) {
  s.arity = {max_in, max_out, required_in, required_out, true};
  return s;
}
OpSpec workspace(OpSpec s) {
  s.uses_workspace = true;
  return s;
}
OpSpec identity_in_inference(OpSpec s) {
  s.identity_in_inference = true;
  return s;
}
OpSpec nondiff(OpSpec s) {
  s.not_differentiable = true;
  return s;
}
// Training facts: inputs that hold a layer's parameters, inputs that never train, and inputs that are
// parameters when they have rank 1 (a Linear bias, a per-channel scale).
OpSpec params(OpSpec s, std::uint32_t parameter, std::uint32_t frozen = 0, std::uint32_t rank1 = 0) {
  s.parameter_inputs = parameter;
  s.frozen_inputs = frozen;
  s.rank1_parameter_inputs = rank1;
  return s;
}

constexpr std::uint32_t kAllInputs = 0xffffffffu;
constexpr std::uint32_t kBut0 = ~1u;  // every input but input 0

const FlopsFn e1 = &per_element<1>;

// torch.autocast's lists (ATen/autocast_mode.h) as facts of the ONNX/memplan ops their aten ops export to; every other
// op's policy follows from its kind (OpInfo::autocast). Cast keeps its own dtypes.
void set_autocast(std::vector<OpSpec>& t) {
  // lower_precision_fp: convolutions, prelu, addmm/mm/matmul/bmm/baddbmm/linear, einsum, SDPA.
  static constexpr std::string_view lower[] = {"Conv", "ConvTranspose", "PRelu", "MatMul", "Gemm", "Einsum", "Attention",
                                               memplan_ops::kMatMulT, memplan_ops::kFusedAttention};
  // fp32 (exp, log*, reciprocal, rsqrt, pow, trig, softplus, layer_norm, group_norm, norms, losses, logsumexp,
  // upsample_*) and fp32_set_opt_dtype (softmax, log_softmax, sum, prod, cumsum, cumprod, vector/matrix norms);
  // RMSNormalization: F.rms_norm upcasts and multiplies by the float32 weight.
  static constexpr std::string_view fp32[] = {
      "Exp", "Log", "Reciprocal", "Pow", "Acos", "Asin", "Cosh", "Sinh", "Tan", "Softplus", "LayerNormalization", "GroupNormalization",
      "Softmax", "LogSoftmax", "ReduceSum", "ReduceProd", "ReduceSumSquare",
      "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "CumSum", "Resize", "Upsample",
      "SoftmaxCrossEntropyLoss", memplan_ops::kRMSNormalization};
  // (norm and nll_loss join the list with the ops they export to, LpNormalization and NegativeLogLikelihoodLoss, when
  // the table has them.)
  static constexpr std::string_view keep[] = {"Cast", "CastLike"};
  auto set = [&t](std::span<const std::string_view> types, AutocastPolicy p) {
    for (std::string_view type : types) {
      bool found = false;
      for (OpSpec& s : t)
        if (s.type == type) s.autocast = p, found = true;
      if (!found) fail(ErrorKind::verification, "op registry: an autocast fact names '" + std::string(type) + "', which the table lacks");
    }
  };
  set(lower, AutocastPolicy::lower);
  set(fp32, AutocastPolicy::fp32);
  set(keep, AutocastPolicy::keep);
}

std::vector<OpSpec> build() {
  std::vector<OpSpec> t = {
      // Views: output 0 is input 0's bytes.
      [] {
        OpSpec s = onnx("Identity", K::view, no_flops, "y = x; a view in the forward pass, a copy of a gradient in backward");
        s.forward_only_view = true;
        return s;
      }(),
      onnx("Reshape", K::view, no_flops, "x under a new shape (a view)"),
      onnx("Flatten", K::view, no_flops, "x as a 2-D matrix split at `axis` (a view)"),
      onnx("Squeeze", K::view, no_flops, "x without the given size-1 axes (a view)"),
      onnx("Unsqueeze", K::view, no_flops, "x with new size-1 axes (a view)"),

      // Unary elementwise math.
      inplace(onnx("Relu", K::elementwise, e1, "max(x, 0)"), 1u),
      inplace(onnx("Sigmoid", K::elementwise, &per_element<4>, "1 / (1 + exp(-x))"), 1u),
      inplace(onnx("Tanh", K::elementwise, &per_element<4>, "tanh(x)"), 1u),
      inplace(onnx("Erf", K::elementwise, &per_element<8>, "the error function of x"), 1u),
      inplace(onnx("Gelu", K::elementwise, &per_element<10>, "x * Phi(x), exact or tanh-approximated"), 1u),
      inplace(onnx("Sqrt", K::elementwise, &per_element<4>, "sqrt(x)"), 1u),
      inplace(onnx("Exp", K::elementwise, &per_element<4>, "exp(x)"), 1u),
      inplace(onnx("Log", K::elementwise, &per_element<4>, "natural log of x"), 1u),
      inplace(onnx("Neg", K::elementwise, e1, "-x"), 1u),
      inplace(onnx("Abs", K::elementwise, e1, "|x|"), 1u),
      inplace(onnx("Reciprocal", K::elementwise, e1, "1 / x"), 1u),
      params(inplace(onnx("Clip", K::elementwise, e1, "x clamped to [min, max]"), 1u), 0, kBut0),
      inplace(onnx("LeakyRelu", K::elementwise, e1, "x, or alpha * x below 0"), 1u),
      inplace(onnx("Elu", K::elementwise, e1, "x, or alpha * (exp(x) - 1) below 0"), 1u),
      inplace(onnx("Selu", K::elementwise, e1, "gamma * elu(x, alpha)"), 1u),
      inplace(onnx("Celu", K::elementwise, e1, "max(0, x) + min(0, alpha * (exp(x / alpha) - 1))"), 1u),
      inplace(onnx("HardSigmoid", K::elementwise, e1, "max(0, min(1, alpha * x + beta))"), 1u),
      inplace(onnx("HardSwish", K::elementwise, e1, "x * hardsigmoid(x, 1/6, 1/2)"), 1u),
      inplace(onnx("Softplus", K::elementwise, e1, "log(1 + exp(x))"), 1u),
      inplace(onnx("Mish", K::elementwise, e1, "x * tanh(softplus(x))"), 1u),
      inplace(onnx("Sin", K::elementwise, e1, "sin(x)"), 1u),
      inplace(onnx("Cos", K::elementwise, e1, "cos(x)"), 1u),
      inplace(nondiff(onnx("Floor", K::elementwise, e1, "floor(x)")), 1u),
      inplace(nondiff(onnx("Ceil", K::elementwise, e1, "ceil(x)")), 1u),
      inplace(nondiff(onnx("Round", K::elementwise, e1, "x rounded to the nearest integer, halves to even")), 1u),
      inplace(nondiff(onnx("Sign", K::elementwise, e1, "-1, 0 or 1 by the sign of x")), 1u),
      inplace(nondiff(onnx("Not", K::elementwise, e1, "logical not of a bool tensor")), 1u),
      [] {
        OpSpec s = inplace(onnx("Cast", K::elementwise, no_flops, "x converted to dtype `to`"), 1u);
        s.inplace_across_dtypes = true;
        return s;
      }(),
      onnx("CastLike", K::elementwise, e1, "x converted to the dtype of input 1"),
      onnx("Tan", K::elementwise, e1, "tan(x)"),
      onnx("Asin", K::elementwise, e1, "asin(x)"),
      onnx("Acos", K::elementwise, e1, "acos(x)"),
      onnx("Atan", K::elementwise, e1, "atan(x)"),
      onnx("Sinh", K::elementwise, e1, "sinh(x)"),
      onnx("Cosh", K::elementwise, e1, "cosh(x)"),
      onnx("Asinh", K::elementwise, e1, "asinh(x)"),
      onnx("Acosh", K::elementwise, e1, "acosh(x)"),
      onnx("Atanh", K::elementwise, e1, "atanh(x)"),
      onnx("Softsign", K::elementwise, e1, "x / (1 + |x|)"),
      onnx("ThresholdedRelu", K::elementwise, e1, "x above alpha, else 0"),
      onnx("Shrink", K::elementwise, e1, "x -/+ bias outside [-lambd, lambd], else 0"),
      onnx("Swish", K::elementwise, e1, "x * sigmoid(alpha * x)"),
      onnx("QuickGelu", K::elementwise, e1, "x * sigmoid(1.702 x)"),
      onnx("BitwiseNot", K::elementwise, e1, "bitwise not of an integer tensor"),
      nondiff(onnx("IsNaN", K::elementwise, e1, "true where x is NaN")),
      nondiff(onnx("IsInf", K::elementwise, e1, "true where x is +/-infinity")),

      // Binary and variadic elementwise math (numpy broadcasting).
      params(inplace(onnx("Add", K::elementwise, e1, "a + b"), 3u), 0, 0, 3u),
      inplace(onnx("Sub", K::elementwise, e1, "a - b"), 3u),
      params(inplace(onnx("Mul", K::elementwise, e1, "a * b"), 3u), 0, 0, 3u),
      inplace(onnx("Div", K::elementwise, e1, "a / b"), 3u),
      params(inplace(onnx("Pow", K::elementwise, &per_element<8>, "a ^ b"), 3u), 0, kBut0),
      inplace(onnx("PRelu", K::elementwise, e1, "x, or slope * x below 0"), 3u),
      inplace(onnx("Max", K::elementwise, e1, "elementwise maximum of the inputs"), 3u),
      inplace(onnx("Min", K::elementwise, e1, "elementwise minimum of the inputs"), 3u),
      onnx("Sum", K::elementwise, e1, "elementwise sum of the inputs"),
      onnx("Mean", K::elementwise, e1, "elementwise mean of the inputs"),
      onnx("Mod", K::elementwise, e1, "a mod b"),
      onnx("BitShift", K::elementwise, e1, "a shifted left or right by b bits"),
      onnx("BitwiseAnd", K::elementwise, e1, "a & b"),
      onnx("BitwiseOr", K::elementwise, e1, "a | b"),
      onnx("BitwiseXor", K::elementwise, e1, "a ^ b (bitwise)"),
      nondiff(onnx("Equal", K::elementwise, e1, "a == b")),
      nondiff(onnx("Less", K::elementwise, e1, "a < b")),
      nondiff(onnx("LessOrEqual", K::elementwise, e1, "a <= b")),
      nondiff(onnx("Greater", K::elementwise, e1, "a > b")),
      nondiff(onnx("GreaterOrEqual", K::elementwise, e1, "a >= b")),
      nondiff(onnx("And", K::elementwise, e1, "logical a and b")),
      nondiff(onnx("Or", K::elementwise, e1, "logical a or b")),
      nondiff(onnx("Xor", K::elementwise, e1, "logical a xor b")),
      params(onnx("Where", K::elementwise, no_flops, "a where cond, else b"), 0, 1u),

      // Random draws.
      nondiff(onnx("RandomUniformLike", K::random, &per_element<2>, "uniform random numbers in [low, high) of the input's shape (stochastic depth)")),
      nondiff(onnx("RandomNormalLike", K::random, &per_element<8>, "normal random numbers (mean, scale) of the input's shape")),
      nondiff(onnx("RandomUniform", K::random, &per_element<2>, "uniform random numbers in [low, high) of the `shape` attribute")),
      nondiff(onnx("RandomNormal", K::random, &per_element<8>, "normal random numbers (mean, scale) of the `shape` attribute")),
      nondiff(onnx("Bernoulli", K::random, &per_element<2>, "1 with probability p (the input), else 0 (stochastic depth masks)")),
      params(identity_in_inference(inplace(onnx("Dropout", K::random, &per_element<2>, "zeroes random elements in training mode and scales the rest; also the mask"), 1u)), 0, kBut0),

      // Normalization.
      onnx("Attention", K::fused, onnx_attention_flops, "softmax(scale Q K^T + mask) V with causal mask and grouped heads (opset 23)"),
      onnx("Softmax", K::normalization, &per_element<5>, "exp(x) / sum(exp(x)) along `axis`"),
      onnx("LogSoftmax", K::normalization, &per_element<5>, "log(softmax(x)) along `axis`"),
      onnx("SoftmaxCrossEntropyLoss", K::loss, &per_element<5>,
           "cross-entropy of scores [N, C, ...] against labels (reduction, ignore_index); also log_prob (forward only)"),
      onnx("Hardmax", K::normalization, e1, "1 at the maximum along `axis`, 0 elsewhere"),
      params(onnx("LayerNormalization", K::normalization, &per_element<8>, "(x - mean) / std over the trailing axes, scaled and shifted"), 6u),
      params(inplace_fn(onnx("BatchNormalization", K::normalization, &per_element<4>, "per-channel normalization with running or batch statistics"),
                        batch_norm_inplace), 6u, 24u),
      params(onnx("InstanceNormalization", K::normalization, e1,
                  "per-sample, per-channel normalization, scaled and shifted; in training also the mean and inverse std per sample and channel"),
             6u),
      params(onnx("GroupNormalization", K::normalization, &per_element<8>,
                  "per-sample normalization over groups of `num_groups` channels, scaled and shifted per channel (per group before opset 21); in training also the mean and inverse std per sample and group"),
             6u),
      onnx("LRN", K::normalization, e1, "local response normalization across channels"),
      onnx("MeanVarianceNormalization", K::normalization, e1, "(x - mean) / std over `axes`"),

      // Matmuls and convolutions.
      params(onnx("MatMul", K::matmul, matmul_flops, "batched matrix product (numpy matmul)"), kAllInputs),
      params(onnx("Gemm", K::matmul, gemm_flops, "alpha * A' B' + beta * C with optional transposes"), 6u),
      onnx("Einsum", K::matmul, e1,
           "a tensor contraction in Einstein notation; lowered at import to Transpose/MatMul/ReduceSum ops unless it has an ellipsis or a diagonal"),
      params(workspace(onnx("Conv", K::convolution, conv_flops, "N-d convolution with groups, strides, dilations and pads")), 6u),
      params(workspace(onnx("ConvTranspose", K::convolution, conv_transpose_flops, "N-d transposed convolution (the input gradient of a Conv)")), 6u),

      // Pooling.
      onnx("MaxPool", K::pooling, pool_flops, "windowed maximum; also the argmax indices"),
      onnx("AveragePool", K::pooling, pool_flops, "windowed mean"),
      onnx("LpPool", K::pooling, e1, "windowed Lp norm"),
      onnx("GlobalAveragePool", K::reduction, reduction_flops, "mean over all spatial axes"),
      onnx("GlobalMaxPool", K::reduction, e1, "maximum over all spatial axes"),
      onnx("GlobalLpPool", K::reduction, e1, "Lp norm over all spatial axes"),

      // Reductions.
      onnx("ReduceSum", K::reduction, reduction_flops, "sum over `axes`"),
      onnx("ReduceMean", K::reduction, reduction_flops, "mean over `axes`"),
      onnx("ReduceMax", K::reduction, reduction_flops, "maximum over `axes`"),
      onnx("ReduceMin", K::reduction, reduction_flops, "minimum over `axes`"),
      onnx("ReduceProd", K::reduction, reduction_flops, "product over `axes`"),
      onnx("ReduceL1", K::reduction, reduction_flops, "sum of |x| over `axes`"),
      onnx("ReduceL2", K::reduction, reduction_flops, "sqrt of the sum of squares over `axes`"),
      onnx("ReduceLogSum", K::reduction, reduction_flops, "log of the sum over `axes`"),
      onnx("ReduceLogSumExp", K::reduction, reduction_flops, "log of the sum of exp over `axes`"),
      onnx("ReduceSumSquare", K::reduction, reduction_flops, "sum of squares over `axes`"),
      nondiff(onnx("ArgMax", K::reduction, e1, "index of the maximum along `axis`")),
      nondiff(onnx("ArgMin", K::reduction, e1, "index of the minimum along `axis`")),
      onnx("TopK", K::reduction, e1, "the K largest or smallest values along `axis` and their indices"),
      onnx("CumSum", K::reduction, e1, "running sum along an axis"),

      // Layout: bytes moved without arithmetic.
      onnx("Transpose", K::layout, no_flops, "axes permuted by `perm`"),
      onnx("Concat", K::layout, no_flops, "inputs joined along `axis`"),
      onnx("Split", K::layout, no_flops, "input cut along `axis` into the outputs"),
      onnx("Slice", K::layout, no_flops, "a strided window of x"),
      [] {
        OpSpec s = params(onnx("Gather", K::layout, no_flops, "entries of x picked along `axis` by indices (embedding lookups)"), 1u);
        s.gathers_input0 = true;
        return s;
      }(),
      onnx("GatherElements", K::layout, no_flops, "elements of x picked along `axis` by an index tensor"),
      onnx("GatherND", K::layout, e1, "slices of x picked by N-d indices"),
      onnx("ScatterND", K::layout, e1, "x with slices replaced at N-d indices"),
      onnx("ScatterElements", K::layout, e1, "x with elements replaced along `axis`"),
      onnx("Expand", K::layout, no_flops, "x broadcast to a shape"),
      onnx("Tile", K::layout, no_flops, "x repeated along each axis"),
      onnx("Pad", K::layout, no_flops, "x padded with a constant, edge or reflection"),
      onnx("Trilu", K::layout, e1, "the upper or lower triangle of the last two axes"),
      onnx("Resize", K::layout, e1, "x resampled (nearest, linear, cubic) to new sizes"),
      onnx("Upsample", K::layout, e1, "x resampled to larger sizes (opset < 10 Resize)"),

      // Shapes and constants.
      nondiff(onnx("Shape", K::shape, no_flops, "the shape of x as int64")),
      nondiff(onnx("Size", K::shape, e1, "the element count of x as int64")),
      onnx("Constant", K::shape, e1, "a constant tensor from an attribute"),
      nondiff(onnx("ConstantOfShape", K::shape, no_flops, "a tensor of a given shape filled with one value")),
      nondiff(onnx("Range", K::shape, e1, "start, start + delta, ... below limit")),
      nondiff(onnx("OneHot", K::layout, e1, "indices as one-hot vectors of `depth` along `axis`: values[1] there, values[0] elsewhere")),
      nondiff(onnx("NonZero", K::layout, e1,
                   "the indices of x's nonzero elements, int64 [rank, count]; a count that depends on the data is planned at x's element count")),
  };
  const std::vector<OpSpec> own = {
      // Gradients of elementwise ops.
      mine("ReluGrad", K::elementwise, &per_element<1>, "dX = dY where y > 0, else 0"),
      mine("LeakyReluGrad", K::elementwise, e1, "dX = dY, or alpha * dY where x < 0"),
      mine("ClipGrad", K::elementwise, &per_element<2>, "dX = dY where min <= x <= max, else 0"),
      mine("SigmoidGrad", K::elementwise, &per_element<3>, "dX = dY * y * (1 - y)"),
      mine("TanhGrad", K::elementwise, &per_element<3>, "dX = dY * (1 - y^2)"),
      mine("SqrtGrad", K::elementwise, &per_element<2>, "dX = dY / (2 y)"),
      mine("ErfGrad", K::elementwise, &per_element<8>, "dX = dY * 2/sqrt(pi) * exp(-x^2)"),
      mine("GeluGrad", K::elementwise, &per_element<12>, "dX = dY * gelu'(x)"),
      mine("DropoutGrad", K::elementwise, &per_element<2>, "dX = dY * mask / (1 - ratio)"),
      mine("DivGradB", K::elementwise, &per_element<3>, "dB = -dY * a / b^2 at the broadcast shape"),
      mine("PowGradBase", K::elementwise, &per_element<10>, "dA = dY * b * a^(b-1) at the broadcast shape"),
      mine("PowGradExponent", K::elementwise, &per_element<10>, "dB = dY * y * log(a) at the broadcast shape"),
      mine("WhereGrad", K::elementwise, no_flops, "dY where cond == select, else 0"),

      // Gradients of layers.
      workspace(mine("ConvGradInput", K::convolution, conv_grad_input_flops, "dX of a Conv from dY and W")),
      workspace(mine("ConvGradWeight", K::convolution, conv_grad_weight_flops, "dW of a Conv from dY and X")),
      mine("ConvGradBias", K::reduction, reduction_flops, "dB of a Conv: dY summed over all but the channel axis"),
      mine("MatMulGradA", K::matmul, matmul_grad_a_flops, "dA = dY B^T, reduced over broadcast batch axes"),
      mine("MatMulGradB", K::matmul, matmul_grad_b_flops, "dB = A^T dY, reduced over broadcast batch axes"),
      params(mine(memplan_ops::kMatMulT, K::matmul, matmul_t_flops,
                  "op(A) op(B), op a swap of the last two axes where trans_a / trans_b is set; batch axes broadcast and summed down to the output's"),
             kAllInputs),
      params(mine(memplan_ops::kBatchNormTraining, K::normalization, &per_element<8>, "BatchNormalization in training mode: batch statistics, running statistics updated, mean and inverse std saved"),
             6u, 24u),
      mine("BatchNormGrad", K::normalization, &per_element<12>, "dX, dScale, dBias of BatchNormTraining from its saved statistics"),
      mine("LayerNormGrad", K::normalization, &per_element<12>, "dX, dScale, dBias of LayerNormalization from its saved mean and inverse std"),
      slots(mine("GroupNormGrad", K::normalization, &per_element<12>,
                 "dX, dScale, dB of GroupNormalization (`num_groups`) and InstanceNormalization (num_groups = C) from X and the saved mean and inverse std per sample and group"),
            5, 31u, 3, 0u),
      mine("SoftmaxGrad", K::normalization, &per_element<4>, "dX = y * (dY - sum(dY * y)) along `axis`"),
      mine("LogSoftmaxGrad", K::normalization, &per_element<4>, "dX = dY - exp(y) * sum(dY) along `axis`"),
      mine("MaxPoolGrad", K::pooling, pool_grad_flops, "dX: dY scattered to the argmax of each window"),
      mine("AveragePoolGrad", K::pooling, pool_grad_flops, "dX: dY spread evenly over each window"),

      // Gradients of shape and layout ops.
      mine(memplan_ops::kReduceSumTo, K::reduction, reduction_flops, "x summed down to a broadcast operand's shape, times `scale`"),
      mine("BroadcastTo", K::reduction, reduction_flops, "x broadcast back over reduced axes, times `scale`"),
      mine("SliceGrad", K::layout, no_flops, "zeros with dY written into the sliced window"),
      mine("PadGrad", K::layout, e1,
           "dX of Pad in any mode (`mode`, `pads` per axis): each dY element added to the x element it read; zero where x was cropped"),
      mine(memplan_ops::kRoll, K::layout, no_flops, "x rolled by `shifts` along `axes` (torch.roll): y[c] = x[c - shift mod dim]"),
      mine("SplitGrad", K::layout, no_flops, "the split outputs' gradients joined along `axis`"),
      mine("GatherGrad", K::layout, no_flops, "zeros with dY rows added at the gathered indices"),
      mine("GatherElementsGrad", K::layout, no_flops, "zeros with dY elements added at the gathered indices"),
      mine("ResizeGrad", K::layout, e1,
           "dX of Resize/Upsample (nearest, linear, cubic): each dY element added to the input elements its output read, times their weights"),

      // Loss and optimizers.
      mine(memplan_ops::kMSELoss, K::loss, &per_element<3>, "mean of (y - target)^2"),
      mine("MSELossGrad", K::loss, &per_element<3>, "dY = 2 (y - target) / numel (times dloss when given: the loss scale)"),
      mine(memplan_ops::kCrossEntropyLoss, K::loss, &per_element<4>,
           "mean over labelled rows of logsumexp(y) - y[label] along `axis` (labels < 0 ignored); also the per-row logsumexp"),
      inplace(mine(memplan_ops::kCrossEntropyLossGrad, K::loss, &per_element<4>,
                   "dY = (exp(y - lse) - onehot(label)) / labelled rows (times dloss), from the logits and saved logsumexp"),
              1u),
      workspace(params(slots(mine(memplan_ops::kLinearCrossEntropy, K::loss, &linear_cross_entropy_flops,
                                  "loss = cross-entropy of X W (+ bias) against labels over chunks of `chunk` rows (mean over "
                                  "labelled rows), with dX, dW, dbias (float32) computed in the same pass"),
                             4, 0b0111u, 4, 0b0111u),
                       (1u << 1) | (1u << 3))),
      mine(memplan_ops::kSumLoss, K::loss, reduction_flops, "the sum of all elements of y (--loss none on a non-scalar output)"),
      mine(memplan_ops::kSumLossGrad, K::loss, e1, "dY = ones (times dloss when given): the gradient seed of the model's own loss"),
      rewrites(mine(memplan_ops::kSGDUpdate, K::optimizer, &per_element<4>, "in place: w -= lr * (dW + weight_decay * w); skipped when its found_inf input is set"), {{0, 0}}),
      rewrites(mine(memplan_ops::kMomentumUpdate, K::optimizer, &per_element<6>,
                    "in place (PyTorch SGD momentum): g = dW + weight_decay * w; v = momentum * v + g; w -= lr * v; skipped on found_inf"),
               {{0, 0}, {1, 2}}),
      rewrites(mine(memplan_ops::kAdamUpdate, K::optimizer, &per_element<16>,
                    "in place: Adam (L2 weight_decay) or AdamW (decoupled); moments updated, w -= lr * m^ / (sqrt(v^) + eps); skipped on found_inf"),
               {{0, 0}, {1, 2}, {2, 3}}),
      rewrites(mine(memplan_ops::kAdamStep, K::optimizer, one_flop, "in place: step += 1 (Adam's bias correction), unless its found_inf input is set"), {{0, 0}}),
      rewrites(mine(memplan_ops::kGradAccumulate, K::optimizer, &per_element<1>,
                    "in place: acc += dW (a gradient accumulated across micro-steps)"),
               {{0, 0}}),
      rewrites(inplace(mine(memplan_ops::kAmpUnscale, K::optimizer, &per_element<2>,
                            "in place (GradScaler unscale_): dW *= 1 / scale; found_inf = 1 if any dW is not finite (reset: starts at 0)"),
                       1u),
               {{0, 0}, {1, 2}}),
      rewrites(mine(memplan_ops::kAmpUpdateScale, K::optimizer, one_flop,
                    "in place (GradScaler update): scale *= backoff on found_inf, *= growth after growth_interval clean steps"),
               {{0, 0}, {1, 1}}),

      // Memory and fusion.
      mine(memplan_ops::kSwapOut, K::memory, e1, "copies a tensor from the device to host memory"),
      mine(memplan_ops::kSwapIn, K::memory, e1, "copies a swapped-out tensor back to the device"),
      slots(inplace(mine(memplan_ops::kAllReduce, K::layout, e1, "sums a tensor over the ranks of a group, in place (NCCL all-reduce)"), 1u),
            1, 1u, 1, 1u),
      mine(memplan_ops::kReduceScatter, K::layout, e1,
           "sums each input over the ranks of a group and keeps this rank's 1/N shard of it (NCCL reduce-scatter of a bucket)"),
      mine(memplan_ops::kAllGather, K::layout, no_flops,
           "each output: the N ranks' shards of its input concatenated (NCCL all-gather of a unit's parameters)"),
      slots(mine(memplan_ops::kFusedAttention, K::fused, attention_flops,
                 "softmax(scale Q K^T + bias) V with causal mask, GQA and replayed dropout; saves Q, K, V, O and one logsumexp per row"),
            4, 7u, 2, 1u),
      slots(mine(memplan_ops::kFusedAttentionGrad, K::fused, attention_grad_flops,
                 "dQ, dK, dV (and dBias) of FusedAttention, recomputing the scores tile by tile"),
            7, 63u, 4, 0u),
      slots(params(mine(memplan_ops::kRMSNormalization, K::normalization, &per_element<5>,
                        "x / sqrt(mean(x^2) + eps) * scale over the trailing axes; saves x and the inverse rms"),
                   2u),
            2, 1u, 2, 1u),
      slots(mine(memplan_ops::kRMSNormGrad, K::normalization, &per_element<10>, "dX, dScale of RMSNormalization from its saved inverse rms"),
            4, 11u, 2, 0u),
      [] {
        OpSpec s = slots(mine(memplan_ops::kFusedElementwise, K::fused, e1, "a chain of elementwise ops run as one kernel (expression in `expr`)"),
                         255, 1u, 1, 1u);
        s.inplace_any_input = true;
        // A rank-1 operand of a fused group is a bias or scale an Add or Mul read: it keeps training.
        s.rank1_parameter_inputs = 0xffffffffu;
        return s;
      }(),
  };
  t.insert(t.end(), own.begin(), own.end());
  set_autocast(t);
  return t;
}

}  // namespace

std::span<const OpSpec> op_specs() {
  static const std::vector<OpSpec> specs = build();
  return specs;
}

}  // namespace memplan::analysis::ops_detail
