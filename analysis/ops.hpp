// The op registry: every op memplan knows, one record each, read by every stage instead of lists of its own.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "analysis/graph.hpp"
#include "analysis/op_kinds.hpp"

namespace memplan::analysis {

namespace shape_detail {
struct OpRule;
}
namespace autodiff {
struct GradRule;
}

struct OpInfo {
  OpTypeId id = kUnknownOpType;  // dense index into op_registry().all()
  std::string_view domain;       // "" for ONNX's default domain, "memplan" for memplan's own ops
  std::string_view type;
  OpKind kind = OpKind::elementwise;
  // Shape inference: ONNX ops have a rule (and maybe a constant evaluator); memplan's own ops carry the
  // shapes their builder declared (`shape` null, `declared_shapes` true).
  const shape_detail::OpRule* shape = nullptr;
  bool declared_shapes = false;
  // memplan's own ops read from a file are checked against their schema before any stage uses them: the operand
  // slots (`arity`) and, where `schema` is set, attributes, ranks and dtypes, with the output shapes computed and
  // compared with the declared ones (analysis/shape_memplan.cpp).
  OpArity arity;
  const shape_detail::OpRule* schema = nullptr;
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
  // torch.autocast's policy (autocast.hpp): lower or fp32 as PyTorch's lists say (ops_table.cpp), else from the kind:
  // fp32 for losses, keep for shape, optimizer and memory ops, promote for the rest.
  AutocastPolicy autocast = AutocastPolicy::promote;
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


}  // namespace memplan::analysis
