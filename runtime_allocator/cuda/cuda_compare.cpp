// The CUDA executor's comparison (Equal, Greater, GreaterOrEqual, Less, LessOrEqual), logic (And, Or, Xor,
// Not), integer arithmetic (Add, Sub, Mul, Min, Max, Mod, BitwiseAnd/Or/Xor of int64/int32: float Add ... Max run as
// generated elementwise kernels), Cast between float32, bf16, f16, int64, int32 and bool (between float dtypes a generated kernel runs it
// first), and Sin/Cos (float32, bf16, f16). Semantics follow the CPU kernels
// (runtime_allocator/kernels/kernels_elementwise.cpp).
#include "runtime_allocator/cuda/cuda_compare.hpp"

#include <optional>
#include <string>

#include "runtime_allocator/cuda/kernels_compare.hpp"

namespace memplan::runtime::cuda {

using analysis::DType;
using analysis::Op;
using analysis::TensorId;

namespace {

std::optional<ElemType> elem_type(DType d) {
  switch (d) {
    case DType::f32: return ElemType::f32;
    case DType::i64: return ElemType::i64;
    case DType::i32: return ElemType::i32;
    case DType::boolean: return ElemType::boolean;
    case DType::bf16: return ElemType::bf16;
    case DType::f16: return ElemType::f16;
    default: return std::nullopt;
  }
}

ElemType type_of(const ExecState& s, const Op& op, TensorId t) {
  const auto e = elem_type(s.tensor(t).dtype);
  if (!e) unsupported(op, std::string("dtype ") + analysis::dtype_name(s.tensor(t).dtype) + " (float32, bfloat16, float16, int64, int32, bool only)");
  return *e;
}

std::optional<CompareOp> compare_op(const std::string& t) {
  static const std::pair<const char*, CompareOp> table[] = {
      {"Equal", CompareOp::equal}, {"Greater", CompareOp::greater}, {"GreaterOrEqual", CompareOp::greater_equal},
      {"Less", CompareOp::less},   {"LessOrEqual", CompareOp::less_equal}, {"And", CompareOp::logical_and},
      {"Or", CompareOp::logical_or}, {"Xor", CompareOp::logical_xor}};
  for (const auto& [name, c] : table)
    if (t == name) return c;
  return std::nullopt;
}

std::optional<IntOp> int_op(const Op& op) {
  const std::string& t = op.type;
  if (t == "Mod") return op.attr_int("fmod", 0) != 0 ? IntOp::fmod : IntOp::mod;
  static const std::pair<const char*, IntOp> table[] = {
      {"Add", IntOp::add},         {"Sub", IntOp::sub},       {"Mul", IntOp::mul},        {"Min", IntOp::min},
      {"Max", IntOp::max},         {"BitwiseAnd", IntOp::bit_and}, {"BitwiseOr", IntOp::bit_or}, {"BitwiseXor", IntOp::bit_xor}};
  for (const auto& [name, o] : table)
    if (t == name) return o;
  return std::nullopt;
}

// The two inputs of a binary op, of one dtype.
ElemType binary_type(const ExecState& s, const Op& op) {
  if (op.inputs.size() != 2 || op.input(0) == analysis::kNoTensor || op.input(1) == analysis::kNoTensor)
    unsupported(op, "two inputs expected");
  const ElemType a = type_of(s, op, op.inputs[0]);
  if (type_of(s, op, op.inputs[1]) != a) unsupported(op, "inputs of different dtypes");
  return a;
}

void run_compare(ExecState& s, const Op& op, CompareOp c) {
  const ElemType t = binary_type(s, op);
  if (c >= CompareOp::logical_and && t != ElemType::boolean) unsupported(op, "bool inputs expected");
  const TensorId out = op.outputs.at(0);
  if (s.tensor(out).dtype != DType::boolean) unsupported(op, "bool output expected");
  compare(c, t, s.ptr[op.inputs[0]], s.ptr[op.inputs[1]], reinterpret_cast<std::uint8_t*>(s.ptr[out]),
          broadcast_shape(s, op, s.dims(out), op.inputs), s.ctx.stream());
}

void run_int_binary(ExecState& s, const Op& op, IntOp o) {
  const ElemType t = binary_type(s, op);
  if (t != ElemType::i64 && t != ElemType::i32) unsupported(op, "int64 or int32 inputs expected (float ones are generated kernels)");
  const TensorId out = op.outputs.at(0);
  int_binary(o, t, s.ptr[op.inputs[0]], s.ptr[op.inputs[1]], s.ptr[out], broadcast_shape(s, op, s.dims(out), op.inputs),
             s.ctx.stream());
}

std::int64_t elements(const ExecState& s, TensorId t) { return static_cast<std::int64_t>(s.tensor(t).element_count()); }

}  // namespace

bool run_compare_op(ExecState& s, const Op& op) {
  const std::string& t = op.type;
  if (auto c = compare_op(t)) return run_compare(s, op, *c), true;
  if (auto o = int_op(op)) return run_int_binary(s, op, *o), true;
  if (t != "Not" && t != "Cast" && t != "Sin" && t != "Cos") return false;
  const TensorId x = op.inputs.at(0), out = op.outputs.at(0);
  if (t == "Not") {
    if (type_of(s, op, x) != ElemType::boolean) unsupported(op, "bool input expected");
    logical_not(reinterpret_cast<const std::uint8_t*>(s.ptr[x]), reinterpret_cast<std::uint8_t*>(s.ptr[out]), elements(s, x),
                s.ctx.stream());
  } else if (t == "Cast") {
    cast(s.ptr[x], type_of(s, op, x), s.ptr[out], type_of(s, op, out), elements(s, x), s.ctx.stream());
  } else {
    if (s.tensor(out).dtype != s.tensor(x).dtype) unsupported(op, "the output must have the input's dtype");
    sin_cos(s.ptr[x], s.ptr[out], float_storage(op, s.tensor(x).dtype), elements(s, x), t == "Cos", s.ctx.stream());
  }
  return true;
}

}  // namespace memplan::runtime::cuda
