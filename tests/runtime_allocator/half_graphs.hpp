// Hand-built graphs of the bf16/f16 CUDA tests: values rounded to a 16-bit dtype (so the float32 CPU reference and
// the 16-bit GPU run read the same numbers) and a small MLP in the form torch.autocast gives (shared by the host
// test of the kernel table and the GPU test).
#pragma once

#include <random>
#include <vector>

#include "analysis/training.hpp"
#include "tests/runtime_allocator/op_graph.hpp"

namespace memplan::runtime::testing {

// Uniform values in [lo, hi] rounded to `round_to` (bf16/f16; f32 leaves them), stored as `store`: a graph of
// float32 and one of the 16-bit dtype built with the same seed see identical numbers.
struct HalfValues {
  analysis::DType round_to = analysis::DType::bf16;
  analysis::DType store = analysis::DType::bf16;
  std::mt19937 rng{7};
  analysis::TensorData operator()(const std::vector<std::int64_t>& dims, double lo = -1.0, double hi = 1.0) {
    std::size_t n = 1;
    for (auto d : dims) n *= static_cast<std::size_t>(d);
    std::vector<double> v(n);
    std::uniform_real_distribution<double> u(lo, hi);
    for (auto& x : v) x = u(rng);
    const auto rounded = analysis::TensorData::from_double(round_to, dims, v).as_double();
    return analysis::TensorData::from_double(store, dims, rounded);
  }
};

inline analysis::Attribute cast_to(analysis::DType d) { return int_attr(static_cast<std::int64_t>(d)); }

// y = Cast(Relu(Cast(x) @ Cast(W1) + Cast(b1)) @ Cast(W2), float32) with float32 inputs and weights and every Cast to
// `d` (bf16/f16; with f32 the Casts are identities: the float32 reference). x [8, 16], W1 [16, 32], b1 [32],
// W2 [32, 4]; the weights are rounded to `round_to` so the casts of both graphs are exact.
inline OpGraph autocast_mlp(analysis::DType d, analysis::DType round_to) {
  using analysis::DType;
  using analysis::TensorRole;
  OpGraph b;
  HalfValues val{round_to, DType::f32, std::mt19937(3)};
  const auto x = b.input("x", val({8, 16}));
  auto weight = [&](const char* name, const std::vector<std::int64_t>& dims, double bound) {
    const auto w = b.constant(name, val(dims, -bound, bound));
    b.g.tensors[w].role = TensorRole::weight;
    b.g.tensors[w].external_data = true;  // an initializer as exporters write it: trains wherever it is read (a Cast)
    return w;
  };
  const auto w1 = weight("W1", {16, 32}, 0.25), b1 = weight("b1", {32}, 0.1), w2 = weight("W2", {32, 4}, 0.18);
  auto act = [&](const char* name, DType t, const std::vector<std::int64_t>& dims) {
    return b.tensor(name, t, dims, TensorRole::activation);
  };
  const auto xc = act("x_c", d, {8, 16}), w1c = act("W1_c", d, {16, 32}), b1c = act("b1_c", d, {32}), w2c = act("W2_c", d, {32, 4});
  const auto h = act("h", d, {8, 32}), hb = act("hb", d, {8, 32}), r = act("r", d, {8, 32}), o = act("o", d, {8, 4});
  const auto y = b.result("y", DType::f32, {8, 4});
  b.op("Cast", "", {x}, {xc}, {{"to", cast_to(d)}});
  b.op("Cast", "", {w1}, {w1c}, {{"to", cast_to(d)}});
  b.op("MatMul", "", {xc, w1c}, {h});
  b.op("Cast", "", {b1}, {b1c}, {{"to", cast_to(d)}});
  b.op("Add", "", {h, b1c}, {hb});
  b.op("Relu", "", {hb}, {r});
  b.op("Cast", "", {w2}, {w2c}, {{"to", cast_to(d)}});
  b.op("MatMul", "", {r, w2c}, {o});
  b.op("Cast", "", {o}, {y}, {{"to", cast_to(DType::f32)}});
  b.g.relink();
  return b;
}

// Its training graph: MSE loss against a float32 target, SGD.
// optimizer sgd: outputs loss and the three weights updated in place; none: loss and the three gradients.
inline analysis::TrainingGraph autocast_mlp_training(analysis::DType d, analysis::DType round_to,
                                                     analysis::Optimizer optimizer = analysis::Optimizer::sgd) {
  analysis::TrainingOptions to;
  to.optimizer = optimizer;
  to.learning_rate = 0.1;
  return analysis::build_training_graph(autocast_mlp(d, round_to).g, to);
}

}  // namespace memplan::runtime::testing
