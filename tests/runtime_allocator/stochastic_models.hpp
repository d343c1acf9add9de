// Two small models for training tests (CPU and GPU): timm's stochastic depth as exported (DropPath by
// RandomUniformLike + Add/Floor/Div/Mul, and a Bernoulli mask) and a Llama-style RMSNorm decoder block.
#pragma once

#include <random>
#include <string>

#include "tests/runtime_allocator/op_graph.hpp"

namespace memplan::runtime::testing {

inline constexpr std::int64_t kB = 8, kD = 16;

inline analysis::TensorId f32_scalar(OpGraph& b, const std::string& name, double v) {
  return b.constant(name, analysis::TensorData::from_double(analysis::DType::f32, {}, {v}));
}

inline analysis::TensorId activation(OpGraph& b, const std::string& name, std::vector<std::int64_t> dims, analysis::DType dtype = analysis::DType::f32) {
  return b.tensor(name, dtype, dims, analysis::TensorRole::activation);
}

// Three residual blocks h += DropPath(tanh(h W_k)); the first two drop by timm's exported form, the third by a
// Bernoulli mask; y = h W_out.
inline OpGraph stochastic_depth_model(std::mt19937& rng) {
  OpGraph b;
  b.g.opset = 17;
  analysis::TensorId h = b.input("x", random_f32({kB, kD}, rng));
  const double keep = 0.5;
  const analysis::TensorId keep_prob = f32_scalar(b, "keep_prob", keep);
  const analysis::TensorId zeros = b.constant("rows", analysis::TensorData::from_double(analysis::DType::f32, {kB, 1}, std::vector<double>(kB, 0.0)));
  for (int k = 0; k < 3; ++k) {
    const std::string p = "block" + std::to_string(k) + "/";
    const analysis::TensorId w = b.constant(p + "w", random_f32({kD, kD}, rng, -0.5, 0.5));
    const analysis::TensorId mm = activation(b, p + "mm", {kB, kD}), f = activation(b, p + "f", {kB, kD});
    b.op("MatMul", "", {h, w}, {mm});
    b.op("Tanh", "", {mm}, {f});
    const analysis::TensorId mask = activation(b, p + "mask", {kB, 1});
    if (k < 2) {
      const analysis::TensorId r = activation(b, p + "rand", {kB, 1}), shifted = activation(b, p + "shifted", {kB, 1});
      b.op("RandomUniformLike", "", {zeros}, {r}, {{"seed", int_attr(100 + k)}});
      b.op("Add", "", {keep_prob, r}, {shifted});
      b.op("Floor", "", {shifted}, {mask});
    } else {
      const analysis::TensorId probs = b.constant(p + "probs", analysis::TensorData::from_double(analysis::DType::f32, {kB, 1}, std::vector<double>(kB, keep)));
      b.op("Bernoulli", "", {probs}, {mask}, {{"seed", int_attr(7)}});
    }
    const analysis::TensorId scaled = activation(b, p + "scaled", {kB, kD}), dropped = activation(b, p + "dropped", {kB, kD});
    b.op("Div", "", {f, keep_prob}, {scaled});
    b.op("Mul", "", {scaled, mask}, {dropped});
    const analysis::TensorId next = activation(b, p + "out", {kB, kD});
    b.op("Add", "", {h, dropped}, {next});
    h = next;
  }
  const analysis::TensorId w_out = b.constant("w_out", random_f32({kD, 4}, rng, -0.5, 0.5));
  const analysis::TensorId y = b.result("y", analysis::DType::f32, {kB, 4});
  b.op("MatMul", "", {h, w_out}, {y});
  return b;
}

// A Llama-style block: x * Reciprocal(Sqrt(ReduceMean(Pow(x, 2)) + eps)) * g, then a SiLU MLP and a residual.
inline OpGraph rms_norm_decoder(std::mt19937& rng) {
  OpGraph b;
  b.g.opset = 17;
  const analysis::TensorId x = b.input("x", random_f32({2, 4, kD}, rng));
  const analysis::TensorId sq = activation(b, "sq", {2, 4, kD}), ms = activation(b, "ms", {2, 4, 1}), mse = activation(b, "mse", {2, 4, 1});
  const analysis::TensorId rms = activation(b, "rms", {2, 4, 1}), inv = activation(b, "inv", {2, 4, 1}), xn = activation(b, "xn", {2, 4, kD});
  b.op("Pow", "", {x, f32_scalar(b, "two", 2.0)}, {sq});
  b.op("ReduceMean", "", {sq}, {ms}, {{"axes", ints_attr({-1})}, {"keepdims", int_attr(1)}});
  b.op("Add", "", {ms, f32_scalar(b, "eps", 1e-6)}, {mse});
  b.op("Sqrt", "", {mse}, {rms});
  b.op("Reciprocal", "", {rms}, {inv});
  b.op("Mul", "", {x, inv}, {xn});
  const analysis::TensorId g = b.constant("norm.weight", random_f32({kD}, rng, 0.5, 1.5));
  const analysis::TensorId normed = activation(b, "normed", {2, 4, kD});
  b.op("Mul", "", {xn, g}, {normed});
  const analysis::TensorId w1 = b.constant("mlp.w1", random_f32({kD, 2 * kD}, rng, -0.3, 0.3));
  const analysis::TensorId w2 = b.constant("mlp.w2", random_f32({2 * kD, kD}, rng, -0.3, 0.3));
  const analysis::TensorId up = activation(b, "up", {2, 4, 2 * kD}), gate = activation(b, "gate", {2, 4, 2 * kD});
  const analysis::TensorId act = activation(b, "act", {2, 4, 2 * kD}), down = activation(b, "down", {2, 4, kD});
  b.op("MatMul", "", {normed, w1}, {up});
  b.op("Sigmoid", "", {up}, {gate});
  b.op("Mul", "", {up, gate}, {act});
  b.op("MatMul", "", {act, w2}, {down});
  const analysis::TensorId y = b.result("y", analysis::DType::f32, {2, 4, kD});
  b.op("Add", "", {x, down}, {y});
  return b;
}

}  // namespace memplan::runtime::testing
