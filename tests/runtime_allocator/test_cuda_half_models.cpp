// Host-side test (no device needed): every op of the bf16/fp16 autocast training graphs of the sample CNNs and
// transformers, as build_training_graph shapes them (and the CLI fuses them), has a CUDA kernel for its dtypes.
#include <doctest/doctest.h>

#ifdef MEMPLAN_HAVE_CUDA
#include <map>
#include <set>
#include <string>

#include "analysis/import.hpp"
#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "planner/fusion.hpp"
#include "runtime_allocator/cuda/cuda_kernels.hpp"

using namespace memplan;
using analysis::Loss;
using analysis::Optimizer;
using analysis::Precision;

namespace {

analysis::Graph shaped_sample(const std::string& path, std::map<std::string, std::int64_t> dims, bool fuse) {
  analysis::ShapeOptions so;
  so.dims = std::move(dims);
  analysis::Graph g = analysis::infer_shapes(analysis::import_model(std::string(MEMPLAN_SOURCE_DIR) + "/samples/" + path), so);
  if (!fuse) return g;
  planner::FuseOptions fo;
  fo.training = true;  // as `memplan plan --train` fuses
  return planner::fuse_graph(g, fo).graph;
}

// "Type (reason)" of every op the CUDA kernels refuse, once per type and reason, one a line.
std::string refused(const analysis::TrainingGraph& tg) {
  std::set<std::string> seen;
  for (const auto& op : tg.graph.ops)
    if (const std::string why = runtime::cuda::cuda_unsupported_reason(tg.graph, op); !why.empty()) seen.insert(op.type + " (" + why + ")");
  std::string out;
  for (const auto& s : seen) out += s + "\n";
  return out;
}

analysis::TrainingOptions options(Precision p, Loss l, Optimizer o) {
  analysis::TrainingOptions to;
  to.precision = p;
  to.loss = l;
  to.optimizer = o;
  to.loss_scaling = p == Precision::fp16;
  return to;
}

}  // namespace

TEST_CASE("every op of a bf16/fp16 ResNet-18, MobileNet-V2 and tiny CNN training step has a CUDA kernel") {
  for (const char* model : {"models/resnet18.train.onnx", "models/mobilenet_v2.train.onnx", "models/tiny_cnn.onnx"}) {
    const analysis::Graph g = shaped_sample(model, {{"batch", 2}}, true);
    for (Precision p : {Precision::bf16, Precision::fp16})
      for (Loss l : {Loss::mse, Loss::ce})
        for (Optimizer o : {Optimizer::momentum, Optimizer::adam}) {
          CAPTURE(std::string(model));
          CAPTURE(std::string(analysis::precision_name(p)));
          CAPTURE(std::string(analysis::loss_name(l)));
          CAPTURE(std::string(analysis::optimizer_name(o)));
          const auto tg = analysis::build_training_graph(g, options(p, l, o));
          CHECK(refused(tg) == "");
        }
  }
}

TEST_CASE("every op of the fused bf16 training steps of the sample transformers has a CUDA kernel") {
  struct Case {
    const char* path;
    std::map<std::string, std::int64_t> dims;
  };
  const Case cases[] = {{"transformers/bert_small.train.onnx", {{"batch", 2}, {"seq", 32}}},
                        {"transformers/gpt2_small.train.onnx", {{"batch", 2}, {"seq", 32}}},
                        {"transformers/llama_gqa.train.onnx", {{"batch", 2}, {"seq", 32}}},
                        {"transformers/deit_tiny.train.onnx", {{"batch", 2}}}};
  for (const Case& c : cases) {
    const analysis::Graph g = shaped_sample(c.path, c.dims, true);
    for (Loss l : {Loss::ce, Loss::mse}) {
      CAPTURE(std::string(c.path));
      CAPTURE(std::string(analysis::loss_name(l)));
      const auto tg = analysis::build_training_graph(g, options(Precision::bf16, l, Optimizer::adamw));
      CHECK(refused(tg) == "");
    }
  }
}
#endif
