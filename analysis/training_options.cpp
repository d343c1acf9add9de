// Names of the training options, as the command line and the JSON reports spell them.
#include "analysis/training_options.hpp"

namespace memplan::analysis {

const char* optimizer_name(Optimizer o) noexcept {
  switch (o) {
    case Optimizer::none: return "none";
    case Optimizer::sgd: return "sgd";
    case Optimizer::momentum: return "momentum";
    case Optimizer::adam: return "adam";
    case Optimizer::adamw: return "adamw";
  }
  return "?";
}

std::optional<Optimizer> optimizer_from_name(std::string_view name) noexcept {
  for (Optimizer o : {Optimizer::none, Optimizer::sgd, Optimizer::momentum, Optimizer::adam, Optimizer::adamw})
    if (name == optimizer_name(o)) return o;
  return std::nullopt;
}

const char* optimizer_impl_name(OptimizerImpl i) noexcept {
  switch (i) {
    case OptimizerImpl::foreach: return "foreach";
    case OptimizerImpl::fused: return "fused";
    case OptimizerImpl::for_loop: return "for-loop";
  }
  return "?";
}

std::optional<OptimizerImpl> optimizer_impl_from_name(std::string_view name) noexcept {
  for (OptimizerImpl i : {OptimizerImpl::foreach, OptimizerImpl::fused, OptimizerImpl::for_loop})
    if (name == optimizer_impl_name(i)) return i;
  return std::nullopt;
}

const char* loss_name(Loss l) noexcept {
  switch (l) {
    case Loss::mse: return "mse";
    case Loss::ce: return "ce";
    case Loss::none: return "none";
  }
  return "?";
}

std::optional<Loss> loss_from_name(std::string_view name) noexcept {
  for (Loss l : {Loss::mse, Loss::ce, Loss::none})
    if (name == loss_name(l)) return l;
  return std::nullopt;
}

const char* precision_name(Precision p) noexcept {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
  }
  return "?";
}

std::optional<Precision> precision_from_name(std::string_view name) noexcept {
  for (Precision p : {Precision::fp32, Precision::bf16, Precision::fp16})
    if (name == precision_name(p)) return p;
  return std::nullopt;
}

}  // namespace memplan::analysis
