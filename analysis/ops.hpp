// The op registry: every op memplan knows, one record each, read by every stage instead of lists of its own.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "analysis/graph.hpp"

namespace memplan::analysis {

namespace shape_detail {
struct OpRule;
}
namespace autodiff {
struct GradRule;
}

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

using OpTypeId = std::uint16_t;
inline constexpr OpTypeId kUnknownOpType = 0xffff;

struct OpInfo {
  OpTypeId id = kUnknownOpType;  // dense index into op_registry().all()
  std::string_view domain;       // "" for ONNX's default domain, "memplan" for memplan's own ops
  std::string_view type;
  OpKind kind = OpKind::elementwise;
  // Shape inference: ONNX ops have a rule (and maybe a constant evaluator); memplan's own ops carry the
  // shapes their builder declared (`shape` null, `declared_shapes` true).
  const shape_detail::OpRule* shape = nullptr;
  bool declared_shapes = false;
  FlopsFn flops = nullptr;      // never null for a registered op
  bool launches = true;         // false: no kernel runs (views), costs 0 seconds
  std::uint32_t inplace_inputs = 0;  // bit i: output 0 may overwrite input i (elementwise, same size)
  InplaceFn inplace = nullptr;       // when set, decides instead of `inplace_inputs`
  bool inplace_any_input = false;    // output 0 may overwrite any input, whatever the arity (FusedElementwise)
  bool inplace_across_dtypes = false;  // in place over an input of another dtype of the same width (Cast)
  bool uses_workspace = false;  // its kernel wants scratch memory beside its operands (cuDNN convolutions)
  GradKind grad_kind = GradKind::none;
  const autodiff::GradRule* grad = nullptr;  // set when grad_kind is rule
  bool deterministic = true;    // false: two runs give different outputs (random ops)
  // Training graphs: bit i set when input i holds a layer's parameter (PyTorch nn.Parameter), never
  // trains (running statistics, clip bounds), or is a parameter when it has rank 1 (a bias, a scale).
  std::uint32_t parameter_inputs = 0;
  std::uint32_t frozen_inputs = 0;
  std::uint32_t rank1_parameter_inputs = 0;
  // A view only in the forward pass; in backward it copies (Identity of an accumulated gradient).
  bool forward_only_view = false;
  bool gathers_input0 = false;  // reads only the rows of input 0 that output 0 holds (embedding lookups)
  // Output 0 is input 0 unchanged in inference (Dropout): where the runtime binds them to the same bytes,
  // it counts the op as an elided view.
  bool identity_in_inference = false;
  // Persistent state rewritten in place, as PyTorch's optimizers and gradient accumulation do: output k
  // (k < 4) is the storage of input rewrites[k] after the op (-1: a new tensor). The output never takes
  // arena memory or persistent bytes of its own: it is its source's bytes (planner Alias inplace).
  std::array<std::int8_t, 4> rewrites{-1, -1, -1, -1};
  std::string_view summary;     // one line for `memplan ops` and docs/ops.md

  bool is_view() const noexcept { return kind == OpKind::view; }
  // No kernel runs for `op` of this type: a view (forward_only_view: in the forward pass only).
  bool is_free(const Op& op) const noexcept { return !launches && (!forward_only_view || op.phase == Phase::forward); }
  std::uint32_t inplace_mask(const Op& op) const { return inplace ? inplace(op) : inplace_inputs; }
  // Output 0 of `op` may take input i's bytes (when input i dies at `op` and the sizes agree).
  bool inplace_input(const Op& op, std::size_t i) const {
    if (inplace_any_input) return i < op.inputs.size();
    return i < 32 && ((inplace_mask(op) >> i) & 1u);
  }
  // The input whose storage output k rewrites in place, or -1.
  int rewritten_input(std::size_t k) const noexcept { return k < rewrites.size() ? rewrites[k] : -1; }
};

// The registry is immutable data built once; lookups never allocate.
class OpRegistry {
 public:
  // Null when memplan does not know the op. "ai.onnx" is the default domain.
  const OpInfo* find(std::string_view domain, std::string_view type) const noexcept;
  const OpInfo* find(const Op& op) const noexcept { return find(op.domain, op.type); }
  // ErrorKind::unsupported when unknown: "op 'x' (Type): memplan has no <needed_for> for this op"
  // (`needed_for`: "cost", "backward rule").
  const OpInfo& at(const Op& op, std::string_view needed_for) const;
  std::span<const OpInfo> all() const noexcept;
  const OpInfo& info(OpTypeId id) const { return all()[id]; }
};

const OpRegistry& op_registry();

// The tensor whose storage `t` is after its producer rewrote it in place (OpInfo::rewrites: an optimizer's
// updated weight or state, an accumulated gradient), or kNoTensor when `t` is storage of its own.
TensorId rewritten_source(const Graph& g, TensorId t);
// Follows rewritten_source to the tensor that owns the storage (a weight, state or accumulator input).
TensorId storage_owner(const Graph& g, TensorId t);

// memplan's own domain and op types, named once.
inline constexpr std::string_view kMemplanDomain = "memplan";
namespace memplan_ops {
inline constexpr std::string_view kSwapOut = "SwapOut";
inline constexpr std::string_view kSwapIn = "SwapIn";
// Collectives of a rank's plan (planner/parallel.hpp): declared shapes, no kernels on one device.
inline constexpr std::string_view kAllReduce = "AllReduce";
inline constexpr std::string_view kReduceScatter = "ReduceScatter";
inline constexpr std::string_view kAllGather = "AllGather";
inline constexpr std::string_view kFusedElementwise = "FusedElementwise";
inline constexpr std::string_view kMSELoss = "MSELoss";
// Cross-entropy over a class axis with integer labels, and the model's own loss summed (docs/training-recipes.md).
inline constexpr std::string_view kCrossEntropyLoss = "CrossEntropyLoss";
inline constexpr std::string_view kCrossEntropyLossGrad = "CrossEntropyLossGrad";
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
