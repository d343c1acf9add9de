// Internal interface of the op registry (ops.cpp): the FLOP formulas (ops_flops.cpp), the per-op table (ops_table.cpp)
// and the backward rules (autodiff_table.cpp). Includes nothing above the graph and the registry's vocabulary.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "analysis/graph.hpp"
#include "analysis/op_kinds.hpp"

namespace memplan::analysis::autodiff {
struct GradRule;
}

namespace memplan::analysis::ops_detail {

// FLOP formulas shared by several ops (a multiply-add counts 2).
double conv_flops(const Graph& g, const Op& op);             // Conv: 2 N Cout HW Cin/group k + bias
double conv_grad_input_flops(const Graph& g, const Op& op);  // the forward conv's count, from dY and W
double conv_transpose_flops(const Graph& g, const Op& op);   // its Conv-input-gradient count, from X and W, + bias
double conv_grad_weight_flops(const Graph& g, const Op& op);
double matmul_flops(const Graph& g, const Op& op);
double linear_cross_entropy_flops(const Graph& g, const Op& op);
double matmul_grad_a_flops(const Graph& g, const Op& op);
double matmul_grad_b_flops(const Graph& g, const Op& op);
double matmul_t_flops(const Graph& g, const Op& op);
double gemm_flops(const Graph& g, const Op& op);
double pool_flops(const Graph& g, const Op& op);       // output elements times the window
double pool_grad_flops(const Graph& g, const Op& op);  // dY elements times the window
double no_flops(const Graph& g, const Op& op);         // data movement: copies, gathers, shapes
double reduction_flops(const Graph& g, const Op& op);  // max(elements of input 0, of output 0)
double one_flop(const Graph& g, const Op& op);         // a scalar update (AdamStep)
double attention_flops(const Graph& g, const Op& op);       // FusedAttention: 2 S^2 (D + Dv) per head + softmax
double onnx_attention_flops(const Graph& g, const Op& op);  // ONNX Attention (3-D or 4-D operands), the same count
double attention_grad_flops(const Graph& g, const Op& op);  // FusedAttentionGrad: scores recomputed, four products
// Elements of the largest operand (inputs and outputs).
double largest_operand(const Graph& g, const Op& op);
// Elementwise and normalization ops: N FLOPs per element of the largest operand.
template <int N>
double per_element(const Graph& g, const Op& op) {
  return largest_operand(g, op) * static_cast<double>(N);
}

// In-place rules that depend on the op's attributes or arity.
std::uint32_t batch_norm_inplace(const Op& op);  // inference BatchNormalization: input 0

// One op as the registry's table declares it; shape and backward rules are attached by ops.cpp.
struct OpSpec {
  std::string_view domain;  // "" or "memplan"
  std::string_view type;
  OpKind kind = OpKind::elementwise;
  FlopsFn flops = nullptr;
  std::string_view summary;
  std::uint32_t inplace_inputs = 0;
  InplaceFn inplace = nullptr;
  bool not_differentiable = false;
  std::uint32_t parameter_inputs = 0;
  std::uint32_t frozen_inputs = 0;
  std::uint32_t rank1_parameter_inputs = 0;
  bool forward_only_view = false;
  bool gathers_input0 = false;
  bool inplace_across_dtypes = false;
  bool inplace_any_input = false;
  bool uses_workspace = false;
  bool identity_in_inference = false;
  std::array<std::int8_t, 4> rewrites{-1, -1, -1, -1};  // OpInfo::rewrites
  OpArity arity;                                         // OpInfo::arity (memplan's own ops)
  std::optional<AutocastPolicy> autocast;                // OpInfo::autocast; none: from the kind
};

std::span<const OpSpec> op_specs();

// The backward rule of the forward op type `type` (either domain), or null (autodiff_table.cpp).
const autodiff::GradRule* grad_rule(std::string_view type);
// Every op type with a backward rule, sorted.
std::vector<std::string_view> grad_rule_types();

}  // namespace memplan::analysis::ops_detail
