// Training graphs of every sample model: shapes known, valid, liveness runs, every weight trains.
#include <doctest/doctest.h>

#include <filesystem>

#include "analysis/import.hpp"
#include "analysis/liveness.hpp"
#include "analysis/shapes.hpp"
#include "analysis/training.hpp"

using namespace memplan;
using namespace memplan::analysis;
namespace fs = std::filesystem;

namespace {

struct Case {
  const char* file;
  DimBindings dims;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"resnet18.train.onnx", {{"batch", 32}}},   {"resnet50.train.onnx", {{"batch", 32}}},
      {"mobilenet_v2.train.onnx", {{"batch", 32}}}, {"vgg16.train.onnx", {{"batch", 32}}},
      {"bert_base.dyn.onnx", {{"batch", 8}, {"seq", 128}}}, {"distilbert.dyn.onnx", {{"batch", 8}, {"seq", 128}}},
      {"squeezenet1_1.onnx", {}}, {"tiny_mlp.onnx", {}}, {"tiny_cnn.onnx", {}}, {"tiny_gpt.onnx", {}},
  };
  return c;
}

Graph shaped(const Case& c) {
  Graph g = import_onnx(std::string(MEMPLAN_SOURCE_DIR) + "/samples/models/" + c.file);
  ShapeOptions so;
  so.dims = c.dims;
  return infer_shapes(g, so);
}

}  // namespace

TEST_CASE("every sample model builds a valid training graph whose every tensor has a shape") {
  for (const Case& c : cases()) {
    CAPTURE(c.file);
    const Graph fwd = shaped(c);
    for (Optimizer opt : {Optimizer::sgd, Optimizer::adam}) {
      TrainingOptions to;
      to.optimizer = opt;
      TrainingGraph tg = build_training_graph(fwd, to);
      const Graph& g = tg.graph;
      CHECK_NOTHROW(g.validate());
      for (const Tensor& t : g.tensors) {
        CAPTURE(t.name);
        if (t.producer != kNoOp || !t.consumers.empty()) CHECK(t.shape_known());
      }
      // Every float weight read in a parameter slot trains; the parameter count is positive.
      CHECK(!tg.param_grads.empty());
      for (auto [w, gw] : tg.param_grads) {
        CHECK(g.tensors[gw].shape() == g.tensors[w].shape());
        CHECK(g.tensors[gw].role == TensorRole::gradient);
      }
      const auto trainable = trainable_weights(fwd, to);
      std::size_t n_trainable = 0;
      for (bool b : trainable) n_trainable += b ? 1 : 0;
      CHECK(tg.param_grads.size() >= n_trainable);  // Identity-of-weight outputs train as their own parameters
      if (opt == Optimizer::adam) CHECK(tg.optimizer_state.size() == 2 * tg.param_grads.size() + 1);
      Liveness fl = analyze_liveness(fwd, topological_order(fwd));
      Liveness tl = analyze_liveness(g, training_schedule(tg));
      CHECK(tl.lower_bound_bytes > fl.lower_bound_bytes);  // activations saved for backward stay live
      CHECK(!tg.saved_for_backward.empty());
    }
  }
}

TEST_CASE("training exports keep BatchNorm statistics and Dropout masks for backward") {
  const Graph fwd = shaped(cases()[0]);
  TrainingGraph tg = build_training_graph(fwd, {});
  const Graph& g = tg.graph;
  int bn = 0;
  for (const Op& op : g.ops) {
    if (op.type == "BatchNormalization") FAIL("a training-mode BatchNormalization was left in place");
    if (op.type != "BatchNormTraining") continue;
    ++bn;
    REQUIRE(op.outputs.size() == 5);
    CHECK(g.tensors[op.outputs[1]].role == TensorRole::weight);  // running mean: persistent
    CHECK(g.tensors[op.outputs[3]].role == TensorRole::activation);
    CHECK(g.tensors[op.outputs[3]].shape() == std::vector<std::int64_t>{g.tensors[op.inputs[0]].shape()[1]});
  }
  CHECK(bn == 20);
  const Graph vgg = build_training_graph(shaped(cases()[3]), {}).graph;
  int dropout_grads = 0;
  for (const Op& op : vgg.ops)
    if (op.type == "DropoutGrad") {
      ++dropout_grads;
      CHECK(vgg.tensors[op.inputs[1]].dtype == DType::boolean);
      CHECK(vgg.ops[vgg.tensors[op.inputs[1]].producer].type == "Dropout");
    }
  CHECK(dropout_grads == 2);
}

TEST_CASE("a training graph survives a JSON round trip with the same fingerprint") {
  Case c{"resnet18.train.onnx", {{"batch", 2}}};
  TrainingOptions to;
  to.optimizer = Optimizer::adam;
  TrainingGraph tg = build_training_graph(shaped(c), to);
  Graph back = import_json(export_json(tg.graph));
  CHECK(back.fingerprint() == tg.graph.fingerprint());
  CHECK(back.ops.size() == tg.graph.ops.size());
  for (OpId o = 0; o < back.ops.size(); ++o) CHECK(back.ops[o].phase == tg.graph.ops[o].phase);
}
