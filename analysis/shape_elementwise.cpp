// Shape rules of elementwise ops: unary (shape and dtype kept), broadcasting binary/variadic, compare, Where, Cast.
#include "analysis/shape_rules.hpp"

namespace memplan::analysis::shape_detail {
namespace {

void same_as_input(OpContext& c) { c.set_output(0, c.in_dtype(0), c.in_shape(0)); }

void bool_like_input(OpContext& c) { c.set_output(0, DType::boolean, c.in_shape(0)); }

Shape broadcast_all(const OpContext& c, std::size_t first) {
  Shape s = c.in_shape(first);
  for (std::size_t i = first + 1; i < c.num_inputs(); ++i)
    if (c.has_input(i)) s = broadcast(c, s, c.in_shape(i));
  return s;
}

// Add, Mul, Max, Sum, BitShift, ...: numpy broadcast over every input, all of one dtype.
void broadcast_op(OpContext& c) {
  if (c.num_inputs() == 0) c.fail_shape("needs at least one input");
  for (std::size_t i = 1; i < c.num_inputs(); ++i) c.require_same_dtype(0, i);
  c.set_output(0, c.in_dtype(0), broadcast_all(c, 0));
}

// Pow allows the exponent's dtype to differ; the result has the base's dtype.
void broadcast_first_dtype(OpContext& c) { c.set_output(0, c.in_dtype(0), broadcast_all(c, 0)); }

void compare_op(OpContext& c) {
  c.require_same_dtype(0, 1);
  c.set_output(0, DType::boolean, broadcast_all(c, 0));
}

void where_op(OpContext& c) {
  c.require_same_dtype(1, 2);
  c.set_output(0, c.in_dtype(1), broadcast_all(c, 0));
}

void cast_op(OpContext& c) {
  const std::int64_t to = c.op().attr_int("to", 0);
  if (to <= 0 || to > kMaxDType) c.fail_shape("attribute 'to' is not a known dtype: " + std::to_string(to));
  c.set_output(0, static_cast<DType>(to), c.in_shape(0));
}

void cast_like_op(OpContext& c) { c.set_output(0, c.in_dtype(1), c.in_shape(0)); }

// PRelu: the slope broadcasts to X (unidirectionally).
void prelu_op(OpContext& c) {
  const Shape x = c.in_shape(0);
  c.require_same_dtype(0, 1);
  if (broadcast(c, x, c.in_shape(1)) != x)
    c.fail_shape("slope " + shape_str(c.in_shape(1)) + " does not broadcast to " + shape_str(x));
  c.set_output(0, c.in_dtype(0), x);
}

// Dropout: output like the input; the optional mask is bool of the same shape.
void dropout_op(OpContext& c) {
  c.set_output(0, c.in_dtype(0), c.in_shape(0));
  c.set_output(1, DType::boolean, c.in_shape(0));
}

// RandomUniformLike / RandomNormalLike: the input's shape, the `dtype` attribute's element type (the input's
// when absent); only floating-point results are defined by ONNX.
void random_like_op(OpContext& c) {
  const std::int64_t code = c.op().attr_int("dtype", static_cast<std::int64_t>(c.in_dtype(0)));
  if (code < 1 || code > kMaxDType || !dtype_is_float(static_cast<DType>(code)))
    c.fail_shape("dtype " + std::to_string(code) + " is not a floating-point element type");
  c.set_output(0, static_cast<DType>(code), c.in_shape(0));
}

// RandomNormal / RandomUniform: the `shape` attribute's dims (each >= 0), the `dtype` attribute's float type
// (float32 when absent).
void random_op(OpContext& c) {
  const Attribute* shape = c.op().attr("shape");
  if (!shape) c.fail_shape("the required attribute 'shape' is missing");
  const Shape dims = c.op().attr_ints("shape");
  for (auto d : dims)
    if (d < 0) c.fail_shape("shape " + shape_str(dims) + " has a negative dim");
  c.product(dims);  // overflow is an error here, not in the kernel
  const std::int64_t code = c.op().attr_int("dtype", static_cast<std::int64_t>(DType::f32));
  if (code < 1 || code > kMaxDType || !dtype_is_float(static_cast<DType>(code)))
    c.fail_shape("dtype " + std::to_string(code) + " is not a floating-point element type");
  c.set_output(0, static_cast<DType>(code), dims);
}

// Bernoulli: 0/1 draws of the input's shape in the `dtype` attribute's type (the input's when absent); the input
// holds float probabilities.
void bernoulli_op(OpContext& c) {
  if (!dtype_is_float(c.in_dtype(0))) c.fail_shape("input 0 must hold floating-point probabilities");
  const std::int64_t code = c.op().attr_int("dtype", static_cast<std::int64_t>(c.in_dtype(0)));
  if (code < 1 || code > kMaxDType) c.fail_shape("dtype " + std::to_string(code) + " is not an element type");
  c.set_output(0, static_cast<DType>(code), c.in_shape(0));
}

}  // namespace

void add_elementwise_rules(RuleTable& t) {
  for (const char* name :
       {"Identity", "Erf", "Sqrt", "Exp", "Log", "Neg", "Abs", "Relu", "Sigmoid", "Tanh", "Clip", "LeakyRelu", "Gelu",
        "Softmax", "LogSoftmax", "Hardmax", "Floor", "Ceil", "Round", "Reciprocal", "Sign", "Sin", "Cos", "Tan", "Asin",
        "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish",
        "Softplus", "Softsign", "Mish", "ThresholdedRelu", "CumSum", "Trilu", "ScatterND", "ScatterElements",
        "LRN", "MeanVarianceNormalization", "BitwiseNot", "Shrink", "Swish", "QuickGelu"})
    t[name].shape = &same_as_input;
  for (const char* name : {"IsNaN", "IsInf"}) t[name].shape = &bool_like_input;
  for (const char* name : {"Add", "Sub", "Mul", "Div", "Mod", "Min", "Max", "Sum", "Mean", "BitwiseAnd", "BitwiseOr",
                           "BitwiseXor", "BitShift"})
    t[name].shape = &broadcast_op;
  t["Pow"].shape = &broadcast_first_dtype;
  for (const char* name : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor"})
    t[name].shape = &compare_op;
  t["Not"].shape = &bool_like_input;
  t["Where"].shape = &where_op;
  t["Cast"].shape = &cast_op;
  t["CastLike"].shape = &cast_like_op;
  t["PRelu"].shape = &prelu_op;
  t["Dropout"].shape = &dropout_op;
  t["RandomUniformLike"].shape = &random_like_op;
  t["RandomNormalLike"].shape = &random_like_op;
  t["RandomNormal"].shape = &random_op;
  t["RandomUniform"].shape = &random_op;
  t["Bernoulli"].shape = &bernoulli_op;
}

}  // namespace memplan::analysis::shape_detail
