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

// LinearCrossEntropy(X [N, K], W [K, V] (or [V, K] with trans_b), labels [N][, bias [V]]) -> (loss, dX, dW[, dbias]):
// the loss of CrossEntropyLoss over the logits X W + bias, and its gradients at dloss = 1 (float32). Row by row: a
// row's logits live in one V-long buffer, never all N (the `chunk` attribute sizes the device's buffers).
class LinearCrossEntropyRows {
 public:
  LinearCrossEntropyRows(const Op& op, const Refs& in, const Refs& out) : op_(op) {
    const TensorRef& x = required(op, in, 0);
    const TensorRef& w = required(op, in, 1);
    for (const TensorRef* t : {&x, &w})
      if (t->dtype != DType::f32 || t->shape.size() != 2) unsupported(op, "X and W must be float32 matrices");
    tb_ = op.attr_int("trans_b", 0) != 0;
    n_ = x.shape[0], k_ = x.shape[1], v_ = w.shape[tb_ ? 0 : 1];
    if (w.shape[tb_ ? 1 : 0] != k_) unsupported(op, "X's columns and W's hidden dim differ");
    xs_ = x.as<float>(), ws_ = w.as<float>();
    bias_ = in.size() > 3 && in[3].data ? in[3].as<float>() : nullptr;
    labels_ = int_values(op, required(op, in, 2));
    if (static_cast<std::int64_t>(labels_.size()) != n_) unsupported(op, "labels do not have one entry per row of X");
    ignore_ = op.attr_int("ignore_index", -100);
    dx_ = optional_out(out, 1), dw_ = optional_out(out, 2), db_ = optional_out(out, 3);
    loss_ = out[0].as<float>();
    row_.resize(static_cast<std::size_t>(v_));
  }

  void run() {
    if (dw_) std::fill_n(dw_, k_ * v_, 0.0f);
    if (db_) std::fill_n(db_, v_, 0.0f);
    double total = 0.0;
    std::int64_t valid = 0;
    for (std::int64_t r = 0; r < n_; ++r) {
      const std::int64_t label = labels_[static_cast<std::size_t>(r)];
      const bool keep = label != ignore_ && label >= 0;
      if (keep && label >= v_) unsupported(op_, "label " + std::to_string(label) + " is outside the " + std::to_string(v_) + " classes");
      logits(r);
      const double lse = log_sum_exp();
      if (keep) total += lse - row_[static_cast<std::size_t>(label)], ++valid;
      // the row's d loss / d logits before the mean's scale: softmax - onehot, zero when ignored
      for (std::int64_t c = 0; c < v_; ++c)
        row_[c] = keep ? static_cast<float>(std::exp(row_[c] - lse)) - (c == label ? 1.0f : 0.0f) : 0.0f;
      gradients(r);
    }
    // mean over labelled rows (NaN when none, as PyTorch's); the gradients scaled alike
    *loss_ = static_cast<float>(total / static_cast<double>(valid));
    const float scale = 1.0f / static_cast<float>(valid);
    for (auto [p, count] : {std::pair{dx_, n_ * k_}, std::pair{dw_, k_ * v_}, std::pair{db_, v_}})
      if (p) std::for_each(p, p + count, [scale](float& e) { e *= scale; });
  }

 private:
  // W's element (j, c) of the [K, V] product, in either layout.
  std::int64_t wi(std::int64_t j, std::int64_t c) const { return tb_ ? c * k_ + j : j * v_ + c; }

  void logits(std::int64_t r) {
    const float* xr = xs_ + r * k_;
    for (std::int64_t c = 0; c < v_; ++c) row_[c] = bias_ ? bias_[c] : 0.0f;
    for (std::int64_t j = 0; j < k_; ++j)
      for (std::int64_t c = 0; c < v_; ++c) row_[c] += xr[j] * ws_[wi(j, c)];
  }

  double log_sum_exp() const {
    const float m = *std::max_element(row_.begin(), row_.end());
    double sum = 0.0;
    for (float e : row_) sum += std::exp(static_cast<double>(e) - m);
    return m + std::log(sum);
  }

  void gradients(std::int64_t r) {
    const float* xr = xs_ + r * k_;
    for (std::int64_t j = 0; dx_ && j < k_; ++j) {
      double acc = 0.0;
      for (std::int64_t c = 0; c < v_; ++c) acc += static_cast<double>(row_[c]) * ws_[wi(j, c)];
      dx_[r * k_ + j] = static_cast<float>(acc);
    }
    for (std::int64_t j = 0; dw_ && j < k_; ++j)
      for (std::int64_t c = 0; c < v_; ++c) dw_[wi(j, c)] += xr[j] * row_[c];
    for (std::int64_t c = 0; db_ && c < v_; ++c) db_[c] += row_[c];
  }

  const Op& op_;
  bool tb_ = false;
  std::int64_t n_ = 0, k_ = 0, v_ = 0, ignore_ = -100;
  const float *xs_ = nullptr, *ws_ = nullptr, *bias_ = nullptr;
  std::vector<std::int64_t> labels_;
  float *dx_ = nullptr, *dw_ = nullptr, *db_ = nullptr, *loss_ = nullptr;
  std::vector<float> row_;
};

void k_linear_cross_entropy(const Op& op, const Refs& in, const Refs& out) { LinearCrossEntropyRows(op, in, out).run(); }

}  // namespace

void add_loss_kernels(KernelTable& t) {
  t["memplan::LinearCrossEntropy"] = {k_linear_cross_entropy, false};
  t["memplan::CrossEntropyLoss"] = {k_cross_entropy, false};
  t["memplan::CrossEntropyLossGrad"] = {k_cross_entropy_grad, true};
  t["memplan::SumLoss"] = {k_sum_loss, false};
  t["SoftmaxCrossEntropyLoss"] = {k_softmax_cross_entropy, false};
  t["memplan::SumLossGrad"] = {k_sum_loss_grad, true};
}

}  // namespace memplan::runtime::cpu
