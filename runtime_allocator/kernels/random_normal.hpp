// RandomNormal(Like)'s draws: element i is a function of (key, i) only, bit-identical on the CPU and the GPU.
// Marsaglia's polar method (Marsaglia and Bray, "A convenient method for generating normal variables", SIAM
// Review 1964) over the counter-based bits of random_uniform.hpp. Its one transcendental, log, is computed here
// from correctly rounded IEEE operations only (frexp, +, /, fma), never the platform's libm or CUDA's, and
// every product that feeds a sum is an explicit fma, so no compiler contraction changes a bit.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime_allocator/kernels/random_uniform.hpp"

namespace memplan::runtime {

// Natural log of a finite x > 0, within ~1 ulp in double: x = m 2^e with m in [sqrt(1/2), sqrt(2)), then
// log m = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172, summed to s^23 (error below 2^-60).
MEMPLAN_HOST_DEVICE inline double portable_log(double x) {
  int e = 0;
  double m = frexp(x, &e);  // exact: m in [1/2, 1)
  if (m < 0.70710678118654752) {
    m = m * 2.0;  // exact
    e -= 1;
  }
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  double p = 1.0 / 23.0;
  for (int k = 21; k >= 1; k -= 2) p = fma(p, s2, 1.0 / static_cast<double>(k));
  const double ln2 = 0.69314718055994530942;
  return fma(static_cast<double>(e), ln2, 2.0 * s * p);  // 2 * s is exact; (2s) * p rounds once
}

// A standard normal deviate for element `index` under `key`: polar-method pairs drawn from the sub-stream
// index * 64 + attempt (an attempt is accepted with probability pi/4; after 64 rejections, probability
// (1 - pi/4)^64 < 1e-42, the draw is 0).
MEMPLAN_HOST_DEVICE inline double standard_normal(std::uint64_t key, std::uint64_t index) {
  for (std::uint64_t attempt = 0; attempt < 64; ++attempt) {
    const std::uint64_t bits = random_bits(key, index * 64 + attempt);
    // Two 32-bit halves as odd multiples of 2^-32 in (-1, 1): never exactly 0 or +-1.
    const double u = static_cast<double>(static_cast<std::int64_t>(bits >> 32) * 2 - 4294967295LL) * 2.3283064365386963e-10;
    const double v =
        static_cast<double>(static_cast<std::int64_t>(bits & 0xffffffffull) * 2 - 4294967295LL) * 2.3283064365386963e-10;
    const double r2 = fma(u, u, v * v);
    if (r2 >= 1.0 || r2 == 0.0) continue;
    return u * sqrt(-2.0 * portable_log(r2) / r2);
  }
  return 0.0;
}

// mean + scale * N(0, 1) for element `index`, rounded once into float32 (float64 for normal_f64).
MEMPLAN_HOST_DEVICE inline float normal_f32(std::uint64_t key, std::uint64_t index, double mean, double scale) {
  return static_cast<float>(fma(scale, standard_normal(key, index), mean));
}
MEMPLAN_HOST_DEVICE inline double normal_f64(std::uint64_t key, std::uint64_t index, double mean, double scale) {
  return fma(scale, standard_normal(key, index), mean);
}

// Bernoulli: 1 when the element's uniform draw in [0, 1) falls below p (ONNX Runtime's rule), as float64.
MEMPLAN_HOST_DEVICE inline bool bernoulli_draw(std::uint64_t key, std::uint64_t index, double p) {
  return uniform_f64(key, index, 0.0, 1.0) < p;
}

}  // namespace memplan::runtime
