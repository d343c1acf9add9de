// Training-mode Dropout's keep mask: one counter-based hash of (seed, element
// index), the same on the CPU and the GPU (host and device code), so both
// backends draw bit-identical masks and a recomputed Dropout draws its
// forward's mask again. splitmix64's finalizer (Steele, Lea, Flood: "Fast
// splittable pseudorandom number generators", OOPSLA 2014) over a Weyl sequence
// keyed by the mixed seed.
#pragma once

#include <cstdint>

#include "runtime_allocator/kernels/host_device.hpp"

namespace memplan::runtime {

// The seed of a Dropout without a `seed` attribute ("memplan!" in ASCII).
inline constexpr std::uint64_t kDefaultDropoutSeed = 0x6d656d706c616e21ull;

MEMPLAN_HOST_DEVICE inline std::uint64_t splitmix64_mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The per-op key: the seed mixed once, so nearby seeds give unrelated streams.
MEMPLAN_HOST_DEVICE inline std::uint64_t dropout_key(std::uint64_t seed) { return splitmix64_mix(seed ^ 0x9e3779b97f4a7c15ull); }

// The training step the executor on this thread is running (Executor counts its runs from 0; RandomStepScope
// sets it for one run): random ops mix it into their key (step_key), so every step draws new masks while a
// step's backward and its recomputed forwards replay that step's own. Step 0 keys are dropout_key(seed).
inline std::uint64_t& random_step() noexcept {
  thread_local std::uint64_t step = 0;
  return step;
}

class RandomStepScope {
 public:
  explicit RandomStepScope(std::uint64_t step) noexcept : saved_(random_step()) { random_step() = step; }
  ~RandomStepScope() { random_step() = saved_; }
  RandomStepScope(const RandomStepScope&) = delete;
  RandomStepScope& operator=(const RandomStepScope&) = delete;

 private:
  std::uint64_t saved_;
};

// The key a random op with `seed` draws under in the current step.
inline std::uint64_t step_key(std::uint64_t seed) noexcept {
  const std::uint64_t step = random_step();
  return dropout_key(step == 0 ? seed : seed ^ splitmix64_mix(step * 0x9e3779b97f4a7c15ull));
}

// Elements are dropped when the hash's top 32 bits fall below ratio * 2^32: a
// drop probability of ratio, rounded down to a multiple of 2^-32 (ratio 0 keeps
// all, ratio 1 drops all).
inline std::uint64_t dropout_threshold(float ratio) {
  const double r = ratio < 0.0f ? 0.0 : ratio > 1.0f ? 1.0 : static_cast<double>(ratio);
  return static_cast<std::uint64_t>(r * 4294967296.0);
}

MEMPLAN_HOST_DEVICE inline bool dropout_keep(std::uint64_t key, std::uint64_t index, std::uint64_t threshold) {
  return (splitmix64_mix(key + (index + 1) * 0x9e3779b97f4a7c15ull) >> 32) >= threshold;
}

}  // namespace memplan::runtime
