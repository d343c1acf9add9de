// GPU tests of the loss kernels (cuda_loss.cpp) against the CPU kernels; exit 77 (skipped) without a device.
#include <doctest/doctest.h>

#ifdef MEMPLAN_HAVE_CUDA
#include <cstdlib>
#include <random>

#include "analysis/training.hpp"
#include "planner/training_plan.hpp"
#include "runtime_allocator/cuda/cuda_backend.hpp"
#include "runtime_allocator/executor.hpp"
#include "tests/runtime_allocator/cuda_compare.hpp"
#include "tests/runtime_allocator/op_graph.hpp"
#include "tests/runtime_allocator/training_fixture.hpp"

using namespace memplan;
using namespace memplan::runtime::testing;
using analysis::DType;
using analysis::TensorData;
using analysis::TensorId;

namespace {

// CrossEntropyLoss then CrossEntropyLossGrad (with and without an incoming dloss) on logits of `dims` over `axis`.
void check_cross_entropy(const std::vector<std::int64_t>& dims, std::int64_t axis, std::uint32_t seed) {
  std::mt19937 rng(seed);
  OpGraph b;
  const TensorId y = b.input("y", random_f32(dims, rng, -6.0, 6.0));
  std::vector<std::int64_t> rows = dims;
  rows.erase(rows.begin() + axis);
  std::size_t n = 1;
  for (auto d : rows) n *= static_cast<std::size_t>(d);
  std::vector<std::int64_t> labels(n);
  std::uniform_int_distribution<std::int64_t> pick(0, dims[static_cast<std::size_t>(axis)] - 1);
  for (auto& l : labels) l = pick(rng);
  labels[n / 2] = -100;
  const TensorId lab = b.input("labels", ints(DType::i64, rows, labels));
  const TensorId dloss = b.input("dloss", TensorData::from_double(DType::f32, {}, {0.75}));
  const TensorId loss = b.result("loss", DType::f32, {}), lse = b.result("lse", DType::f32, rows);
  const TensorId dy = b.result("dy", DType::f32, dims), dy2 = b.result("dy_scaled", DType::f32, dims);
  const std::map<std::string, analysis::Attribute> attrs{{"axis", int_attr(axis)}, {"ignore_index", int_attr(-100)}};
  b.op("CrossEntropyLoss", "memplan", {y, lab}, {loss, lse}, attrs);
  b.op("CrossEntropyLossGrad", "memplan", {y, lse, lab}, {dy}, attrs);
  b.op("CrossEntropyLossGrad", "memplan", {y, lse, lab, dloss}, {dy2}, attrs);
  check_against_cpu(b, {loss, lse, dy, dy2}, 1e-5);
}

// LinearCrossEntropy on X [n, k] and a head of `v` classes (W [k, v], or [v, k] read transposed), chunks of `chunk`
// rows (the last one partial), a bias, an ignored label.
void check_linear_cross_entropy(std::int64_t n, std::int64_t k, std::int64_t v, std::int64_t chunk, bool trans_b, std::uint32_t seed) {
  std::mt19937 rng(seed);
  OpGraph b;
  const TensorId x = b.input("x", random_f32({n, k}, rng, -1.0, 1.0));
  const std::vector<std::int64_t> wd = trans_b ? std::vector<std::int64_t>{v, k} : std::vector<std::int64_t>{k, v};
  const TensorId w = b.input("w", random_f32(wd, rng, -0.5, 0.5));
  const TensorId bias = b.input("bias", random_f32({v}, rng, -0.2, 0.2));
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  std::uniform_int_distribution<std::int64_t> pick(0, v - 1);
  for (auto& l : labels) l = pick(rng);
  labels[1] = -100;
  const TensorId lab = b.input("labels", ints(DType::i64, {n}, labels));
  const TensorId loss = b.result("loss", DType::f32, {}), dx = b.result("dx", DType::f32, {n, k});
  const TensorId dw = b.result("dw", DType::f32, wd), db = b.result("db", DType::f32, {v});
  b.op("LinearCrossEntropy", "memplan", {x, w, lab, bias}, {loss, dx, dw, db},
       {{"chunk", int_attr(chunk)}, {"ignore_index", int_attr(-100)}, {"trans_b", int_attr(trans_b ? 1 : 0)}});
  check_against_cpu(b, {loss, dx, dw, db}, 1e-4);
}

// One training step of tiny_gpt with cross-entropy (`chunked`: its head and loss as one LinearCrossEntropy) on the GPU
// against the CPU executor: the loss and every weight's gradient.
void check_tiny_gpt_step(bool chunked) {
  analysis::ImportOptions io;
  io.keep_weight_data = true;
  analysis::TrainingOptions to;
  to.optimizer = analysis::Optimizer::none;
  to.loss = analysis::Loss::ce;
  to.chunked_loss = chunked;
  const auto tg = analysis::build_training_graph(
      analysis::infer_shapes(analysis::import_onnx(models_dir() + "tiny_gpt.onnx", io), {}), to);
  std::vector<TensorData> in = feeds("tiny_gpt", tg.graph);
  std::int64_t classes = 0;
  for (const auto& op : tg.graph.ops) {
    if (op.type == "CrossEntropyLoss") classes = tg.graph.tensors[op.inputs[0]].shape().back();
    if (op.type == "LinearCrossEntropy")
      classes = analysis::memplan_ops::linear_cross_entropy_classes(tg.graph.tensors[op.inputs[1]].shape(), op.attr_int("trans_b", 0));
  }
  REQUIRE(classes > 0);
  const TensorId labels = tg.graph.inputs.back();
  REQUIRE(tg.graph.tensors[labels].dtype == DType::i64);
  std::vector<std::int64_t> values(tg.graph.tensors[labels].element_count());
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<std::int64_t>((i * 7919) % static_cast<std::size_t>(classes));
  in.back() = TensorData::from_int64(DType::i64, tg.graph.tensors[labels].shape(), values);
  runtime::HostBackend host;
  runtime::Executor ref(tg.graph, planner::Plan{}, host, runtime::ExecOptions{.unshared = true});
  const auto want = ref.run(in);
  const auto r = planner::plan_training(tg, {});
  REQUIRE(r.report.valid);
  runtime::cuda::CudaBackend gpu_backend;
  runtime::Executor gpu(r.graph, r.plan, gpu_backend);
  std::map<std::string, TensorData> feed;
  for (std::size_t k = 0; k < in.size(); ++k) feed[tg.graph.tensors[tg.graph.inputs[k]].name] = in[k];
  const auto got = gpu.run(feed);
  CHECK(max_rel_diff(floats(got[0].bytes.data(), got[0].bytes.size()), floats(want[0].bytes.data(), want[0].bytes.size())) <= 1e-5);
  for (const auto& wg : tg.param_grads) {
    const TensorId gt = wg.second;
    const std::string name = tg.graph.tensors[wg.first].name;
    INFO("gradient of " << name);
    const auto gv = gpu.read(gt);
    CHECK(max_rel_diff(floats(gv.bytes.data(), gv.bytes.size()), floats(ref.address(gt), tg.graph.tensors[gt].bytes())) <= 1e-4);
  }
}

}  // namespace

