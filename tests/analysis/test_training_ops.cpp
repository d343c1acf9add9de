// Per forward op type: the backward op types emitted and exactly the forward tensors they read.
#include <doctest/doctest.h>

#include <functional>
#include <set>

#include "analysis/training.hpp"
#include "tests/analysis/test_training_fixture.hpp"

using namespace memplan;
using namespace memplan::analysis;
using memplan::analysis::testing::af;
using memplan::analysis::testing::ai;
using memplan::analysis::testing::aints;
using memplan::analysis::testing::GraphBuilder;
using S = std::set<std::string>;
using Dims = std::vector<std::int64_t>;

namespace {

// x * w: an activation that needs a gradient (w trains), named "a".
TensorId trained(GraphBuilder& b, const Dims& d, const std::string& n = "a") {
  auto x = b.input(n + "_x", d);
  auto w = b.weight(n + "_w", d);
  return b.op1("Mul", {x, w}, n, d);
}

struct Case {
  const char* name;
  std::function<void(GraphBuilder&)> build;  // the op under test is the one named "op"
  S types;                                   // backward op types emitted for it
  S reads;                                   // forward tensors (no constants) those read besides dY
};

std::vector<const Op*> backward_of(const Graph& g, const std::string& fwd) {
  std::vector<const Op*> out;
  for (const Op& op : g.ops)
    if (op.phase == Phase::backward && op.name.rfind(fwd + "/grad/", 0) == 0) out.push_back(&op);
  return out;
}

TensorId out1(GraphBuilder& b, const std::string& type, std::vector<TensorId> ins, const Dims& d,
              std::map<std::string, Attribute> attrs = {}) {
  TensorId y = b.op1(type, std::move(ins), "y", d, std::move(attrs));
  b.g.ops.back().name = "op";
  b.output(y);
  return y;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"Relu", [](GraphBuilder& b) { out1(b, "Relu", {trained(b, {2, 3})}, {2, 3}); }, {"ReluGrad"}, {"y"}},
      {"Sigmoid", [](GraphBuilder& b) { out1(b, "Sigmoid", {trained(b, {2, 3})}, {2, 3}); }, {"SigmoidGrad"}, {"y"}},
      {"Tanh", [](GraphBuilder& b) { out1(b, "Tanh", {trained(b, {2, 3})}, {2, 3}); }, {"TanhGrad"}, {"y"}},
      {"Sqrt", [](GraphBuilder& b) { out1(b, "Sqrt", {trained(b, {2, 3})}, {2, 3}); }, {"SqrtGrad"}, {"y"}},
      {"Erf", [](GraphBuilder& b) { out1(b, "Erf", {trained(b, {2, 3})}, {2, 3}); }, {"ErfGrad"}, {"a"}},
      {"Softmax", [](GraphBuilder& b) { out1(b, "Softmax", {trained(b, {2, 3})}, {2, 3}, {{"axis", ai(-1)}}); },
       {"SoftmaxGrad"}, {"y"}},
      {"Clip",
       [](GraphBuilder& b) {
         out1(b, "Clip", {trained(b, {2, 3}), b.constant("lo", {}, {0}), b.constant("hi", {}, {6})}, {2, 3});
       },
       {"ClipGrad"}, {"a"}},
      {"Pow", [](GraphBuilder& b) { out1(b, "Pow", {trained(b, {2, 3}), b.constant("two", {}, {2})}, {2, 3}); },
       {"PowGradBase"}, {"a"}},
      {"Div both",
       [](GraphBuilder& b) { out1(b, "Div", {trained(b, {2, 3}), trained(b, {2, 3}, "c")}, {2, 3}); },
       {"Div", "DivGradB"}, {"a", "c"}},
      {"Mul by a constant", [](GraphBuilder& b) { out1(b, "Mul", {trained(b, {2, 3}), b.constant("k", {}, {0.5})}, {2, 3}); },
       {"Mul"}, {}},
      {"Add broadcast", [](GraphBuilder& b) { out1(b, "Add", {trained(b, {2, 3}), trained(b, {3}, "c")}, {2, 3}); },
       {"ReduceSumTo"}, {}},
      {"Where",
       [](GraphBuilder& b) {
         auto cond = b.input("cond", {2, 3}, DType::boolean);
         out1(b, "Where", {cond, trained(b, {2, 3}), b.constant("zero", {}, {0})}, {2, 3});
       },
       {"WhereGrad"}, {"cond"}},
      {"Transpose", [](GraphBuilder& b) { out1(b, "Transpose", {trained(b, {2, 3})}, {3, 2}); }, {"Transpose"}, {}},
      {"Reshape",
       [](GraphBuilder& b) {
         out1(b, "Reshape", {trained(b, {2, 3}), b.constant("shape", {1}, {6}, DType::i64)}, {6});
       },
       {"Reshape"}, {}},
      {"Expand",
       [](GraphBuilder& b) { out1(b, "Expand", {trained(b, {1, 3}), b.constant("shape", {2}, {4, 3}, DType::i64)}, {4, 3}); },
       {"ReduceSumTo"}, {}},
      {"ReduceMean",
       [](GraphBuilder& b) { out1(b, "ReduceMean", {trained(b, {2, 3, 4})}, {2, 4}, {{"axes", aints({1})}, {"keepdims", ai(0)}}); },
       {"BroadcastTo"}, {}},
      {"GlobalAveragePool", [](GraphBuilder& b) { out1(b, "GlobalAveragePool", {trained(b, {2, 3, 4, 4})}, {2, 3, 1, 1}); },
       {"BroadcastTo"}, {}},
      {"AveragePool",
       [](GraphBuilder& b) {
         out1(b, "AveragePool", {trained(b, {2, 3, 4, 4})}, {2, 3, 2, 2}, {{"kernel_shape", aints({2, 2})}, {"strides", aints({2, 2})}});
       },
       {"AveragePoolGrad"}, {}},
      {"MaxPool",
       [](GraphBuilder& b) {
         out1(b, "MaxPool", {trained(b, {2, 3, 4, 4})}, {2, 3, 2, 2}, {{"kernel_shape", aints({2, 2})}, {"strides", aints({2, 2})}});
       },
       {"MaxPoolGrad"}, {"a", "y/indices"}},
      {"Conv",
       [](GraphBuilder& b) {
         out1(b, "Conv", {trained(b, {2, 3, 5, 5}), b.weight("w", {4, 3, 3, 3}), b.weight("bias", {4})}, {2, 4, 3, 3});
       },
       {"ConvGradInput", "ConvGradWeight", "ConvGradBias"}, {"a", "w"}},
      {"MatMul",
       [](GraphBuilder& b) { out1(b, "MatMul", {trained(b, {2, 5, 6}), b.weight("w", {6, 7})}, {2, 5, 7}); },
       {"MatMulGradA", "MatMulGradB"}, {"a", "w"}},
      {"LayerNormalization",
       [](GraphBuilder& b) {
         out1(b, "LayerNormalization", {trained(b, {2, 3, 8}), b.weight("scale", {8}), b.weight("bias", {8})}, {2, 3, 8});
       },
       {"LayerNormGrad"}, {"a", "scale", "y/mean", "y/invstd"}},
      {"BatchNormalization",
       [](GraphBuilder& b) {
         out1(b, "BatchNormalization",
              {trained(b, {2, 3, 4, 4}), b.weight("scale", {3}), b.weight("bias", {3}), b.weight("rm", {3}), b.weight("rv", {3})},
              {2, 3, 4, 4}, {{"training_mode", ai(1)}, {"epsilon", af(1e-5)}});
       },
       {"BatchNormGrad"}, {"a", "scale", "y/saved_mean", "y/saved_invstd"}},
      {"Dropout",
       [](GraphBuilder& b) {
         out1(b, "Dropout", {trained(b, {2, 3}), b.constant("ratio", {}, {0.1}), b.constant("train", {}, {1}, DType::boolean)}, {2, 3});
       },
       {"DropoutGrad"}, {"y/mask"}},
      {"Gather",
       [](GraphBuilder& b) { out1(b, "Gather", {b.weight("table", {10, 4}), b.input("ids", {2, 3}, DType::i64)}, {2, 3, 4}); },
       {"GatherGrad"}, {"ids"}},
      {"Concat",
       [](GraphBuilder& b) { out1(b, "Concat", {trained(b, {2, 3}), trained(b, {2, 5}, "c")}, {2, 8}, {{"axis", ai(1)}}); },
       {"Split"}, {}},
      {"Slice",
       [](GraphBuilder& b) {
         out1(b, "Slice", {trained(b, {4, 3}), b.constant("s", {1}, {1}, DType::i64), b.constant("e", {1}, {3}, DType::i64)}, {2, 3});
       },
       {"SliceGrad"}, {}},
  };
  return c;
}

}  // namespace

