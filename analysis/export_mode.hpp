// Signs that an ONNX model was exported in eval mode, read from its ops: a training plan of it is not the step PyTorch runs.
#pragma once

#include <cstddef>
#include <string>

#include "analysis/graph.hpp"

namespace memplan::analysis {

// What an eval-mode export (torch.onnx.export without training=TrainingMode.TRAINING) leaves in the graph:
// - BatchNormalization in inference form: training_mode absent or 0 and no running-statistics outputs
//   (the dynamo exporter, or TorchScript with do_constant_folding=False);
// - BatchNormalization folded into the convolution before it: TorchScript's constant folding replaces the
//   Conv's weight and bias by new constants it names "onnx::Conv_<n>" (the module's own are "<module>.weight");
// - Dropout that never drops: the data input alone, or a constant false training_mode. Dropout(x, ratio)
//   without training_mode is no sign: TorchScript's training export of scaled_dot_product_attention emits it
//   (samples/transformers/*.sdpa18.train.onnx), while its eval export drops Dropout altogether.
// A training export has none of these (BatchNormalization with training_mode=1, Dropout with training_mode
// true); a model without BatchNorm and Dropout shows no sign either way.
struct ExportModeSigns {
  std::size_t inference_batchnorm = 0;  // BatchNormalization ops in inference form
  std::size_t folded_batchnorm = 0;     // Conv ops whose weight and bias the exporter made by folding
  std::size_t inference_dropout = 0;    // Dropout ops in inference mode
  std::string example;                  // the first such op's name
  bool eval_mode() const { return inference_batchnorm + folded_batchnorm + inference_dropout > 0; }
  // "20 BatchNormalization folded into Conv (e.g. '/conv1/Conv'), 2 Dropout in inference mode"; empty if none.
  std::string summary() const;
};

// Reads `g` as imported (before prepare_forward rewrites its training ops).
ExportModeSigns export_mode_signs(const Graph& g);

}  // namespace memplan::analysis
