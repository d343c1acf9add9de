// Tests of apply_autocast through build_training_graph: torch.autocast's dtypes, cached weight casts, fp32 gradients.
#include <doctest/doctest.h>

#include <string>

#include "analysis/autocast.hpp"
#include "analysis/ops.hpp"
#include "analysis/training.hpp"
#include "tests/analysis/test_training_fixture.hpp"

using namespace memplan::analysis;
using namespace memplan::analysis::testing;

namespace {

TrainingGraph train(const Graph& g, Precision p = Precision::bf16) {
  TrainingOptions o;
  o.precision = p;
  return build_training_graph(g, o);
}

DType dtype_of(const TrainingGraph& tg, const std::string& name) { return tg.graph.tensors[tg.graph.at(name)].dtype; }

// The forward op that produces tensor `name`, and how many Casts read weight `w`.
const Op& producer(const TrainingGraph& tg, const std::string& name) {
  return tg.graph.ops[tg.graph.tensors[tg.graph.at(name)].producer];
}
std::size_t casts_of(const TrainingGraph& tg, const std::string& w) {
  std::size_t n = 0;
  for (OpId c : tg.graph.tensors[tg.graph.at(w)].consumers) {
    const Op& op = tg.graph.ops[c];
    n += op.type == "Cast" && op.phase == Phase::forward;
  }
  return n;
}

// x[4,8] -> MatMul W1 -> Add b1 -> Relu -> MatMul W2 -> Add b2 -> y (an exported two-layer MLP).
Graph mlp() {
  GraphBuilder b;
  auto x = b.input("x", {4, 8});
  auto w1 = b.weight("W1", {8, 16});
  auto b1 = b.weight("b1", {16});
  auto w2 = b.weight("W2", {16, 4});
  auto b2 = b.weight("b2", {4});
  auto h = b.op1("MatMul", {x, w1}, "h", {4, 16});
  auto hb = b.op1("Add", {h, b1}, "hb", {4, 16});
  auto r = b.op1("Relu", {hb}, "r", {4, 16});
  auto o = b.op1("MatMul", {r, w2}, "o", {4, 4});
  b.output(b.op1("Add", {o, b2}, "y", {4, 4}));
  return b.g;
}

}  // namespace

TEST_CASE("autocast policies follow PyTorch's CUDA lists") {
  auto policy = [](const std::string& type, const std::string& domain = "") {
    Op op;
    op.type = type;
    op.domain = domain;
    return autocast_policy(op);
  };
  for (const char* t : {"MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum", "PRelu"}) CHECK(policy(t) == AutocastPolicy::lower);
  CHECK(policy("FusedAttention", "memplan") == AutocastPolicy::lower);
  CHECK(policy("MatMulT", "memplan") == AutocastPolicy::lower);
  for (const char* t : {"Softmax", "LogSoftmax", "LayerNormalization", "ReduceSum", "Exp", "Log", "Pow", "CumSum", "Resize"})
    CHECK(policy(t) == AutocastPolicy::fp32);
  CHECK(policy("MSELoss", "memplan") == AutocastPolicy::fp32);
  CHECK(policy("RMSNormalization", "memplan") == AutocastPolicy::fp32);
  for (const char* t : {"Add", "Relu", "ReduceMean", "BatchNormalization", "Gelu", "Transpose", "Sqrt", "Erf", "MaxPool"})
    CHECK(policy(t) == AutocastPolicy::promote);
  CHECK(policy("Cast") == AutocastPolicy::keep);
  CHECK(policy("Shape") == AutocastPolicy::keep);
}