TEST_CASE("each forward op gets its backward ops, reading exactly PyTorch's saved tensors") {
  for (const Case& c : cases()) {
    CAPTURE(c.name);
    GraphBuilder b;
    c.build(b);
    TrainingGraph tg = build_training_graph(b.g, {});
    const Graph& g = tg.graph;
    const auto ops = backward_of(g, "op");
    S types, reads;
    for (const Op* op : ops) {
      types.insert(op->type);
      for (TensorId t : op->inputs) {
        if (t == kNoTensor) continue;
        const Tensor& x = g.tensors[t];
        const bool made_by_backward = x.producer != kNoOp && g.ops[x.producer].phase != Phase::forward;
        if (!made_by_backward && !x.data && x.name.rfind("grad/", 0) != 0) reads.insert(x.name);
      }
    }
    CHECK(types == c.types);
    CHECK(reads == c.reads);
    // Every gradient has its forward tensor's shape; every trainable weight got one.
    for (const Tensor& t : g.tensors)
      if (t.name.rfind("grad/", 0) == 0 && t.name.find("/part") == std::string::npos && t.name.find("/sum") == std::string::npos) {
        CAPTURE(t.name);
        CHECK(t.shape() == g.tensors[g.at(t.name.substr(5))].shape());
      }
    const auto trainable = trainable_weights(b.g);
    std::size_t n = 0;
    for (bool x : trainable) n += x ? 1 : 0;
    CHECK(tg.param_grads.size() == n);
  }
}

