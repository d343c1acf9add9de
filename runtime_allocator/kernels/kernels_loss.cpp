// CPU kernels of the cross-entropy and sum losses and their gradients (docs/training-recipes.md, "Losses").
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "runtime_allocator/kernels/class_rows.hpp"
#include "runtime_allocator/kernels/cpu_kernels.hpp"

namespace memplan::runtime::cpu {
namespace {

struct Labelled {
  ClassRows rows;
  std::vector<std::int64_t> labels;  // -1: ignored (ignore_index, any negative label)
  std::int64_t valid = 0;
};

// The rows of input 0 along `axis` and the labels (input `labels_at`): a label outside [0, classes) that is
// not ignored is an error naming the op.
Labelled labelled(const Op& op, const Refs& in, std::size_t labels_at, std::int64_t axis, std::int64_t ignore) {
  const TensorRef& y = required(op, in, 0);
  if (y.dtype != DType::f32) unsupported(op, "float32 scores only");
  Labelled l;
  l.rows = class_rows(y.shape, normalize_axis(op, axis, y.shape.size()));
  l.labels = int_values(op, required(op, in, labels_at));
  if (static_cast<std::int64_t>(l.labels.size()) != l.rows.rows()) unsupported(op, "labels do not have one entry per row");
  for (auto& v : l.labels) {
    if (v == ignore || v < 0) {
      v = -1;
      continue;
    }
    if (v >= l.rows.classes)
      unsupported(op, "label " + std::to_string(v) + " is outside the " + std::to_string(l.rows.classes) + " classes");
    ++l.valid;
  }
  return l;
}

// Per row r: lse[r] = log sum_c exp(y[r, c]) (computed in double); log_prob (when given) = y - lse; returns
// the sum over labelled rows of lse[r] - y[r, label], and per row (when given) that loss or 0 if ignored.
double cross_entropy_rows(const Labelled& l, const float* y, float* lse, float* log_prob, float* row_loss) {
  double total = 0.0;
  for (std::int64_t r = 0; r < l.rows.rows(); ++r) {
    const std::int64_t b = l.rows.base(r), step = l.rows.inner;
    float m = -std::numeric_limits<float>::infinity();
    for (std::int64_t c = 0; c < l.rows.classes; ++c) m = std::max(m, y[b + c * step]);
    double s = 0.0;
    for (std::int64_t c = 0; c < l.rows.classes; ++c) s += std::exp(static_cast<double>(y[b + c * step]) - m);
    const double row_lse = m + std::log(s);
    if (lse) lse[r] = static_cast<float>(row_lse);
    if (log_prob)
      for (std::int64_t c = 0; c < l.rows.classes; ++c) log_prob[b + c * step] = static_cast<float>(y[b + c * step] - row_lse);
    const std::int64_t label = l.labels[static_cast<std::size_t>(r)];
    const double loss = label >= 0 ? row_lse - y[b + label * step] : 0.0;
    if (row_loss) row_loss[r] = static_cast<float>(loss);
    total += loss;
  }
  return total;
}

float* optional_out(const Refs& out, std::size_t i) { return i < out.size() && out[i].data ? out[i].as<float>() : nullptr; }

// CrossEntropyLoss(y, labels) -> (loss, lse): loss = mean over labelled rows of lse[r] - y[r, label] (NaN when
// no row is labelled, as PyTorch's mean over none).
void k_cross_entropy(const Op& op, const Refs& in, const Refs& out) {
  const Labelled l = labelled(op, in, 1, op.attr_int("axis", 1), op.attr_int("ignore_index", -100));
  const double total = cross_entropy_rows(l, in[0].as<float>(), optional_out(out, 1), nullptr, nullptr);
  *out[0].as<float>() = static_cast<float>(total / static_cast<double>(l.valid));
}

// ONNX SoftmaxCrossEntropyLoss (opset 12; class axis 1, no class weights): reduction mean, sum or none, and
// the optional log_prob output.
void k_softmax_cross_entropy(const Op& op, const Refs& in, const Refs& out) {
  if (in.size() > 2 && in[2].data) unsupported(op, "class weights are not supported");
  const auto ignore = op.attr("ignore_index") ? op.attr_int("ignore_index", -1) : std::numeric_limits<std::int64_t>::min();
  const Labelled l = labelled(op, in, 1, 1, ignore);
  const std::string reduction = op.attr_string("reduction", "mean");
  const double total = cross_entropy_rows(l, in[0].as<float>(), nullptr, optional_out(out, 1),
                                          reduction == "none" ? out[0].as<float>() : nullptr);
  if (reduction == "mean") *out[0].as<float>() = static_cast<float>(total / static_cast<double>(l.valid));
  else if (reduction == "sum") *out[0].as<float>() = static_cast<float>(total);
  else if (reduction != "none") unsupported(op, "reduction '" + reduction + "'");
}

// CrossEntropyLossGrad(y, lse, labels[, dloss]) -> dy; reads element i of y before writing element i of dy
// (dy may take y's bytes).
void k_cross_entropy_grad(const Op& op, const Refs& in, const Refs& out) {
  const Labelled l = labelled(op, in, 2, op.attr_int("axis", 1), op.attr_int("ignore_index", -100));
  const float* y = in[0].as<float>();
  const float* lse = required(op, in, 1).as<float>();
  const float scale = scalar_value(op, in, 3, 1.0f) / static_cast<float>(l.valid);
  float* dy = out[0].as<float>();
  for (std::int64_t r = 0; r < l.rows.rows(); ++r) {
    const std::int64_t b = l.rows.base(r), step = l.rows.inner, label = l.labels[static_cast<std::size_t>(r)];
    for (std::int64_t c = 0; c < l.rows.classes; ++c) {
      const std::int64_t i = b + c * step;
      dy[i] = label < 0 ? 0.0f : (std::exp(y[i] - lse[r]) - (c == label ? 1.0f : 0.0f)) * scale;
    }
  }
}

void k_sum_loss(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& y = required(op, in, 0);
  double s = 0.0;
  for (std::int64_t i = 0; i < y.elements(); ++i) s += y.as<float>()[i];
  *out[0].as<float>() = static_cast<float>(s);
}

void k_sum_loss_grad(const Op& op, const Refs& in, const Refs& out) {
  const float v = scalar_value(op, in, 0, 1.0f);
  std::fill_n(out[0].as<float>(), out[0].elements(), v);
}

}  // namespace

void add_loss_kernels(KernelTable& t) {
  t["memplan::CrossEntropyLoss"] = {k_cross_entropy, false};
  t["memplan::CrossEntropyLossGrad"] = {k_cross_entropy_grad, true};
  t["memplan::SumLoss"] = {k_sum_loss, false};
  t["SoftmaxCrossEntropyLoss"] = {k_softmax_cross_entropy, false};
  t["memplan::SumLossGrad"] = {k_sum_loss_grad, true};
}

}  // namespace memplan::runtime::cpu
