// The MSE loss and its gradient, and helpers the backward rules share.
#include <algorithm>

#include "analysis/autodiff.hpp"
#include "analysis/ops.hpp"

namespace memplan::analysis::autodiff {

Attribute attr_i(std::int64_t v) {
  Attribute a;
  a.kind = Attribute::Kind::i;
  a.i = v;
  return a;
}
Attribute attr_f(double v) {
  Attribute a;
  a.kind = Attribute::Kind::f;
  a.f = v;
  return a;
}
Attribute attr_ints(std::vector<std::int64_t> v) {
  Attribute a;
  a.kind = Attribute::Kind::ints;
  a.ints = std::move(v);
  return a;
}
Attribute attr_s(std::string v) {
  Attribute a;
  a.kind = Attribute::Kind::s;
  a.s = std::move(v);
  return a;
}

std::vector<std::int64_t> explicit_pads(const Op& op, const Shape& x, const Shape& y, const std::vector<std::int64_t>& kernel) {
  const std::size_t n = kernel.size();
  const std::string auto_pad = op.attr_string("auto_pad", "NOTSET");
  if (auto_pad == "NOTSET") {
    auto pads = op.attr_ints("pads", std::vector<std::int64_t>(2 * n, 0));
    if (pads.size() != 2 * n) fail(ErrorKind::malformed, "op '" + op.name + "' (" + op.type + "): pads has the wrong length");
    return pads;
  }
  std::vector<std::int64_t> pads(2 * n, 0);
  if (auto_pad == "VALID") return pads;
  const auto strides = op.attr_ints("strides", std::vector<std::int64_t>(n, 1));
  const auto dil = op.attr_ints("dilations", std::vector<std::int64_t>(n, 1));
  for (std::size_t k = 0; k < n; ++k) {
    const std::int64_t in = x.at(2 + k), out = y.at(2 + k);
    const std::int64_t total = std::max<std::int64_t>(0, (out - 1) * strides.at(k) + (kernel[k] - 1) * dil.at(k) + 1 - in);
    const std::int64_t small = total / 2, big = total - small;
    pads[k] = auto_pad == "SAME_LOWER" ? big : small;
    pads[k + n] = auto_pad == "SAME_LOWER" ? small : big;
  }
  return pads;
}

namespace {

// MSELossGrad(y, target) -> dy = 2 (y - target) / numel: the seed of the backward pass (dloss = 1).
void mse_loss_grad(GradContext& c) {
  TensorId g = c.grad_tensor(0);
  c.emit("MSELossGrad", "memplan", {c.in(0), c.in(1)}, {g});
  c.give(0, g);
}

}  // namespace

TensorId add_loss(Graph& g) {
  TensorId y = kNoTensor;
  for (TensorId t : g.outputs)
    if (dtype_is_float(g.tensors[t].dtype)) {
      y = t;
      break;
    }
  if (y == kNoTensor) fail(ErrorKind::invalid_graph, "graph '" + g.name + "' has no float output to put a loss on");
  Tensor target;
  target.name = unique_name(g, "target");
  target.dtype = g.tensors[y].dtype;
  target.dims = g.tensors[y].dims;
  target.rank_known = true;
  target.role = TensorRole::input;
  const TensorId tt = g.add_tensor(std::move(target));
  g.inputs.push_back(tt);
  Tensor loss;
  loss.name = unique_name(g, "loss");
  loss.dtype = g.tensors[y].dtype;
  loss.rank_known = true;
  const TensorId lt = g.add_tensor(std::move(loss));
  Op op;
  op.name = "loss/MSELoss";
  op.type = memplan_ops::kMSELoss;
  op.domain = kMemplanDomain;
  op.inputs = {y, tt};
  op.outputs = {lt};
  g.add_op(std::move(op));
  for (TensorId t : g.outputs) g.tensors[t].is_graph_output = false;
  g.outputs = {lt};
  g.tensors[lt].is_graph_output = true;
  return lt;
}

void add_loss_grads(GradTable& t) { t[std::string(memplan_ops::kMSELoss)] = {mse_loss_grad, 1u, 1u}; }

}  // namespace memplan::analysis::autodiff
