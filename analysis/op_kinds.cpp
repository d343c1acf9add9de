// Names of the op registry's kinds.
#include "analysis/op_kinds.hpp"

namespace memplan::analysis {

const char* op_kind_name(OpKind k) noexcept {
  switch (k) {
    case OpKind::view: return "view";
    case OpKind::elementwise: return "elementwise";
    case OpKind::reduction: return "reduction";
    case OpKind::normalization: return "normalization";
    case OpKind::layout: return "layout";
    case OpKind::matmul: return "matmul";
    case OpKind::convolution: return "convolution";
    case OpKind::pooling: return "pooling";
    case OpKind::random: return "random";
    case OpKind::shape: return "shape";
    case OpKind::loss: return "loss";
    case OpKind::optimizer: return "optimizer";
    case OpKind::memory: return "memory";
    case OpKind::fused: return "fused";
  }
  return "?";
}

const char* grad_kind_name(GradKind k) noexcept {
  switch (k) {
    case GradKind::rule: return "rule";
    case GradKind::not_differentiable: return "not_differentiable";
    case GradKind::none: return "none";
  }
  return "?";
}

}  // namespace memplan::analysis
