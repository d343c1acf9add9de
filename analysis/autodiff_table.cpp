// The backward rules of every family, in one table the op registry (ops.cpp) attaches to its records.
#include <algorithm>

#include "analysis/autodiff.hpp"
#include "analysis/ops_detail.hpp"

namespace memplan::analysis::ops_detail {
namespace {

const autodiff::GradTable& grad_table() {
  static const autodiff::GradTable table = [] {
    autodiff::GradTable t;
    autodiff::add_elementwise_grads(t);
    autodiff::add_nn_grads(t);
    autodiff::add_tensor_grads(t);
    autodiff::add_loss_grads(t);
    autodiff::add_fused_grads(t);
    autodiff::add_fused_elementwise_grads(t);
    autodiff::add_math_grads(t);
    return t;
  }();
  return table;
}

}  // namespace

const autodiff::GradRule* grad_rule(std::string_view type) {
  const auto& t = grad_table();
  auto it = t.find(std::string(type));
  return it == t.end() ? nullptr : &it->second;
}

std::vector<std::string_view> grad_rule_types() {
  std::vector<std::string_view> out;
  for (const auto& [type, rule] : grad_table()) out.push_back(type);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace memplan::analysis::ops_detail
