// The vocabulary of the op registry (ops.hpp) that its per-op table (ops_detail.hpp) is written in: kinds, how a
// gradient flows, and the per-op formula types. Includes nothing above the graph.
#pragma once

#include <cstdint>
#include <string_view>

#include "analysis/graph.hpp"

namespace memplan::analysis {

// What an op does to memory, in the words the planner and runtime use.
enum class OpKind : std::uint8_t {
  view,           // output 0 is input 0's bytes under another shape (Reshape, Flatten, Squeeze, Identity)
  elementwise,    // output element i from input elements i (numpy broadcasting): Add, Relu, Cast, Where
  reduction,      // folds axes: ReduceSum, GlobalAveragePool, ReduceSumTo
  normalization,  // BatchNorm, LayerNorm, Softmax and their gradients: reductions and elementwise in one
  layout,         // moves bytes without arithmetic: Transpose, Concat, Slice, Gather, Pad, Expand
  matmul,         // MatMul, Gemm and their gradients
  convolution,    // Conv and its gradients
  pooling,        // windowed reductions: MaxPool, AveragePool and their gradients
  random,         // draws random numbers: Dropout, RandomUniformLike, Bernoulli
  shape,          // computes shapes or constants: Shape, Size, ConstantOfShape, Range, Constant
  loss,           // memplan's losses
  optimizer,      // memplan's optimizer updates
  memory,         // memplan's SwapOut / SwapIn: copies between device and host
  fused,          // memplan's fused ops (FusedElementwise)
};
const char* op_kind_name(OpKind k) noexcept;

// How a gradient flows back through an op in a training graph.
enum class GradKind : std::uint8_t {
  rule,                // a backward rule (`OpInfo::grad`) emits the backward ops
  not_differentiable,  // its float outputs carry no gradient (comparisons, shapes, random draws, rounding)
  none,                // no rule: building a training graph that needs one is ErrorKind::unsupported
};
const char* grad_kind_name(GradKind k) noexcept;

// FLOPs of one op from its tensors' concrete shapes (a multiply-add counts 2).
using FlopsFn = double (*)(const Graph& g, const Op& op);
// Inputs whose bytes output 0 may take when the input dies at this op, as a bitmask; attribute-dependent.
using InplaceFn = std::uint32_t (*)(const Op& op);

// The operand slots of a memplan-domain op's schema: at most max_inputs / max_outputs slots, and the slots of the
// `required_*` masks (bit i: slot i) named by a tensor; the other slots may be empty ("" in a JSON graph).
struct OpArity {
  std::uint8_t max_inputs = 255, max_outputs = 255;  // 255: any number
  std::uint32_t required_inputs = 0, required_outputs = 1;
  bool known = false;  // false: no schema declared (the op's builder is trusted for its operand slots)
};

// torch.autocast's cast policy of an op (autocast.hpp says what each means).
enum class AutocastPolicy : std::uint8_t { lower, fp32, promote, keep };

using OpTypeId = std::uint16_t;
inline constexpr OpTypeId kUnknownOpType = 0xffff;


// memplan's own op types, named once (their domain, kMemplanDomain, is in graph.hpp).
namespace memplan_ops {
inline constexpr std::string_view kSwapOut = "SwapOut";
inline constexpr std::string_view kSwapIn = "SwapIn";
// Collectives of a rank's plan (planner/parallel/parallel.hpp): declared shapes, no kernels on one device.
inline constexpr std::string_view kAllReduce = "AllReduce";
inline constexpr std::string_view kReduceScatter = "ReduceScatter";
inline constexpr std::string_view kAllGather = "AllGather";
inline constexpr std::string_view kFusedElementwise = "FusedElementwise";
inline constexpr std::string_view kMSELoss = "MSELoss";
// Cross-entropy over a class axis with integer labels, and the model's own loss summed (docs/training-recipes.md).
inline constexpr std::string_view kCrossEntropyLoss = "CrossEntropyLoss";
inline constexpr std::string_view kCrossEntropyLossGrad = "CrossEntropyLossGrad";
// A language model's head and cross-entropy in one op over chunks of tokens (--chunked-loss): the loss and its
// gradients with respect to the hidden states, the head's weight and bias, computed in the forward. W is [K, V], or
// [V, K] with trans_b 1.
inline constexpr std::string_view kLinearCrossEntropy = "LinearCrossEntropy";
// V, the classes of a LinearCrossEntropy whose weight has `shape` ([K, V], or [V, K] with trans_b).
inline std::int64_t linear_cross_entropy_classes(const std::vector<std::int64_t>& shape, std::int64_t trans_b) {
  return shape.size() != 2 ? 0 : shape[trans_b != 0 ? 0 : 1];
}
inline constexpr std::string_view kSumLoss = "SumLoss";
inline constexpr std::string_view kSumLossGrad = "SumLossGrad";
inline constexpr std::string_view kBatchNormTraining = "BatchNormTraining";
inline constexpr std::string_view kReduceSumTo = "ReduceSumTo";
// Fused transformer ops (analysis/fused_ops.hpp says what they compute).
inline constexpr std::string_view kFusedAttention = "FusedAttention";
inline constexpr std::string_view kFusedAttentionGrad = "FusedAttentionGrad";
inline constexpr std::string_view kRMSNormalization = "RMSNormalization";
inline constexpr std::string_view kRMSNormGrad = "RMSNormGrad";
// op(A) op(B) with op a swap of the last two axes where `trans_a` / `trans_b` is 1 (planner/fusion_layouts.cpp).
inline constexpr std::string_view kMatMulT = "MatMulT";
// torch.roll: y[c] = x[c - shifts[k] mod dims[axes[k]] along each axes[k]] (planner/fusion_roll.cpp makes it from the
// Slice, Slice, Concat an exporter writes for each rolled axis); its own gradient with the shifts negated.
inline constexpr std::string_view kRoll = "Roll";
// Optimizer updates (in place over the weight and its state) and gradient accumulation (docs/backward-ops.md).
inline constexpr std::string_view kSGDUpdate = "SGDUpdate";
inline constexpr std::string_view kMomentumUpdate = "MomentumUpdate";
inline constexpr std::string_view kAdamUpdate = "AdamUpdate";
inline constexpr std::string_view kAdamStep = "AdamStep";
inline constexpr std::string_view kGradAccumulate = "GradAccumulate";
// fp16 dynamic loss scaling as torch.amp.GradScaler (docs/training-recipes.md, "Mixed precision"): the unscale of a
// weight gradient with the non-finite check, in place, and the scale's update after the optimizer step.
inline constexpr std::string_view kAmpUnscale = "AmpUnscale";
inline constexpr std::string_view kAmpUpdateScale = "AmpUpdateScale";
}  // namespace memplan_ops

}  // namespace memplan::analysis
