// Tests of export_mode_signs: eval-mode exports are recognised by their ops, training exports are not.
#include <doctest/doctest.h>

#include <string>

#include "analysis/export_mode.hpp"
#include "analysis/import.hpp"

using namespace memplan;
using namespace memplan::analysis;

namespace {
Graph sample(const std::string& rel) { return import_model(std::string(MEMPLAN_SOURCE_DIR) + "/samples/" + rel); }

// x -> [Conv] -> [BatchNormalization] -> [Dropout]: the weight names and modes chosen per case.
Graph conv_bn_dropout(const std::string& conv_weight, std::int64_t bn_training, bool bn_stats_out, int dropout_mode) {
  Graph g;
  g.name = "case";
  auto t = [&](const std::string& name, TensorRole role, std::vector<std::int64_t> dims) {
    Tensor x;
    x.name = name;
    x.dtype = DType::f32;
    x.role = role;
    x.rank_known = true;
    for (auto d : dims) x.dims.push_back(Dim::of(d));
    g.tensors.push_back(x);
    return static_cast<TensorId>(g.tensors.size() - 1);
  };
  const TensorId x = t("x", TensorRole::input, {1, 3, 4, 4});
  const TensorId w = t(conv_weight, TensorRole::weight, {2, 3, 1, 1}), b = t(conv_weight + "_b", TensorRole::weight, {2});
  const TensorId c = t("c", TensorRole::activation, {}), y = t("y", TensorRole::activation, {});
  std::vector<TensorId> stats;
  for (const char* n : {"scale", "bias", "mean", "var"}) stats.push_back(t(n, TensorRole::weight, {2}));
  Op conv;
  conv.name = "/conv/Conv";
  conv.type = "Conv";
  conv.inputs = {x, w, b};
  conv.outputs = {c};
  Op bn;
  bn.name = "/bn/BatchNormalization";
  bn.type = "BatchNormalization";
  bn.inputs = {c, stats[0], stats[1], stats[2], stats[3]};
  bn.outputs = {y};
  if (bn_stats_out) bn.outputs.push_back(t("rm", TensorRole::activation, {2}));
  Attribute mode_attr;
  mode_attr.i = bn_training;
  bn.attrs["training_mode"] = mode_attr;
  g.ops = {conv, bn};
  Op drop;
  drop.name = "/drop/Dropout";
  drop.type = "Dropout";
  drop.inputs = {y};
  // dropout_mode: -1 Dropout(y); -2 Dropout(y, ratio); 0 / 1 Dropout(y, ratio, constant training_mode).
  if (dropout_mode != -1) drop.inputs.push_back(t("ratio", TensorRole::weight, {}));
  if (dropout_mode >= 0) {
    const TensorId mode = t("mode", TensorRole::weight, {});
    g.tensors[mode].dtype = DType::boolean;
    g.tensors[mode].data = std::make_shared<const TensorData>(TensorData{DType::boolean, {}, {static_cast<std::byte>(dropout_mode)}});
    drop.inputs.push_back(mode);
  }
  drop.outputs = {t("z", TensorRole::activation, {})};
  g.ops.push_back(drop);
  g.inputs = {x};
  g.outputs = {drop.outputs[0]};
  g.relink();
  return g;
}
}  // namespace

TEST_CASE("TorchScript eval exports show BatchNorm folded into Conv, and its training exports show nothing") {
  const ExportModeSigns cnn = export_mode_signs(sample("models/tiny_cnn.onnx"));
  CHECK(cnn.folded_batchnorm == 1);
  CHECK(cnn.example == "/c1/Conv");
  CHECK(cnn.eval_mode());
  CHECK(cnn.summary().find("folded") != std::string::npos);
  CHECK(export_mode_signs(sample("models/resnet18.dyn.onnx")).folded_batchnorm > 0);
  for (const char* train : {"models/resnet18.train.onnx", "models/mobilenet_v2.train.onnx", "transformers/bert_small.train.onnx",
                            "transformers/gpt2_small.train.onnx", "transformers/llama_gqa.sdpa18.train.onnx",
                            "transformers/bert_small.sdpa18.train.onnx", "transformers/qwen2_gqa.sdpa18.train.onnx"}) {
    CAPTURE(train);
    const ExportModeSigns s = export_mode_signs(sample(train));
    CHECK_FALSE(s.eval_mode());
    CHECK(s.summary().empty());
  }
  // No BatchNorm and no Dropout: nothing to tell, either way.
  CHECK_FALSE(export_mode_signs(sample("models/tiny_mlp.onnx")).eval_mode());
  CHECK_FALSE(export_mode_signs(sample("models/vgg16.dyn.onnx")).eval_mode());
}

TEST_CASE("inference BatchNormalization and Dropout without a true training_mode are eval-mode signs") {
  const ExportModeSigns all = export_mode_signs(conv_bn_dropout("conv.weight", 0, false, -1));
  CHECK(all.inference_batchnorm == 1);
  CHECK(all.inference_dropout == 1);
  CHECK(all.folded_batchnorm == 0);
  CHECK(all.example == "/bn/BatchNormalization");
  const ExportModeSigns off = export_mode_signs(conv_bn_dropout("conv.weight", 1, true, 0));
  CHECK(off.inference_batchnorm == 0);
  CHECK(off.inference_dropout == 1);  // training_mode input constant false
  const ExportModeSigns train = export_mode_signs(conv_bn_dropout("conv.weight", 1, true, 1));
  CHECK_FALSE(train.eval_mode());
  CHECK(export_mode_signs(conv_bn_dropout("onnx::Conv_7", 1, true, 1)).folded_batchnorm == 1);
  // Dropout(x, ratio): what TorchScript's training export of SDPA emits; no sign.
  CHECK(export_mode_signs(conv_bn_dropout("conv.weight", 1, true, -2)).inference_dropout == 0);
}
