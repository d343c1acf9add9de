// Backward rules of memplan's fused ops: FusedAttention -> one FusedAttentionGrad reading Q, K, V, O and the
// per-row logsumexp (prepare_forward adds that output), so no s x s tensor is saved.
#include "analysis/autodiff.hpp"
#include "analysis/ops.hpp"

namespace memplan::analysis::autodiff {
namespace {

// dQ, dK, dV (and dBias for a float bias that trains) from one FusedAttentionGrad, with the forward's attrs
// (analysis/fused_ops.hpp). The bias's gradient is summed down to its own shape by the kernel.
void fused_attention(GradContext& c) {
  const Op& f = c.fwd();
  const TensorId lse = f.output(1);
  if (lse == kNoTensor) c.unsupported("no logsumexp output (prepare_forward adds it to a training graph)");
  const TensorId bias = f.input(3);
  if (c.wants(3) && !dtype_is_float(c.tensor(bias).dtype)) c.unsupported("a gradient for a bias that is not float");
  std::vector<TensorId> inputs{c.dy(), c.in(0), c.in(1), c.in(2), c.out(0), lse};
  if (bias != kNoTensor) inputs.push_back(bias);
  std::vector<TensorId> outs;
  // Packed Q, K, V (one input tensor read three times): one gradient, every slot of output 0 (fused_ops.hpp);
  // packed_inputs keeps inputs 1 and 2 from wanting their own.
  for (std::size_t i = 0; i < 4; ++i) outs.push_back(c.wants(i) ? c.grad_tensor(i) : kNoTensor);
  while (!outs.empty() && outs.back() == kNoTensor) outs.pop_back();
  auto attrs = f.attrs;
  attrs.erase("fused_ops");  // names the forward ops the fusion replaced; the gradient replaced none
  c.emit(std::string(memplan_ops::kFusedAttentionGrad), std::string(kMemplanDomain), std::move(inputs), outs, std::move(attrs));
  for (std::size_t i = 0; i < outs.size(); ++i)
    if (outs[i] != kNoTensor) c.give(i, outs[i]);
}

std::uint32_t packed_inputs(const Op& op) { return op.attr_string("q_layout", "bhsd") == "packed" ? 0x9u : 0xfu; }

}  // namespace

void add_fused_grads(GradTable& t) {
  // Q, K, V and the bias (bit 3) take gradients; only O carries one back (LSE is saved, not differentiated).
  t[std::string(memplan_ops::kFusedAttention)] = {fused_attention, 0xfu, 1u, packed_inputs};
}

}  // namespace memplan::analysis::autodiff
