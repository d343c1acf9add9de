// The CPU KernelSet: builds the table from each op family and dispatches; shared kernel helpers.
#include "runtime_allocator/cpu_kernels.hpp"

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
class CpuKernels final : public KernelSet {
 public:
  CpuKernels() {
    add_elementwise_kernels(table_);
    add_linalg_kernels(table_);
    add_conv_kernels(table_);
    add_reduce_kernels(table_);
    add_shape_kernels(table_);
    add_training_kernels(table_);
  }
  std::string unsupported_reason(const analysis::Graph& /*g*/, const Op& op) const override {
    return find(op) ? std::string() : "no kernel";
  }
  bool alias_safe(const Op& op) const override {
    const Kernel* k = find(op);
    return k && k->alias_safe;
  }
  void run(const OpCall& call) override {
    const Kernel* k = find(call.op);
    if (!k) fail(ErrorKind::unsupported, "no CPU kernel for op '" + call.op.name + "' of type " +
                                             (call.op.domain.empty() ? "" : call.op.domain + "::") + call.op.type);
    k->fn(call.op, call.in, call.out);
  }

 private:
  const Kernel* find(const Op& op) const {
    const std::string key = op.domain.empty() || op.domain == "ai.onnx" ? op.type : op.domain + "::" + op.type;
    auto it = table_.find(key);
    return it == table_.end() ? nullptr : &it->second;
  }
  KernelTable table_;
};
}  // namespace
}  // namespace cpu

std::unique_ptr<KernelSet> make_cpu_kernels() { return std::make_unique<cpu::CpuKernels>(); }

}  // namespace memplan::runtime
