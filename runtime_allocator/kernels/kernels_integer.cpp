// CPU kernels of the remaining elementwise ops over numbers of any visited dtype: Mod (fmod 0: the divisor's sign, as
// Python's %; fmod 1: the dividend's, as C's fmod), IsInf, BitwiseAnd/Or/Xor/Not, BitShift; and Size.
#include <cmath>
#include <type_traits>

#include "runtime_allocator/kernels/cpu_kernels.hpp"

namespace memplan::runtime::cpu {
namespace {

// y = f(a, b) over numpy-broadcast a and b of one dtype T (visited), y of dtype R (T when void).
template <class R, class F>
void binary(const Op& op, const Refs& in, const Refs& out, F&& f) {
  const TensorRef& a = required(op, in, 0);
  const TensorRef& b = required(op, in, 1);
  if (a.dtype != b.dtype) unsupported(op, "operands of one dtype expected");
  visit_dtype(op, a.dtype, [&](auto tag) {
    using T = decltype(tag);
    using Out = std::conditional_t<std::is_void_v<R>, T, R>;
    const T* pa = a.as<T>();
    const T* pb = b.as<T>();
    Out* py = out[0].as<Out>();
    broadcast_loop(out[0].shape, {&a.shape, &b.shape},
                   [&](std::int64_t i, const Offsets& o) { py[i] = f(op, pa[o[0]], pb[o[1]]); });
  });
}

struct ModFn {
  bool c_style = false;
  template <class T>
  T operator()(const Op& op, T a, T b) const {
    if constexpr (std::is_same_v<T, bool>) {
      unsupported(op, "bool Mod");
    } else if constexpr (std::is_floating_point_v<T>) {
      const T r = std::fmod(a, b);
      return c_style || r == T(0) || (r < 0) == (b < 0) ? r : static_cast<T>(r + b);
    } else {
      if (b == 0) fail(ErrorKind::runtime, "op '" + op.name + "' (Mod): integer division by zero");
      if constexpr (std::is_signed_v<T>) {
        if (b == -1) return T(0);  // INT_MIN % -1 overflows in C
      }
      const T r = static_cast<T>(a % b);
      if constexpr (std::is_signed_v<T>) {
        if (!c_style && r != 0 && (r < 0) != (b < 0)) return static_cast<T>(r + b);
      }
      return r;
    }
  }
};

void k_mod(const Op& op, const Refs& in, const Refs& out) { binary<void>(op, in, out, ModFn{op.attr_int("fmod", 0) != 0}); }

template <int kWhich>  // 0 and, 1 or, 2 xor, 3 shift left, 4 shift right
void k_bits(const Op& op, const Refs& in, const Refs& out) {
  binary<void>(op, in, out, [](const Op& o, auto a, auto b) -> decltype(a) {
    using T = decltype(a);
    if constexpr (std::is_floating_point_v<T>) {
      unsupported(o, "a float operand of a bitwise op");
    } else if constexpr (kWhich == 0) {
      return static_cast<T>(a & b);
    } else if constexpr (kWhich == 1) {
      return static_cast<T>(a | b);
    } else if constexpr (kWhich == 2) {
      return static_cast<T>(a ^ b);
    } else {
      using U = std::make_unsigned_t<std::conditional_t<std::is_same_v<T, bool>, std::uint8_t, T>>;
      const auto s = static_cast<U>(b);
      if (s >= sizeof(U) * 8) return T(0);
      return static_cast<T>(kWhich == 3 ? static_cast<U>(static_cast<U>(a) << s) : static_cast<U>(static_cast<U>(a) >> s));
    }
  });
}

void k_bit_shift(const Op& op, const Refs& in, const Refs& out) {
  if (op.attr_string("direction", "LEFT") == "LEFT")
    k_bits<3>(op, in, out);
  else
    k_bits<4>(op, in, out);
}

void k_bitwise_not(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  visit_dtype(op, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      unsupported(op, "a float operand of BitwiseNot");
    } else {
      for (std::int64_t i = 0; i < x.elements(); ++i) {
        if constexpr (std::is_same_v<T, bool>)
          out[0].as<T>()[i] = !x.as<T>()[i];
        else
          out[0].as<T>()[i] = static_cast<T>(~x.as<T>()[i]);
      }
    }
  });
}

void k_is_inf(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  const bool pos = op.attr_int("detect_positive", 1) != 0, neg = op.attr_int("detect_negative", 1) != 0;
  bool* y = out[0].as<bool>();
  visit_dtype(op, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (std::int64_t i = 0; i < x.elements(); ++i) {
      if constexpr (std::is_floating_point_v<T>) {
        const T v = x.as<T>()[i];
        y[i] = std::isinf(v) && (v > 0 ? pos : neg);
      } else {
        y[i] = false;
      }
    }
  });
}

void k_size(const Op& op, const Refs& in, const Refs& out) { *out[0].as<std::int64_t>() = required(op, in, 0).elements(); }

}  // namespace

void add_integer_kernels(KernelTable& t) {
  constexpr KernelConstraints kNumbers{kVisitedDTypes};
  t["Mod"] = {k_mod, true, kNumbers};
  t["BitwiseAnd"] = {k_bits<0>, true, kNumbers};
  t["BitwiseOr"] = {k_bits<1>, true, kNumbers};
  t["BitwiseXor"] = {k_bits<2>, true, kNumbers};
  t["BitShift"] = {k_bit_shift, true, kNumbers};
  t["BitwiseNot"] = {k_bitwise_not, true, kNumbers};
  t["IsInf"] = {k_is_inf, false, kNumbers};
  t["Size"] = {k_size, false, {kAnyDType}};
}

}  // namespace memplan::runtime::cpu
