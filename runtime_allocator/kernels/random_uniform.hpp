// RandomUniformLike's draws: element i of a tensor is a function of (seed, i) only, through the counter-based hash of
// dropout_mask.hpp, the same on the CPU and the GPU (host and device code), so both backends draw bit-identical
// values and a recomputed op draws its forward's values again. ONNX leaves the values unspecified (the op is random);
// memplan's draws are reproducible: the same seed gives the same tensor on every run and backend.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime_allocator/kernels/dropout_mask.hpp"

namespace memplan::runtime {

// The seed of a RandomUniformLike without a `seed` attribute: Dropout's default ("memplan!").
inline constexpr std::uint64_t kDefaultRandomSeed = kDefaultDropoutSeed;

// The 64 random bits of element `index` under `key` (dropout_key(seed)): the Weyl sequence Dropout draws.
MEMPLAN_HOST_DEVICE inline std::uint64_t random_bits(std::uint64_t key, std::uint64_t index) {
  return splitmix64_mix(key + (index + 1) * 0x9e3779b97f4a7c15ull);
}

// Element `index` in [low, high) as float32: the top 24 bits as u in [0, 1) (exact), then one fused multiply-add
// low + u * (high - low), rounded once the same way on host and device (no contraction differences).
MEMPLAN_HOST_DEVICE inline float uniform_f32(std::uint64_t key, std::uint64_t index, float low, float high) {
  const float u = static_cast<float>(random_bits(key, index) >> 40) * 5.9604644775390625e-8f;  // 2^-24
  const float v = fmaf(u, high - low, low);
  return v < high || !(high > low) ? v : low;  // rounding up to `high` (wide ranges) wraps to low
}

// The same as float64 from the top 53 bits.
MEMPLAN_HOST_DEVICE inline double uniform_f64(std::uint64_t key, std::uint64_t index, double low, double high) {
  const double u = static_cast<double>(random_bits(key, index) >> 11) * 1.1102230246251565e-16;  // 2^-53
  const double v = fma(u, high - low, low);
  return v < high || !(high > low) ? v : low;
}

}  // namespace memplan::runtime