TEST_CASE("Split with an unused output gets SplitGrad - with all outputs used, Concat") {
  for (bool both : {false, true}) {
    CAPTURE(both);
    GraphBuilder b;
    auto a = trained(b, {2, 6});
    auto parts = b.op("Split", {a, b.constant("sizes", {2}, {3, 3}, DType::i64)}, {{"p", {2, 3}}, {"q", {2, 3}}}, {{"axis", ai(1)}});
    b.g.ops.back().name = "op";
    b.output(both ? b.op1("Add", {parts[0], parts[1]}, "y", {2, 3}) : b.op1("Relu", {parts[1]}, "y", {2, 3}));
    TrainingGraph tg = build_training_graph(b.g, {});
    const auto ops = backward_of(tg.graph, "op");
    REQUIRE(ops.size() == 1);
    CHECK(ops[0]->type == (both ? "Concat" : "SplitGrad"));
    CHECK((ops[0]->inputs.at(0) != kNoTensor) == both);  // p has a gradient only when read
    if (!both) CHECK(ops[0]->attr_ints("split") == std::vector<std::int64_t>{3, 3});
    CHECK(tg.graph.tensors[ops[0]->outputs[0]].shape() == std::vector<std::int64_t>{2, 6});
  }
}

TEST_CASE("momentum keeps one buffer per weight, Adam two plus a step - none outputs the gradients") {
  GraphBuilder b;
  auto a = trained(b, {2, 3});
  out1(b, "Relu", {a}, {2, 3});
  TrainingOptions o;
  o.optimizer = Optimizer::momentum;
  auto tg = build_training_graph(b.g, o);
  CHECK(tg.optimizer_state.size() == 1);
  CHECK(tg.graph.ops.back().type == "MomentumUpdate");
  CHECK(tg.graph.tensors[tg.updated_weights.at(0)].role == TensorRole::weight);
  o.optimizer = Optimizer::adam;
  tg = build_training_graph(b.g, o);
  CHECK(tg.optimizer_state.size() == 3);  // m, v and the step count: the updates rewrite them in place
  for (TensorId t : tg.optimizer_state) {
    CHECK(tg.graph.tensors[t].role == TensorRole::optimizer_state);
    CHECK(tg.graph.tensors[t].producer == kNoOp);
  }
  o.optimizer = Optimizer::none;
  tg = build_training_graph(b.g, o);
  CHECK(tg.updated_weights.empty());
  CHECK(tg.graph.outputs == std::vector<TensorId>{tg.loss, tg.param_grads.at(0).second});
  CHECK(optimizer_from_name("adam") == Optimizer::adam);
  CHECK_FALSE(optimizer_from_name("lbfgs").has_value());
}

