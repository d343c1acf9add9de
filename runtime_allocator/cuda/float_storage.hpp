// How a hand-written kernel stores a float tensor's elements (kernels.hpp, half_io.cuh).
#pragma once

#include <cstdint>

namespace memplan::runtime::cuda {

// The storage of a float tensor that a hand-written kernel reads or writes: float32, or bf16/f16 widened to float32 as
// it loads and rounded to nearest even as it stores (half_io.cuh); the arithmetic is float32 either way.
enum class FloatStorage : std::uint8_t { f32, bf16, f16 };

}  // namespace memplan::runtime::cuda
