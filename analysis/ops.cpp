// The op registry built once from the op table, the shape rules and the backward rules; lookups by domain and type.
#include "analysis/ops.hpp"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "analysis/ops_detail.hpp"
#include "analysis/shape_rules.hpp"

namespace memplan::analysis {
namespace {

using ops_detail::OpSpec;

std::string_view canonical_domain(std::string_view d) noexcept { return d == "ai.onnx" ? std::string_view{} : d; }

const shape_detail::RuleTable& shape_rules() {
  static const shape_detail::RuleTable table = [] {
    shape_detail::RuleTable t;
    shape_detail::add_elementwise_rules(t);
    shape_detail::add_nn_rules(t);
    shape_detail::add_tensor_rules(t);
    shape_detail::add_reduce_rules(t);
    shape_detail::add_fold_rules(t);
    return t;
  }();
  return table;
}

const shape_detail::RuleTable& memplan_rules() {
  static const shape_detail::RuleTable table = [] {
    shape_detail::RuleTable t;
    shape_detail::add_memplan_rules(t);
    return t;
  }();
  return table;
}


[[noreturn]] void inconsistent(const std::string& what) { fail(ErrorKind::verification, "op registry: " + what); }

struct Registry {
  std::vector<OpInfo> ops;                                           // sorted by (domain, type); id = index
  std::map<std::pair<std::string_view, std::string_view>, OpTypeId> by_name;  // no allocation on lookup

  Registry() {
    const auto& rules = shape_rules();
    std::vector<const OpSpec*> specs;
    for (const OpSpec& s : ops_detail::op_specs()) specs.push_back(&s);
    std::sort(specs.begin(), specs.end(), [](const OpSpec* a, const OpSpec* b) {
      return std::pair(a->domain, a->type) < std::pair(b->domain, b->type);
    });
    for (const OpSpec* s : specs) {
      OpInfo i;
      i.id = static_cast<OpTypeId>(ops.size());
      i.domain = s->domain;
      i.type = s->type;
      i.kind = s->kind;
      if (s->domain.empty()) {
        auto r = rules.find(std::string(s->type));
        if (r == rules.end() || !r->second.shape) inconsistent("'" + std::string(s->type) + "' has no shape rule");
        i.shape = &r->second;
      } else {
        i.declared_shapes = true;
        if (auto r = memplan_rules().find(std::string(s->type)); r != memplan_rules().end()) i.schema = &r->second;
      }
      i.arity = s->arity;
      i.flops = s->flops;
      i.launches = s->kind != OpKind::view;
      i.inplace_inputs = s->inplace_inputs;
      i.inplace = s->inplace;
      if (const autodiff::GradRule* g = ops_detail::grad_rule(s->type)) {
        i.grad_kind = GradKind::rule;
        i.grad = g;
      } else if (s->not_differentiable) {
        i.grad_kind = GradKind::not_differentiable;
      }
      i.deterministic = s->kind != OpKind::random;
      i.summary = s->summary;
      i.parameter_inputs = s->parameter_inputs;
      i.frozen_inputs = s->frozen_inputs;
      i.rank1_parameter_inputs = s->rank1_parameter_inputs;
      i.forward_only_view = s->forward_only_view;
      i.gathers_input0 = s->gathers_input0;
      i.inplace_across_dtypes = s->inplace_across_dtypes;
      i.inplace_any_input = s->inplace_any_input;
      i.uses_workspace = s->uses_workspace;
      i.identity_in_inference = s->identity_in_inference;
      i.rewrites = s->rewrites;
      i.autocast = s->autocast.value_or(s->kind == OpKind::loss ? AutocastPolicy::fp32
                                        : s->kind == OpKind::shape || s->kind == OpKind::optimizer || s->kind == OpKind::memory
                                            ? AutocastPolicy::keep
                                            : AutocastPolicy::promote);
      if (!by_name.emplace(std::pair(i.domain, i.type), i.id).second)
        inconsistent("'" + std::string(s->domain) + "::" + std::string(s->type) + "' is declared twice");
      ops.push_back(i);
    }
    // Every shape rule and every backward rule belongs to a declared op.
    for (const auto& [type, rule] : rules)
      if (!by_name.count({std::string_view{}, type})) inconsistent("shape rule of '" + type + "' has no op");
    for (const auto& [type, rule] : memplan_rules()) {
      auto it = by_name.find({kMemplanDomain, type});
      if (it == by_name.end()) inconsistent("schema rule of memplan '" + type + "' has no op");
      if (!ops[it->second].arity.known) inconsistent("memplan '" + type + "' has a schema rule but no operand slots");
    }
    for (std::string_view type : ops_detail::grad_rule_types()) {
      const OpTypeId* id = nullptr;
      for (std::string_view d : {std::string_view{}, kMemplanDomain})
        if (auto it = by_name.find({d, type}); it != by_name.end() && !id) id = &it->second;
      if (!id) inconsistent("backward rule of '" + std::string(type) + "' has no op");
    }
  }
};

const Registry& registry() {
  static const Registry r;
  return r;
}

}  // namespace



const OpInfo* OpRegistry::find(std::string_view domain, std::string_view type) const noexcept {
  const Registry& r = registry();
  auto it = r.by_name.find({canonical_domain(domain), type});
  return it == r.by_name.end() ? nullptr : &r.ops[it->second];
}

const OpInfo& OpRegistry::at(const Op& op, std::string_view needed_for) const {
  if (const OpInfo* i = find(op)) return *i;
  const std::string type = canonical_domain(op.domain).empty() ? op.type : op.domain + "::" + op.type;
  fail(ErrorKind::unsupported, "op '" + op.name + "' (" + type + "): memplan has no " + std::string(needed_for) + " for this op");
}

std::span<const OpInfo> OpRegistry::all() const noexcept { return registry().ops; }

const OpRegistry& op_registry() {
  static const OpRegistry r;
  return r;
}

TensorId rewritten_source(const Graph& g, TensorId t) {
  const OpId p = g.tensors.at(t).producer;
  if (p == kNoOp) return kNoTensor;
  const Op& op = g.ops[p];
  const OpInfo* info = op_registry().find(op);
  if (!info) return kNoTensor;
  for (std::size_t k = 0; k < op.outputs.size(); ++k)
    if (op.outputs[k] == t) {
      const int j = info->rewritten_input(k);
      return j >= 0 ? op.input(static_cast<std::size_t>(j)) : kNoTensor;
    }
  return kNoTensor;
}

TensorId storage_owner(const Graph& g, TensorId t) {
  for (std::size_t hops = 0; hops <= g.tensors.size(); ++hops) {
    const TensorId s = rewritten_source(g, t);
    if (s == kNoTensor) return t;
    t = s;
  }
  fail(ErrorKind::invalid_graph, "tensor '" + g.tensors[t].name + "' is rewritten in place in a cycle");
}

}  // namespace memplan::analysis
