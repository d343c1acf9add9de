// GPU tests of issue 16's ops against the CPU kernels: activations and variadic ops through their fused expressions,
// the random ops bit for bit, Expand from Shape ops, embedding Gather, and the stochastic-depth and RMSNorm training
// steps; exit 77 (skipped) without a device.
#include <doctest/doctest.h>

#ifdef MEMPLAN_HAVE_CUDA
#include <cstdlib>
#include <map>
#include <random>

#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "planner/training_plan.hpp"
#include "runtime_allocator/cuda/cuda_backend.hpp"
#include "runtime_allocator/executor.hpp"
#include "tests/runtime_allocator/cuda_compare.hpp"
#include "tests/runtime_allocator/op_graph.hpp"
#include "tests/runtime_allocator/training_fixture.hpp"
#include "tests/runtime_allocator/stochastic_models.hpp"

using namespace memplan;
using namespace memplan::runtime::testing;
using analysis::DType;
using analysis::TensorData;
using analysis::TensorId;

TEST_CASE("ELU, SELU, CELU, PRelu, HardSwish, Softplus, Mish, Shrink and variadic Sum/Mean/Max/Min on the GPU equal the CPU kernels") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  std::mt19937 rng(16);
  OpGraph b;
  b.g.opset = 17;
  const std::vector<std::int64_t> d{7, 33, 65};
  const TensorId x = b.input("x", random_f32(d, rng, -4.0, 4.0));
  const TensorId slope = b.input("slope", random_f32({33, 1}, rng, 0.0, 0.5));
  const TensorId r = b.input("r", random_f32({65}, rng, -4.0, 4.0));
  std::vector<TensorId> checked;
  const std::vector<std::pair<const char*, std::map<std::string, analysis::Attribute>>> unary{
      {"Elu", {{"alpha", float_attr(0.7)}}}, {"Selu", {}}, {"Celu", {{"alpha", float_attr(1.5)}}},
      {"ThresholdedRelu", {{"alpha", float_attr(0.3)}}}, {"HardSigmoid", {}}, {"HardSwish", {}}, {"Softplus", {}},
      {"Softsign", {}}, {"Shrink", {{"lambd", float_attr(0.5)}, {"bias", float_attr(0.2)}}}, {"Mish", {}}, {"Abs", {}}};
  for (const auto& u : unary) {
    checked.push_back(b.result(u.first, DType::f32, d));
    b.op(u.first, "", {x}, {checked.back()}, u.second);
  }
  checked.push_back(b.result("prelu", DType::f32, d));
  b.op("PRelu", "", {x, slope}, {checked.back()});
  for (const char* v : {"Sum", "Mean", "Max", "Min"}) {
    checked.push_back(b.result(std::string(v) + "3", DType::f32, d));
    b.op(v, "", {x, slope, r}, {checked.back()});
  }
  check_against_cpu(shaped(b), checked, 2e-5);
}

TEST_CASE("RandomNormal(Like), RandomUniform and Bernoulli draw bit-identical values on the GPU and the CPU") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  std::mt19937 rng(17);
  OpGraph b;
  b.g.opset = 17;
  const std::vector<std::int64_t> d{37, 3, 513};
  const TensorId x = b.input("x", random_f32(d, rng));
  const TensorId p = b.input("p", random_f32(d, rng, 0.0, 1.0));
  std::vector<TensorId> checked{b.result("normal_like", DType::f32, d), b.result("normal_like64", DType::f64, d),
                                b.result("normal", DType::f32, {1000, 17}), b.result("uniform", DType::f64, {301}),
                                b.result("bernoulli", DType::f32, d), b.result("bernoulli_bool", DType::boolean, d),
                                b.result("bernoulli_i64", DType::i64, d)};
  b.op("RandomNormalLike", "", {x}, {checked[0]}, {{"seed", int_attr(1)}, {"mean", float_attr(-1.0)}, {"scale", float_attr(3.0)}});
  b.op("RandomNormalLike", "", {x}, {checked[1]}, {{"dtype", int_attr(11)}});
  b.op("RandomNormal", "", {}, {checked[2]}, {{"shape", ints_attr({1000, 17})}, {"seed", int_attr(2)}});
  b.op("RandomUniform", "", {}, {checked[3]}, {{"shape", ints_attr({301})}, {"dtype", int_attr(11)}, {"low", float_attr(-2.0)}});
  b.op("Bernoulli", "", {p}, {checked[4]}, {{"seed", int_attr(3)}});
  b.op("Bernoulli", "", {p}, {checked[5]}, {{"seed", int_attr(3)}, {"dtype", int_attr(9)}});
  b.op("Bernoulli", "", {p}, {checked[6]}, {{"seed", int_attr(3)}, {"dtype", int_attr(7)}});
  check_against_cpu(shaped(b), checked, 0.0);
}

