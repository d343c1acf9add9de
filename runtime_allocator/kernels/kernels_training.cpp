// CPU kernels of memplan's training ops (backward, optimizer, swap); filled in from docs/backward-ops.md.
#include "runtime_allocator/kernels/cpu_kernels.hpp"

namespace memplan::runtime::cpu {
namespace {

// SwapOut / SwapIn: on the CPU backend the host staging buffer is ordinary memory, so each is a copy.
void k_swap(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  if (out[0].bytes != x.bytes) unsupported(op, "a swap copies a tensor unchanged; sizes differ");
  copy_if_moved(out[0].data, x.data, x.bytes);
}

}  // namespace

void add_training_kernels(KernelTable& t) {
  t["memplan::SwapOut"] = {k_swap, false, {kAnyDType}};
  t["memplan::SwapIn"] = {k_swap, false, {kAnyDType}};
  add_gradient_elementwise_kernels(t);
  add_gradient_layer_kernels(t);
  add_gradient_shape_kernels(t);
  add_loss_scaling_kernels(t);
}

}  // namespace memplan::runtime::cpu
