// IEEE binary16 and bfloat16 conversions from and to float32, rounding to nearest even (as PyTorch's c10::Half
// and c10::BFloat16 do); NaN stays NaN, overflow becomes infinity, half subnormals are kept.
#pragma once

#include <cstdint>
#include <cstring>

namespace memplan::analysis {

inline float bf16_to_float(std::uint16_t b) noexcept {
  const std::uint32_t w = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}

inline std::uint16_t float_to_bf16(float f) noexcept {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest, ties to even (a carry into the exponent is right)
  return static_cast<std::uint16_t>(x >> 16);
}

inline float half_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  std::uint32_t w;
  if (exp == 0x1fu) {
    w = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    w = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    w = sign;
  } else {  // subnormal: normalize
    std::uint32_t e = 113u, m = mant;
    while (!(m & 0x400u)) {
      m <<= 1;
      --e;
    }
    w = sign | (e << 23) | ((m & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}

inline std::uint16_t float_to_half(float f) noexcept {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to or above 65520: inf
  if (a >= 0x38800000u) {  // normal half: drop 13 bits with ties to even
    const std::uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - (112u << 23);
    return static_cast<std::uint16_t>(sign | (r >> 13));
  }
  if (a < 0x33000000u) return sign;  // below half the smallest subnormal: zero
  // Subnormal half: the value in units of 2^-24, rounded to nearest even.
  const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126u - (a >> 23);  // 14 .. 24
  std::uint32_t q = m >> shift;
  const std::uint32_t rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
  return static_cast<std::uint16_t>(sign | q);
}

}  // namespace memplan::analysis
