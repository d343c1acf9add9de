// torch.autocast (CUDA) on a forward graph: which ops run in bf16/fp16, which in fp32, Casts where dtypes change.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "analysis/graph.hpp"
#include "analysis/op_kinds.hpp"

namespace memplan::analysis {

// PyTorch's cast policies (aten/src/ATen/autocast_mode.h: AT_FORALL_LOWER_PRECISION_FP, AT_FORALL_FP32,
// AT_FORALL_FP32_SET_OPT_DTYPE, AT_FORALL_PROMOTE), per memplan/ONNX op (AutocastPolicy, op_kinds.hpp; each op's in
// its registry record, OpInfo::autocast, set in analysis/ops_table.cpp):
//   lower:   every float input cast to the low dtype, float outputs low (MatMul, Gemm, Conv, attention).
//   fp32:    every float input cast to float32, float outputs float32 (Softmax, norms, exp/log/pow, sums,
//            losses, upsampling).
//   promote: the op runs in its inputs' dtype, the widest float among them (PyTorch's type promotion: a
//            0-dim tensor or a 1-element constant does not widen); every other op.
//   keep:    dtypes are the op's own business (Cast, shape computations, ops without float inputs).
// Op::lowered_from of the Casts apply_autocast inserts (torch.autocast's own casts, or none where PyTorch's type
// promotion reads the narrower operand as it is), telling them from the model's own Casts.
inline constexpr std::string_view kAutocastCast = "autocast";

const char* autocast_policy_name(AutocastPolicy p) noexcept;
AutocastPolicy autocast_policy(const Op& op);

struct AutocastStats {
  std::size_t lower_ops = 0;     // ops run in the low dtype
  std::size_t fp32_ops = 0;      // ops the fp32 list forces to float32
  std::size_t weight_casts = 0;  // cached casts of weights (one per weight and dtype)
  std::size_t activation_casts = 0;
};

// Rewrites `g` (shaped; ops in a topological order) as torch.autocast(dtype=low) runs it, low being bf16 or
// f16: sets every op's output dtypes by its policy and inserts Cast ops (type "Cast", attribute `to`)
// before an op whose input has another dtype than the op computes in. A weight (an initializer: role weight,
// no producer) read in another dtype is cast once per dtype (autocast's cache of leaf tensors: the first
// use casts, later uses share the copy, named "<weight>/autocast_<dtype>"); an activation or graph input is
// cast per consuming op, as eager autocast does; a view/layout op of a weight read only by low-precision ops
// (an exported Linear's Transpose(W)) runs on the weight's cached copy. Weights stay float32 (master weights), so their gradients
// are float32 through the Cast's backward. Tensor ids are kept (new tensors are appended); ops are rebuilt
// in the same order with the casts before their first reader.
// Where this differs from PyTorch (docs/training-recipes.md "Mixed precision"): an Add of an initializer to
// the output of a low-precision MatMul/Gemm/Conv (an exported Linear's or Conv's bias) follows the low dtype,
// as F.linear's fused bias does; BatchNormalization runs in its input's dtype with float32 parameters and
// statistics (cuDNN's mixed batch norm), like PyTorch.
AutocastStats apply_autocast(Graph& g, DType low);

}  // namespace memplan::analysis