TEST_CASE("an op without a backward rule on the gradient path is unsupported, naming it") {
  GraphBuilder b;
  auto a = trained(b, {2, 3});
  out1(b, "Hardmax", {a}, {2, 3});
  try {
    build_training_graph(b.g, {});
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::unsupported);
    CHECK(std::string(e.what()).find("Hardmax") != std::string::npos);
  }
}

TEST_CASE("an Identity of a weight becomes its own parameter with its own gradient") {
  GraphBuilder b;
  auto x = b.input("x", {2, 4});
  auto w = b.weight("w", {4});
  auto w2 = b.op1("Identity", {w}, "w_tied", {4});
  auto h = b.op1("Add", {x, w}, "h", {2, 4});
  out1(b, "Add", {h, w2}, {2, 4});
  auto tg = build_training_graph(b.g, {});
  S names;
  for (auto [p, gp] : tg.param_grads) names.insert(tg.graph.tensors[p].name);
  CHECK(names == S{"w", "w_tied"});
  for (const Op& op : tg.graph.ops) CHECK(op.type != "Identity");
}

TEST_CASE("a training Dropout of constant ratio 0 becomes an Identity: no mask made or saved, unless the mask is read") {
  for (bool mask_read : {false, true}) {
    CAPTURE(mask_read);
    GraphBuilder b;
    auto a = trained(b, {2, 3});
    auto outs = b.op("Dropout", {a, b.constant("ratio", {}, {0.0}), b.constant("train", {}, {1}, DType::boolean)},
                     {{"d", {2, 3}}, {"d_mask", {2, 3}}});
    b.g.ops.back().name = "op";
    b.g.tensors[outs[1]].dtype = DType::boolean;
    b.output(b.op1("Relu", {outs[0]}, "y", {2, 3}));
    if (mask_read) b.output(outs[1]);
    TrainingGraph tg = build_training_graph(b.g, {});
    const Graph& g = tg.graph;
    const Op& fwd = g.ops[g.tensors[g.at("d")].producer];
    CHECK(fwd.type == (mask_read ? "Dropout" : "Identity"));
    CHECK(fwd.outputs.size() == (mask_read ? 2u : 1u));
    S types;
    for (const Op* op : backward_of(g, "op")) types.insert(op->type);
    CHECK(types == (mask_read ? S{"DropoutGrad"} : S{}));
    bool mask_saved = false;
    for (TensorId t : tg.saved_for_backward) mask_saved = mask_saved || g.tensors[t].dtype == DType::boolean;
    CHECK(mask_saved == mask_read);
    // The gradient still reaches the trained weight through the identity.
    CHECK(tg.param_grads.size() == 1);
  }
}