TEST_CASE("CrossEntropyLoss and its gradient on the GPU equal the CPU kernels: [N, C], [N, C, H, W] axis 1, an LM's [B, S, V]") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  check_cross_entropy({16, 10}, 1, 1);
  check_cross_entropy({2, 21, 7, 5}, 1, 2);  // strided rows: a thread per row
  check_cross_entropy({2, 8, 50257}, 2, 3);  // GPT-2's vocabulary: a block per row
  check_cross_entropy({3, 4, 6}, 1, 4);
}

TEST_CASE("SumLoss and SumLossGrad on the GPU equal the CPU kernels") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  std::mt19937 rng(5);
  OpGraph b;
  const TensorId y = b.input("y", random_f32({37, 29}, rng));
  const TensorId dloss = b.input("dloss", TensorData::from_double(DType::f32, {}, {-2.0}));
  const TensorId loss = b.result("loss", DType::f32, {}), ones = b.result("ones", DType::f32, {37, 29});
  const TensorId scaled = b.result("scaled", DType::f32, {37, 29});
  b.op("SumLoss", "memplan", {y}, {loss});
  b.op("SumLossGrad", "memplan", {}, {ones});
  b.op("SumLossGrad", "memplan", {dloss}, {scaled});
  check_against_cpu(b, {loss, ones, scaled}, 1e-5);
}

TEST_CASE("a cross-entropy training step of tiny_gpt on the GPU gives the CPU executor's loss and gradients (planned, dlogits over the logits)") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  check_tiny_gpt_step(false);
}

TEST_CASE("LinearCrossEntropy on the GPU equals the CPU kernel (chunks with a partial last one, W either way, a bias, an ignored label), and tiny_gpt's --chunked-loss step gives the CPU's loss and gradients") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  check_linear_cross_entropy(37, 24, 1000, 8, false, 6);
  check_linear_cross_entropy(37, 24, 1000, 37, true, 7);
  check_linear_cross_entropy(64, 48, 50257, 16, true, 8);  // GPT-2's vocabulary, tied head
  check_tiny_gpt_step(true);
}

#endif  // MEMPLAN_HAVE_CUDA
