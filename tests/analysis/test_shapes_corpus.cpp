// Shape inference over every sample model: each infers completely, folds its shape arithmetic, and
// agrees with the shapes a fixed-dim export of the same model declares for its outputs.
#include <doctest/doctest.h>

#include <filesystem>

#include "analysis/import.hpp"
#include "test_shapes_util.hpp"

using namespace shapes_test;
namespace fs = std::filesystem;

namespace {

std::string models() { return std::string(MEMPLAN_SOURCE_DIR) + "/samples/models/"; }

ShapeOptions corpus_options() {
  ShapeOptions o;
  o.dims = {{"batch", 32}, {"seq", 128}};
  return o;
}

}  // namespace

TEST_CASE("every sample model infers with no tensor of unknown shape (batch=32, seq=128)") {
  int n = 0;
  for (const auto& e : fs::directory_iterator(models())) {
    if (e.path().extension() != ".onnx") continue;
    ++n;
    CAPTURE(e.path().string());
    const Graph in = import_onnx(e.path().string());
    const Graph g = infer_shapes(in, corpus_options());
    for (const auto& t : g.tensors) {
      CAPTURE(t.name);
      CHECK(t.shape_known());
      CHECK(t.dtype != DType::undefined);
    }
    CHECK_NOTHROW(g.validate());
    // Folding only removes ops; nothing left is a shape-arithmetic op whose inputs are all constant.
    CHECK(g.ops.size() <= in.ops.size());
    for (const auto& op : g.ops) {
      if (op.type != "Shape") continue;
      FAIL("a Shape op survived inference: ", op.name);
    }
    CHECK(g.outputs.size() == in.outputs.size());
  }
  CHECK(n >= 19);
}

TEST_CASE("the symbolic export binds to the same shapes as the fixed-dim export (batch=1)") {
  ShapeOptions o;
  o.dims = {{"batch", 1}, {"seq", 128}};
  for (const char* name : {"bert_base", "distilbert", "resnet18", "mobilenet_v2", "vgg16"}) {
    CAPTURE(name);
    const Graph fixed = infer_shapes(import_onnx(models() + name + ".onnx"), o);
    const Graph dyn = infer_shapes(import_onnx(models() + name + ".dyn.onnx"), o);
    REQUIRE(fixed.outputs.size() == dyn.outputs.size());
    for (std::size_t k = 0; k < fixed.outputs.size(); ++k) {
      CHECK(fixed.tensors[fixed.outputs[k]].shape() == dyn.tensors[dyn.outputs[k]].shape());
      CHECK(fixed.tensors[fixed.outputs[k]].dtype == dyn.tensors[dyn.outputs[k]].dtype);
    }
  }
}

TEST_CASE("known model outputs: classifiers give [batch,1000], BERT hidden states [batch,seq,768]") {
  const ShapeOptions o = corpus_options();
  for (const char* name : {"resnet18.dyn", "resnet50.dyn", "mobilenet_v2.dyn", "vgg16.dyn", "resnet50.train"}) {
    CAPTURE(name);
    const Graph g = infer_shapes(import_onnx(models() + name + ".onnx"), o);
    CHECK(g.tensors[g.outputs[0]].shape() == Shape{32, 1000});
  }
  const Graph bert = infer_shapes(import_onnx(models() + "bert_base.dyn.onnx"), o);
  CHECK(bert.tensors[bert.outputs[0]].shape() == Shape{32, 128, 768});
  const Graph distil = infer_shapes(import_onnx(models() + "distilbert.dyn.onnx"), o);
  CHECK(distil.tensors[distil.outputs[0]].shape() == Shape{32, 128, 768});
}

TEST_CASE("an unbound symbolic dim of a sample model names the symbol and the input") {
  ShapeOptions o;
  o.dims = {{"batch", 4}};
  std::string msg;
  CHECK(kind_of([&] { infer_shapes(import_onnx(models() + "bert_base.dyn.onnx"), o); }, &msg) == ErrorKind::shape);
  CHECK(msg.find("'seq'") != std::string::npos);
  CHECK(msg.find("input_ids") != std::string::npos);
}
