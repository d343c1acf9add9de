// bf16/fp16 on the CPU: an f32 kernel run on widened copies, its outputs rounded back (the reference for autocast graphs).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "analysis/float16.hpp"
#include "runtime_allocator/kernels/cpu_kernels.hpp"

namespace memplan::runtime::cpu {
namespace {

bool low(DType d) { return d == DType::bf16 || d == DType::f16; }

float load_low(DType d, std::uint16_t v) { return d == DType::bf16 ? analysis::bf16_to_float(v) : analysis::half_to_float(v); }
std::uint16_t store_low(DType d, float f) { return d == DType::bf16 ? analysis::float_to_bf16(f) : analysis::float_to_half(f); }

// An f32 stand-in for a bf16/f16 tensor: its own host buffer, same shape.
TensorRef widened(const TensorRef& t, std::vector<float>& storage) {
  // One element at least: an empty tensor is still present, and kernels tell a missing input by null data.
  storage.assign(std::max<std::size_t>(static_cast<std::size_t>(t.elements()), 1), 0.0f);
  TensorRef w{reinterpret_cast<std::byte*>(storage.data()), DType::f32, t.shape,
              static_cast<std::uint64_t>(t.elements()) * sizeof(float)};
  return w;
}

}  // namespace

bool is_low_precision(const TensorRef& t) { return t.data && low(t.dtype); }

void widen(const TensorRef& from, float* to) {
  const auto* v = from.as<std::uint16_t>();
  for (std::int64_t i = 0; i < from.elements(); ++i) to[i] = load_low(from.dtype, v[i]);
}

void narrow(const float* from, const TensorRef& to) {
  auto* v = to.as<std::uint16_t>();
  for (std::int64_t i = 0; i < to.elements(); ++i) v[i] = store_low(to.dtype, from[i]);
}

void run_widened(KernelFn fn, const Op& op, const Refs& in, const Refs& out) {
  std::vector<std::vector<float>> storage(in.size() + out.size());
  Refs win = in, wout = out;
  for (std::size_t i = 0; i < in.size(); ++i)
    if (is_low_precision(in[i])) {
      win[i] = widened(in[i], storage[i]);
      widen(in[i], storage[i].data());
    }
  for (std::size_t i = 0; i < out.size(); ++i)
    if (is_low_precision(out[i])) wout[i] = widened(out[i], storage[in.size() + i]);
  fn(op, win, wout);
  for (std::size_t i = 0; i < out.size(); ++i)
    if (is_low_precision(out[i])) narrow(storage[in.size() + i].data(), out[i]);
}

}  // namespace memplan::runtime::cpu