TEST_CASE("Expand to a shape from Shape ops and embedding Gather with negative ids on the GPU equal the CPU") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  std::mt19937 rng(18);
  OpGraph b;
  b.g.opset = 17;
  const TensorId x = b.input("x", random_f32({5, 1, 3}, rng));
  const TensorId like = b.input("like", random_f32({2, 5, 4, 3}, rng));
  const TensorId shape = b.tensor("shape", DType::i64, {4}, analysis::TensorRole::activation);
  b.op("Shape", "", {like}, {shape});
  std::vector<TensorId> checked{b.result("expanded", DType::f32, {2, 5, 4, 3}), b.result("embedded", DType::f32, {2, 3, 8})};
  b.op("Expand", "", {x, shape}, {checked[0]});
  const TensorId table = b.input("table", random_f32({50, 8}, rng));
  const TensorId ids = b.input("ids", ints(DType::i64, {2, 3}, {0, -1, 49, -50, 7, -8}));
  b.op("Gather", "", {table, ids}, {checked[1]});
  check_against_cpu(shaped(b), checked, 0.0);
}

TEST_CASE("stochastic-depth and RMSNorm-decoder training steps on the GPU give the CPU executor's gradients under every strategy") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  for (int model = 0; model < 2; ++model) {
    std::mt19937 rng(19);
    const OpGraph b = model == 0 ? stochastic_depth_model(rng) : rms_norm_decoder(rng);
    analysis::TrainingOptions to;
    const auto tg = analysis::build_training_graph(analysis::infer_shapes(b.g, {}), to);
    std::vector<TensorData> in{b.feeds[0]};
    for (std::size_t k = 1; k < tg.graph.inputs.size(); ++k) in.push_back(random_f32(tg.graph.tensors[tg.graph.inputs[k]].shape(), rng));
    runtime::HostBackend ref_backend;
    runtime::Executor ref(tg.graph, planner::Plan{}, ref_backend, runtime::ExecOptions{.unshared = true});
    ref.run(in);
    std::map<std::string, TensorData> feed;
    for (std::size_t k = 0; k < in.size(); ++k) feed[tg.graph.tensors[tg.graph.inputs[k]].name] = in[k];
    for (const auto& strategy : planner::training_strategies()) {
      INFO("model " << model << " strategy " << strategy);
      const auto planned = plan_strategy(tg, strategy);
      if (!planned) continue;
      const planner::TrainingPlanResult& r = *planned;
      runtime::cuda::CudaBackend gpu_backend;
      runtime::Executor gpu(r.graph, r.plan, gpu_backend);
      gpu.run(feed);
      for (const auto& pg : tg.param_grads) {
        const auto got = gpu.read(pg.second);
        const std::size_t bytes = tg.graph.tensors[pg.second].bytes();
        const auto want = floats(ref.address(pg.second), bytes);
        INFO("gradient of " << tg.graph.tensors[pg.first].name);
        CHECK(max_rel_diff(floats(got.bytes.data(), got.bytes.size()), want) <= 1e-4);
      }
    }
  }
}

#endif  // MEMPLAN_HAVE_CUDA
