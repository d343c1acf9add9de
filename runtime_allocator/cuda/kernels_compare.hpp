// CUDA kernels of the ONNX comparison, logic, integer arithmetic, Cast and Sin/Cos ops that the
// generated float elementwise kernels do not cover. Semantics follow the CPU kernels
// (runtime_allocator/kernels/kernels_elementwise.cpp): numpy broadcasting of two operands over the output.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime_allocator/cuda/kernels_layers.hpp"

namespace memplan::runtime::cuda {

// The element types these kernels read and write; bool is one byte, 0 or 1. bf16 and f16 only in Cast.
enum class ElemType : std::uint8_t { f32, i64, i32, boolean, bf16, f16 };

enum class CompareOp : std::uint8_t { equal, greater, greater_equal, less, less_equal, logical_and, logical_or, logical_xor };

// out[i] = a[i'] OP b[i''] as bool bytes (operands 0 and 1 of `shape`); the logic ops read their
// operands as truth values (non-zero is true).
void compare(CompareOp op, ElemType type, const void *a, const void *b, std::uint8_t *out, const BroadcastShape &shape,
             cudaStream_t stream);

// mod: the divisor's sign (ONNX Mod fmod 0, Python's %); fmod: the dividend's (fmod 1, C's %); a zero divisor gives 0.
enum class IntOp : std::uint8_t { add, sub, mul, min, max, mod, fmod, bit_and, bit_or, bit_xor };

// out[i] = a[i'] OP b[i''] over int64 or int32 (wrapping as the CPU's two's complement does).
void int_binary(IntOp op, ElemType type, const void *a, const void *b, void *out, const BroadcastShape &shape,
                cudaStream_t stream);

// Not of bool bytes: out[i] = x[i] == 0.
void logical_not(const std::uint8_t *x, std::uint8_t *out, std::int64_t n, cudaStream_t stream);

// Cast of n elements as static_cast (to bool: x != 0; bf16/f16 through float, rounded to nearest even). out may alias
// x when the element sizes are equal.
void cast(const void *x, ElemType from, void *out, ElemType to, std::int64_t n, cudaStream_t stream);

// Sin (cosine false) or Cos of float32, or of bf16/f16 computed in float32 (x and out of one `storage`).
void sin_cos(const void *x, void *out, FloatStorage storage, std::int64_t n, bool cosine, cudaStream_t stream);

}  // namespace memplan::runtime::cuda
