// Eval-mode export detection: inference BatchNormalization, BatchNorm folded into Conv, Dropout that never drops.
#include "analysis/export_mode.hpp"

namespace memplan::analysis {

namespace {

// TorchScript's constant folding names the constants it computes after their consumer's op type.
bool folded_constant(const Graph& g, TensorId t) {
  if (t == kNoTensor) return false;
  const Tensor& x = g.tensors[t];
  return x.role == TensorRole::weight && x.producer == kNoOp && x.name.starts_with("onnx::Conv_");
}

// Dropout(x) alone, or with a constant false training_mode. Dropout(x, ratio) without training_mode is no
// sign: TorchScript's training-mode export of scaled_dot_product_attention emits exactly that.
bool inference_dropout(const Graph& g, const Op& op) {
  if (op.input(1) == kNoTensor && op.input(2) == kNoTensor) return true;
  const TensorId mode = op.input(2);
  if (mode == kNoTensor || !g.tensors[mode].data) return false;  // no flag, or computed at run time
  const auto v = g.tensors[mode].data->as_int64();
  return !v.empty() && v[0] == 0;
}

}  // namespace

std::string ExportModeSigns::summary() const {
  std::string out;
  auto add = [&](std::size_t n, const char* what) {
    if (n) out += (out.empty() ? "" : ", ") + std::to_string(n) + " " + what;
  };
  add(inference_batchnorm, "BatchNormalization in inference form");
  add(folded_batchnorm, "Conv with BatchNorm folded in");
  add(inference_dropout, "Dropout in inference mode");
  if (!out.empty() && !example.empty()) out += " (e.g. '" + example + "')";
  return out;
}

ExportModeSigns export_mode_signs(const Graph& g) {
  ExportModeSigns s;
  auto note = [&](const Op& op, std::size_t& count) {
    if (count++ == 0 && s.example.empty()) s.example = op.name;
  };
  for (const Op& op : g.ops) {
    if (!op.domain.empty() && op.domain != "ai.onnx") continue;
    if (op.type == "BatchNormalization") {
      if (op.attr_int("training_mode", 0) == 0 && op.output(1) == kNoTensor) note(op, s.inference_batchnorm);
    } else if (op.type == "Conv") {
      if (folded_constant(g, op.input(1)) && folded_constant(g, op.input(2))) note(op, s.folded_batchnorm);
    } else if (op.type == "Dropout") {
      if (inference_dropout(g, op)) note(op, s.inference_dropout);
    }
  }
  return s;
}

}  // namespace memplan::analysis
