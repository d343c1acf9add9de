// TEMPORARY stub of the op registry for the opscli branch until the registry branch lands. DELETE.
#include "analysis/ops.hpp"

#include <vector>

#include "analysis/error.hpp"

namespace memplan::analysis {
namespace {
double zero_flops(const Graph&, const Op&) { return 0.0; }
std::vector<OpInfo> make() {
  std::vector<OpInfo> v;
  auto add = [&](std::string_view d, std::string_view t, OpKind k, GradKind gk, bool det, bool declared) {
    OpInfo i;
    i.id = static_cast<OpTypeId>(v.size());
    i.domain = d;
    i.type = t;
    i.kind = k;
    i.declared_shapes = declared;
    i.flops = &zero_flops;
    i.grad_kind = gk;
    i.deterministic = det;
    i.summary = "stub";
    v.push_back(i);
  };
  add("", "Add", OpKind::elementwise, GradKind::rule, true, false);
  add("", "Relu", OpKind::elementwise, GradKind::rule, true, false);
  add("", "MatMul", OpKind::matmul, GradKind::rule, true, false);
  add("", "Reshape", OpKind::view, GradKind::rule, true, false);
  add("", "Shape", OpKind::shape, GradKind::not_differentiable, true, false);
  add("", "Dropout", OpKind::random, GradKind::rule, false, false);
  add("", "Erf", OpKind::elementwise, GradKind::none, true, false);
  add("memplan", "SwapOut", OpKind::memory, GradKind::not_differentiable, true, true);
  return v;
}
const std::vector<OpInfo>& table() {
  static const std::vector<OpInfo> t = make();
  return t;
}
}  // namespace

const char* op_kind_name(OpKind k) noexcept {
  static const char* n[] = {"view", "elementwise", "reduction", "normalization", "layout", "matmul", "convolution",
                            "pooling", "random", "shape", "loss", "optimizer", "memory", "fused"};
  return n[static_cast<int>(k)];
}
const char* grad_kind_name(GradKind k) noexcept {
  static const char* n[] = {"rule", "not_differentiable", "none"};
  return n[static_cast<int>(k)];
}
const OpInfo* OpRegistry::find(std::string_view domain, std::string_view type) const noexcept {
  if (domain == "ai.onnx") domain = "";
  for (const auto& i : table())
    if (i.domain == domain && i.type == type) return &i;
  return nullptr;
}
const OpInfo& OpRegistry::at(const Op& op, std::string_view needed_for) const {
  if (auto* i = find(op)) return *i;
  fail(ErrorKind::unsupported, "op '" + op.name + "' (" + op.type + "): unknown, needed for " + std::string(needed_for));
}
std::span<const OpInfo> OpRegistry::all() const noexcept { return table(); }
const OpRegistry& op_registry() {
  static const OpRegistry r;
  return r;
}
}  // namespace memplan::analysis