TEST_CASE("a bf16 MLP: matmuls and bias adds in bf16, the loss in fp32, one cast per weight, fp32 weight gradients") {
  const TrainingGraph tg = train(mlp());
  CHECK(dtype_of(tg, "x") == DType::f32);
  CHECK(dtype_of(tg, "h") == DType::bf16);
  CHECK(dtype_of(tg, "hb") == DType::bf16);  // F.linear's bias: the Add of an initializer follows the matmul
  CHECK(dtype_of(tg, "r") == DType::bf16);
  CHECK(dtype_of(tg, "y") == DType::bf16);
  CHECK(tg.graph.tensors[tg.loss].dtype == DType::f32);
  const Op& loss = tg.graph.ops[tg.graph.tensors[tg.loss].producer];
  CHECK(tg.graph.tensors[loss.inputs[0]].dtype == DType::f32);  // mse_loss is on the fp32 list
  CHECK(producer(tg, tg.graph.tensors[loss.inputs[0]].name).type == "Cast");
  for (const char* w : {"W1", "b1", "W2", "b2"}) {
    INFO(w);
    CHECK(dtype_of(tg, w) == DType::f32);
    CHECK(casts_of(tg, w) == 1);
  }
  REQUIRE(tg.param_grads.size() == 4);
  for (const auto& pg : tg.param_grads) {
    CHECK(tg.graph.tensors[pg.second].dtype == DType::f32);
    CHECK(tg.graph.ops[tg.graph.tensors[pg.second].producer].type == "Cast");  // Cast's backward casts back
  }
  // Every op reads its float inputs in one dtype (scalars aside): the graph is valid ONNX typing.
  for (const Op& op : tg.graph.ops) {
    if (op.type != "MatMul" && op.type != "Add") continue;
    INFO(op.name);
    CHECK(tg.graph.tensors[op.inputs[0]].dtype == tg.graph.tensors[op.inputs[1]].dtype);
  }
  tg.graph.validate();
  // The input is cast per use (an activation), the first matmul reads the cast copy.
  const Op& mm = producer(tg, "h");
  CHECK(tg.graph.tensors[mm.inputs[0]].dtype == DType::bf16);
  CHECK(producer(tg, tg.graph.tensors[mm.inputs[0]].name).type == "Cast");
}

TEST_CASE("fp32 precision leaves the graph as it was, fp16 gives float16") {
  const TrainingGraph f = train(mlp(), Precision::fp32);
  for (const Op& op : f.graph.ops) CHECK(op.type != "Cast");
  CHECK(dtype_of(f, "h") == DType::f32);
  const TrainingGraph h = train(mlp(), Precision::fp16);
  CHECK(dtype_of(h, "h") == DType::f16);
  CHECK(h.graph.tensors[h.loss].dtype == DType::f32);
}

TEST_CASE("a weight read by two matmuls is cast once (autocast's cache)") {
  GraphBuilder b;
  auto x = b.input("x", {2, 8});
  auto w = b.weight("W", {8, 8});
  auto a = b.op1("MatMul", {x, w}, "a", {2, 8});
  auto c = b.op1("MatMul", {a, w}, "c", {2, 8});
  b.output(c);
  const TrainingGraph tg = train(b.g);
  CHECK(casts_of(tg, "W") == 1);
  CHECK(producer(tg, "a").inputs[1] == producer(tg, "c").inputs[1]);
  REQUIRE(tg.param_grads.size() == 1);
  CHECK(tg.graph.tensors[tg.param_grads[0].second].dtype == DType::f32);
}

TEST_CASE("a transformer block: softmax and layer norm in fp32, attention matmuls in bf16, residual Add fp32 + bf16 -> fp32") {
  GraphBuilder b;
  auto x = b.input("x", {2, 4, 8});
  auto g = b.weight("ln_g", {8});
  auto be = b.weight("ln_b", {8});
  auto wq = b.weight("Wq", {8, 8});
  auto wo = b.weight("Wo", {8, 8});
  auto scale = b.constant("scale", {}, {0.35});
  auto ln = b.op1("LayerNormalization", {x, g, be}, "ln", {2, 4, 8}, {{"axis", ai(-1)}});
  auto q = b.op1("MatMul", {ln, wq}, "q", {2, 4, 8});
  auto kt = b.op1("Transpose", {q}, "kt", {2, 8, 4}, {{"perm", aints({0, 2, 1})}});
  auto s = b.op1("MatMul", {q, kt}, "s", {2, 4, 4});
  auto ss = b.op1("Mul", {s, scale}, "ss", {2, 4, 4});
  auto p = b.op1("Softmax", {ss}, "p", {2, 4, 4}, {{"axis", ai(-1)}});
  auto ctx = b.op1("MatMul", {p, q}, "ctx", {2, 4, 8});
  auto o = b.op1("MatMul", {ctx, wo}, "o", {2, 4, 8});
  b.output(b.op1("Add", {x, o}, "res", {2, 4, 8}));
  const TrainingGraph tg = train(b.g);
  CHECK(dtype_of(tg, "ln") == DType::f32);
  CHECK(dtype_of(tg, "q") == DType::bf16);
  CHECK(dtype_of(tg, "kt") == DType::bf16);
  CHECK(dtype_of(tg, "s") == DType::bf16);
  CHECK(dtype_of(tg, "ss") == DType::bf16);  // a 0-dim constant does not promote
  CHECK(dtype_of(tg, "scale") == DType::f32);
  CHECK(producer(tg, "ss").inputs[1] == tg.graph.at("scale"));  // read as it is (a wrapped scalar)
  CHECK(dtype_of(tg, "p") == DType::f32);    // softmax: fp32_set_opt_dtype
  CHECK(dtype_of(tg, "ctx") == DType::bf16);
  CHECK(dtype_of(tg, "res") == DType::f32);  // x (fp32) + o (bf16) promotes
  const Op& add = producer(tg, "res");
  CHECK(tg.graph.tensors[add.inputs[1]].dtype == DType::f32);
  CHECK(producer(tg, tg.graph.tensors[add.inputs[1]].name).type == "Cast");
  // LayerNorm's weights are read in fp32: no cast; the matmul weights once each.
  CHECK(casts_of(tg, "ln_g") == 0);
  CHECK(casts_of(tg, "Wq") == 1);
  CHECK(casts_of(tg, "Wo") == 1);
  for (const auto& pg : tg.param_grads) CHECK(tg.graph.tensors[pg.second].dtype == DType::f32);
  tg.graph.validate();
}

