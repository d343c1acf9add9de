// The CPU KernelSet: builds the table from each op family and dispatches; shared kernel helpers.
#include "runtime_allocator/kernels/cpu_kernels.hpp"

#include <algorithm>

namespace memplan::runtime {
namespace cpu {

void unsupported(const Op& op, const std::string& what) {
  fail(ErrorKind::unsupported, "CPU kernel for op '" + op.name + "' (" + op.type + "): " + what);
}

std::int64_t normalize_axis(const Op& op, std::int64_t axis, std::size_t rank) {
  const auto r = static_cast<std::int64_t>(rank);
  if (axis < -r || axis >= std::max<std::int64_t>(r, 1)) unsupported(op, "axis " + std::to_string(axis) + " out of range");
  return axis < 0 ? axis + r : axis;
}

const TensorRef& required(const Op& op, const Refs& in, std::size_t i) {
  if (i >= in.size() || !in[i].data) unsupported(op, "input " + std::to_string(i) + " is required");
  return in[i];
}

std::vector<std::int64_t> int_values(const Op& op, const TensorRef& t) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(t.elements()));
  if (t.dtype == DType::i64) std::copy_n(t.as<std::int64_t>(), v.size(), v.begin());
  else if (t.dtype == DType::i32) std::copy_n(t.as<std::int32_t>(), v.size(), v.begin());
  else unsupported(op, std::string("expected int64 or int32 values, got ") + analysis::dtype_name(t.dtype));
  return v;
}

float scalar_value(const Op& op, const Refs& in, std::size_t i, float fallback) {
  if (i >= in.size() || !in[i].data) return fallback;
  if (in[i].dtype != DType::f32 || in[i].elements() != 1) unsupported(op, "input " + std::to_string(i) + " must be a float32 scalar");
  return *in[i].as<float>();
}

void copy_if_moved(std::byte* dst, const std::byte* src, std::uint64_t bytes) {
  if (dst != src && bytes) std::memmove(dst, src, bytes);
}

namespace {
KernelTable build_table() {
  KernelTable t;
  add_elementwise_kernels(t);
  add_linalg_kernels(t);
  add_conv_kernels(t);
  add_conv_nd_kernels(t);
  add_pool_kernels(t);
  add_reduce_kernels(t);
  add_norm_kernels(t);
  add_shape_kernels(t);
  add_indexing_kernels(t);
  add_scatter_kernels(t);
  add_resize_kernels(t);
  add_select_kernels(t);
  add_integer_kernels(t);
  add_training_kernels(t);
  add_attention_kernels(t);
  add_loss_kernels(t);
  add_activation_kernels(t);
  add_random_kernels(t);
  add_onnx_legacy_kernels(t);
  add_group_norm_kernels(t);
  return t;
}

const KernelTable& table() {
  static const KernelTable t = build_table();
  return t;
}

// What the CPU runs: the kernel's own constraints, float32 widened to the 16-bit floats (run_widened).
KernelConstraints effective_constraints(const Kernel& k) {
  KernelConstraints c = k.accepts;
  if (c.dtypes & kF32) c.dtypes |= kLowFloat;
  return c;
}

const Kernel* find(const Op& op) {
  const analysis::OpInfo* info = analysis::op_registry().find(op);
  return info ? table().find(info->id) : nullptr;
}

class CpuKernels final : public KernelSet {
 public:
  std::string unsupported_reason(const analysis::Graph& g, const Op& op) const override {
    const Kernel* k = find(op);
    if (!k) return "no kernel";
    return constraint_reason(g, op, effective_constraints(*k));
  }
  bool alias_safe(const Op& op) const override {
    const Kernel* k = find(op);
    return k && k->alias_safe;
  }
  void run(const OpCall& call) override {
    const Kernel* k = find(call.op);
    if (!k) fail(ErrorKind::unsupported, "no CPU kernel for op '" + call.op.name + "' of type " +
                                             (call.op.domain.empty() ? "" : call.op.domain + "::") + call.op.type);
    if (!k->native_low_precision && (std::any_of(call.in.begin(), call.in.end(), is_low_precision) ||
                                     std::any_of(call.out.begin(), call.out.end(), is_low_precision)))
      run_widened(k->fn, call.op, call.in, call.out);
    else
      k->fn(call.op, call.in, call.out);
  }
};
}  // namespace

std::vector<analysis::OpTypeId> registered_cpu_kernels() { return table().ids(); }

std::optional<KernelConstraints> cpu_kernel_constraints(analysis::OpTypeId id) {
  const Kernel* k = table().find(id);
  return k ? std::optional(effective_constraints(*k)) : std::nullopt;
}
}  // namespace cpu

std::unique_ptr<KernelSet> make_cpu_kernels() { return std::make_unique<cpu::CpuKernels>(); }

}  // namespace memplan::runtime
