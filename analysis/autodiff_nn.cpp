// Backward rules of layers: Conv, ConvTranspose, Gemm, MatMul, normalizations, Softmax, pooling, reductions.
#include <algorithm>

#include "analysis/autodiff.hpp"
#include "analysis/conv_geometry.hpp"
#include "analysis/ops.hpp"

namespace memplan::analysis::autodiff {
namespace {

std::size_t positive_axis(const GradContext& c, std::int64_t axis, std::size_t rank) {
  const auto r = static_cast<std::int64_t>(rank);
  if (axis < -r || axis >= r) c.unsupported("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return static_cast<std::size_t>(axis < 0 ? axis + r : axis);
}

// Window geometry of Conv and pools as explicit attributes (auto_pad resolved).
std::map<std::string, Attribute> window_attrs(const GradContext& c, const std::vector<std::int64_t>& kernel) {
  const Op& f = c.fwd();
  const std::size_t n = kernel.size();
  std::map<std::string, Attribute> a;
  a["kernel_shape"] = attr_ints(kernel);
  a["strides"] = attr_ints(f.attr_ints("strides", std::vector<std::int64_t>(n, 1)));
  a["dilations"] = attr_ints(f.attr_ints("dilations", std::vector<std::int64_t>(n, 1)));
  a["pads"] = attr_ints(explicit_pads(f, c.shape(c.in(0)), c.shape(c.out(0)), kernel));
  return a;
}

// One memplan op with several optional outputs, one per wanted input; then each is handed over.
void multi(GradContext& c, const char* type, std::vector<TensorId> inputs, const std::vector<std::size_t>& slots,
           std::map<std::string, Attribute> attrs = {}) {
  std::vector<TensorId> outs;
  for (std::size_t i : slots) outs.push_back(c.wants(i) ? c.grad_tensor(i) : kNoTensor);
  c.emit(type, "memplan", std::move(inputs), outs, std::move(attrs));
  for (std::size_t k = 0; k < slots.size(); ++k)
    if (outs[k] != kNoTensor) c.give(slots[k], outs[k]);
}

void single(GradContext& c, std::size_t i, const std::string& type, const char* domain, std::vector<TensorId> inputs,
            std::map<std::string, Attribute> attrs = {}) {
  TensorId g = c.grad_tensor(i);
  c.emit(type, domain, std::move(inputs), {g}, std::move(attrs));
  c.give(i, g);
}

void conv(GradContext& c) {
  const Shape w = c.shape(c.in(1));
  auto attrs = window_attrs(c, Shape(w.begin() + 2, w.end()));
  attrs["group"] = attr_i(c.fwd().attr_int("group", 1));
  if (c.wants(0)) single(c, 0, "ConvGradInput", "memplan", {c.dy(), c.in(1)}, attrs);
  if (c.wants(1)) single(c, 1, "ConvGradWeight", "memplan", {c.dy(), c.in(0)}, attrs);
  if (c.wants(2)) single(c, 2, "ConvGradBias", "memplan", {c.dy()});
}

// Y = ConvTranspose(X, W) is the input gradient of the convolution from Y to X with weight W (conv_geometry.hpp):
// dX is that convolution of dY, dW its weight gradient with X in dY's role, dB the channel sums of dY.
void conv_transpose(GradContext& c) {
  const Shape w = c.shape(c.in(1)), kernel(w.begin() + 2, w.end());
  const auto pads = conv_transpose_pads(c.fwd(), c.shape(c.in(0)), c.shape(c.out(0)), kernel);
  for (std::int64_t p : pads)
    if (p < 0) c.unsupported("an output_shape beyond the transposed convolution's last window has no gradient rule");
  const Op& f = c.fwd();
  std::map<std::string, Attribute> attrs;
  attrs["kernel_shape"] = attr_ints(kernel);
  attrs["strides"] = attr_ints(f.attr_ints("strides", Shape(kernel.size(), 1)));
  attrs["dilations"] = attr_ints(f.attr_ints("dilations", Shape(kernel.size(), 1)));
  attrs["pads"] = attr_ints(pads);
  attrs["group"] = attr_i(f.attr_int("group", 1));
  if (c.wants(0)) single(c, 0, "Conv", "", {c.dy(), c.in(1)}, attrs);
  if (c.wants(1)) single(c, 1, "ConvGradWeight", "memplan", {c.in(0), c.dy()}, attrs);
  if (c.wants(2)) single(c, 2, "ConvGradBias", "memplan", {c.dy()});
}

// Y = op(A) op(B): dA = dY op(B)^T, or its transpose op(B) dY^T where A was read transposed; dB = op(A)^T dY,
// or dY^T op(A). `product(i, p, q, tp, tq)` emits input i's gradient as op(p) op(q).
template <class Product>
void product_grads(GradContext& c, bool ta, bool tb, Product&& product) {
  const TensorId a = c.in(0), b = c.in(1), dy = c.dy();
  if (c.wants(0)) {
    if (!ta) product(0, dy, b, false, !tb);
    else product(0, b, dy, tb, true);
  }
  if (c.wants(1)) {
    if (!tb) product(1, a, dy, !ta, false);
    else product(1, dy, a, true, ta);
  }
}

// Y = alpha op(A) op(B) + beta C: each gradient is one plain Gemm (see docs/backward-ops.md).
void gemm(GradContext& c) {
  const Op& f = c.fwd();
  const double alpha = f.attr_float("alpha", 1.0), beta = f.attr_float("beta", 1.0);
  product_grads(c, f.attr_int("transA", 0) != 0, f.attr_int("transB", 0) != 0,
                [&](std::size_t i, TensorId p, TensorId q, bool tp, bool tq) {
                  std::map<std::string, Attribute> at{{"alpha", attr_f(alpha)}};
                  if (tp) at["transA"] = attr_i(1);
                  if (tq) at["transB"] = attr_i(1);
                  single(c, i, "Gemm", "", {p, q}, std::move(at));
                });
  if (c.wants(2)) c.give_reduced(2, c.dy(), beta);
}

void matmul(GradContext& c) {
  if (c.wants(0)) single(c, 0, "MatMulGradA", "memplan", {c.dy(), c.in(1)});
  if (c.wants(1)) single(c, 1, "MatMulGradB", "memplan", {c.in(0), c.dy()});
}

// memplan MatMulT: each gradient is one MatMulT whose output, the operand's shape, sums the broadcast batch
// axes down (a transposed weight's gradient lands on the weight as it is stored).
void matmul_t(GradContext& c) {
  const Op& f = c.fwd();
  product_grads(c, f.attr_int("trans_a", 0) != 0, f.attr_int("trans_b", 0) != 0,
                [&](std::size_t i, TensorId p, TensorId q, bool tp, bool tq) {
                  single(c, i, std::string(memplan_ops::kMatMulT), "memplan", {p, q},
                         {{"trans_a", attr_i(tp ? 1 : 0)}, {"trans_b", attr_i(tq ? 1 : 0)}});
                });
}

void batch_norm(GradContext& c) {
  multi(c, "BatchNormGrad", {c.dy(), c.in(0), c.in(1), c.out(3), c.out(4)}, {0, 1, 2});
}

void layer_norm(GradContext& c) {
  const auto axis = positive_axis(c, c.fwd().attr_int("axis", -1), c.shape(c.in(0)).size());
  multi(c, "LayerNormGrad", {c.dy(), c.in(0), c.in(1), c.out(1), c.out(2)}, {0, 1, 2},
        {{"axis", attr_i(static_cast<std::int64_t>(axis))}});
}

// Y = scale[c] * (X - mean) * invstd + B[c] with mean and invstd per sample n and group of channels (InstanceNormalization:
// one channel a group): one GroupNormGrad from X and the saved statistics (outputs 1 and 2, training_forward.cpp).
// With xhat = (X - mean) * invstd and g = dY * scale[c]: dX = invstd * (g - mean(g) - xhat * mean(g * xhat)) over
// the group's elements, dScale[c] = sum of dY * xhat, dB[c] = sum of dY over n and the spatial axes.
void group_norm(GradContext& c) {
  const Shape x = c.shape(c.in(0));
  if (x.size() < 2) c.unsupported("an input of rank below 2 has no channel axis");
  const std::int64_t groups = c.fwd().type == "GroupNormalization" ? c.fwd().attr_int("num_groups", 0) : x[1];
  multi(c, "GroupNormGrad", {c.dy(), c.in(0), c.in(1), c.out(1), c.out(2)}, {0, 1, 2}, {{"num_groups", attr_i(groups)}});
}

// memplan RMSNormalization (analysis/fused_ops.hpp): one RMSNormGrad from X, scale and the saved InvStdDev.
void rms_norm(GradContext& c) {
  const auto axis = positive_axis(c, c.fwd().attr_int("axis", -1), c.shape(c.in(0)).size());
  const bool scaled = c.in(1) != kNoTensor;
  multi(c, "RMSNormGrad", {c.dy(), c.in(0), c.in(1), c.out(1)}, scaled ? std::vector<std::size_t>{0, 1} : std::vector<std::size_t>{0},
        {{"axis", attr_i(static_cast<std::int64_t>(axis))}});
}

void softmax(GradContext& c) {
  const bool old = c.graph().opset > 0 && c.graph().opset < 13;  // before opset 13: flattened to 2-D at axis
  const auto axis = positive_axis(c, c.fwd().attr_int("axis", old ? 1 : -1), c.shape(c.in(0)).size());
  std::map<std::string, Attribute> at{{"axis", attr_i(static_cast<std::int64_t>(axis))}};
  if (old) at["coerce_2d"] = attr_i(1);
  single(c, 0, c.fwd().type == "Softmax" ? "SoftmaxGrad" : "LogSoftmaxGrad", "memplan", {c.dy(), c.out(0)}, std::move(at));
}

void max_pool(GradContext& c) {
  auto at = window_attrs(c, c.fwd().attr_ints("kernel_shape"));
  at["ceil_mode"] = attr_i(c.fwd().attr_int("ceil_mode", 0));
  at["storage_order"] = attr_i(c.fwd().attr_int("storage_order", 0));
  single(c, 0, "MaxPoolGrad", "memplan", {c.dy(), c.in(0), c.out(1)}, std::move(at));
}

void average_pool(GradContext& c) {
  auto at = window_attrs(c, c.fwd().attr_ints("kernel_shape"));
  at["ceil_mode"] = attr_i(c.fwd().attr_int("ceil_mode", 0));
  at["count_include_pad"] = attr_i(c.fwd().attr_int("count_include_pad", 0));
  single(c, 0, "AveragePoolGrad", "memplan", {c.dy()}, std::move(at));
}

// BroadcastTo(dY): dY (with the reduced axes re-inserted when keepdims was 0) broadcast to X, times scale.
void broadcast_back(GradContext& c, std::vector<std::int64_t> axes, bool keepdims, double scale) {
  std::map<std::string, Attribute> at{{"axes", attr_ints(std::move(axes))}, {"keepdims", attr_i(keepdims ? 1 : 0)}};
  if (scale != 1.0) at["scale"] = attr_f(scale);
  single(c, 0, "BroadcastTo", "memplan", {c.dy()}, std::move(at));
}

void global_average_pool(GradContext& c) {
  const Shape x = c.shape(c.in(0));
  std::vector<std::int64_t> axes;
  std::int64_t n = 1;
  for (std::size_t k = 2; k < x.size(); ++k) {
    axes.push_back(static_cast<std::int64_t>(k));
    n *= x[k];
  }
  broadcast_back(c, axes, true, n == 0 ? 1.0 : 1.0 / static_cast<double>(n));
}

void reduce(GradContext& c) {
  const Op& f = c.fwd();
  const Shape x = c.shape(c.in(0));
  const auto reduced = reduced_axes(c);
  if (!reduced) return c.give(0, c.dy());
  const std::vector<std::int64_t>& axes = *reduced;
  std::int64_t n = 1;
  for (auto a : axes) n *= x[static_cast<std::size_t>(a)];
  const double scale = f.type == "ReduceMean" && n > 0 ? 1.0 / static_cast<double>(n) : 1.0;
  broadcast_back(c, axes, f.attr_int("keepdims", 1) != 0, scale);
}

}  // namespace

std::optional<std::vector<std::int64_t>> reduced_axes(const GradContext& c) {
  const Op& f = c.fwd();
  const Shape x = c.shape(c.in(0));
  std::vector<std::int64_t> raw = f.attr_ints("axes");
  if (f.input(1) != kNoTensor) {
    const Tensor& t = c.tensor(f.input(1));
    if (!t.data) c.unsupported("axes are computed at run time");
    raw = t.data->as_int64();
  }
  if (raw.empty() && f.attr_int("noop_with_empty_axes", 0) != 0) return std::nullopt;
  std::vector<std::int64_t> axes;
  if (raw.empty())
    for (std::size_t k = 0; k < x.size(); ++k) axes.push_back(static_cast<std::int64_t>(k));
  for (auto a : raw) axes.push_back(static_cast<std::int64_t>(positive_axis(c, a, x.size())));
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return axes;
}

void add_nn_grads(GradTable& t) {
  t["Conv"] = {conv, 7u, 1u};
  t["ConvTranspose"] = {conv_transpose, 7u, 1u};
  t["Gemm"] = {gemm, 7u, 1u};
  t["MatMul"] = {matmul, 3u, 1u};
  t[std::string(memplan_ops::kMatMulT)] = {matmul_t, 3u, 1u};
  t["BatchNormTraining"] = {batch_norm, 7u, 1u};
  t["LayerNormalization"] = {layer_norm, 7u, 1u};
  t["InstanceNormalization"] = {group_norm, 7u, 1u};
  t["GroupNormalization"] = {group_norm, 7u, 1u};
  t[std::string(memplan_ops::kRMSNormalization)] = {rms_norm, 3u, 1u};
  t["Softmax"] = {softmax, 1u, 1u};
  t["LogSoftmax"] = {softmax, 1u, 1u};
  t["MaxPool"] = {max_pool, 1u, 1u};
  t["AveragePool"] = {average_pool, 1u, 1u};
  t["GlobalAveragePool"] = {global_average_pool, 1u, 1u};
  t["ReduceMean"] = {reduce, 1u, 1u};
  t["ReduceSum"] = {reduce, 1u, 1u};
}

}  // namespace memplan::analysis::autodiff