TEST_CASE("a conv net: Conv in bf16, BatchNorm in its input's dtype with fp32 parameters and statistics") {
  GraphBuilder b;
  auto x = b.input("x", {2, 3, 8, 8});
  auto w = b.weight("Wc", {4, 3, 3, 3});
  auto cb = b.weight("bc", {4});
  auto sc = b.weight("bn_scale", {4});
  auto bb = b.weight("bn_bias", {4});
  auto m = b.weight("bn_mean", {4});
  auto v = b.weight("bn_var", {4});
  auto c = b.op1("Conv", {x, w, cb}, "c", {2, 4, 6, 6}, {{"kernel_shape", aints({3, 3})}});
  auto n = b.op1("BatchNormalization", {c, sc, bb, m, v}, "n", {2, 4, 6, 6}, {{"training_mode", ai(1)}});
  auto r = b.op1("Relu", {n}, "r", {2, 4, 6, 6});
  auto gp = b.op1("GlobalAveragePool", {r}, "gp", {2, 4, 1, 1});
  b.output(gp);
  const TrainingGraph tg = train(b.g);
  CHECK(dtype_of(tg, "c") == DType::bf16);
  CHECK(dtype_of(tg, "n") == DType::bf16);
  CHECK(dtype_of(tg, "gp") == DType::bf16);
  const Op& bn = producer(tg, "n");
  CHECK(bn.type == memplan_ops::kBatchNormTraining);
  for (std::size_t i = 1; i < bn.inputs.size(); ++i) CHECK(tg.graph.tensors[bn.inputs[i]].dtype == DType::f32);
  for (std::size_t i = 1; i < bn.outputs.size(); ++i)
    if (bn.outputs[i] != kNoTensor) CHECK(tg.graph.tensors[bn.outputs[i]].dtype == DType::f32);
  CHECK(casts_of(tg, "Wc") == 1);
  CHECK(casts_of(tg, "bc") == 1);
  CHECK(casts_of(tg, "bn_scale") == 0);
  for (const auto& pg : tg.param_grads) CHECK(tg.graph.tensors[pg.second].dtype == DType::f32);
  tg.graph.validate();
}

TEST_CASE("an exported Linear, MatMul(x, Transpose(W)), casts W itself once and transposes the bf16 copy") {
  GraphBuilder b;
  auto x = b.input("x", {2, 3, 8});
  auto w = b.weight("W", {16, 8});
  auto wt = b.op1("Transpose", {w}, "Wt", {8, 16}, {{"perm", aints({1, 0})}});
  auto y1 = b.op1("MatMul", {x, wt}, "y1", {2, 3, 16});
  auto y2 = b.op1("MatMul", {x, wt}, "y2", {2, 3, 16});
  b.output(b.op1("Add", {y1, y2}, "y", {2, 3, 16}));
  const TrainingGraph tg = train(b.g);
  CHECK(casts_of(tg, "W") == 1);
  CHECK(dtype_of(tg, "Wt") == DType::bf16);
  CHECK(producer(tg, "y1").inputs[1] == tg.graph.at("Wt"));  // no cast of the transposed copy
  REQUIRE(tg.param_grads.size() == 1);
  CHECK(tg.graph.tensors[tg.param_grads[0].second].dtype == DType::f32);
  tg.graph.validate();
}

TEST_CASE("apply_autocast rejects a dtype that is not 16-bit float") {
  Graph g = mlp();
  CHECK_THROWS_AS(apply_autocast(g, DType::f32), memplan::Error);
}
