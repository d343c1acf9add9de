// Loads and stores of bf16 / f16 elements as float32 for the hand-written kernels (the generated ones define their own
// conversions): widen() gives an element's float value (other types unchanged), narrow<T>() a float as a T, rounded
// to nearest even for bf16/f16; by_float_storage() picks a kernel's element type from FloatStorage.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "runtime_allocator/cuda/float_storage.hpp"

namespace memplan::runtime::cuda {

template <typename T>
__device__ __forceinline__ auto widen(T v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
  else if constexpr (std::is_same_v<T, __half>) return __half2float(v);
  else return v;
}

template <typename To, typename V>
__device__ __forceinline__ To narrow(V v) {
  if constexpr (std::is_same_v<To, __nv_bfloat16>) return __float2bfloat16_rn(static_cast<float>(v));
  else if constexpr (std::is_same_v<To, __half>) return __float2half_rn(static_cast<float>(v));
  else return static_cast<To>(v);
}

// Calls f(T{}) with the element type of `s`: float, __nv_bfloat16 or __half (host side, to pick a kernel's instance).
template <typename F>
void by_float_storage(FloatStorage s, F&& f) {
  if (s == FloatStorage::bf16) return f(__nv_bfloat16{});
  if (s == FloatStorage::f16) return f(__half{});
  return f(float{});
}

}  // namespace memplan::runtime::cuda
