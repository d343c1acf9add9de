// One example instance per op type (shapes, attributes, which inputs train), read by the registry walks.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "analysis/graph.hpp"
#include "tests/runtime_allocator/op_graph.hpp"

namespace memplan::runtime::testing {

using Dims = std::vector<std::int64_t>;
using analysis::DType;

// How an input's values are drawn: `distinct` values are ±[0.2, 1] on a grid spaced far wider than the
// finite-difference step, so no element sits near a kink (0 for Relu/Abs) or ties another (MaxPool).
enum class Fill : std::uint8_t { distinct, positive, mask, above_one };  // above_one: 1.2 + [0, 1) (Acosh)

struct ExampleInput {
  Dims dims;
  DType dtype = DType::f32;
  Fill fill = Fill::distinct;
  bool trains = false;                       // a trainable weight whose gradient the FD walk checks
  std::optional<std::vector<double>> value;  // a constant in the graph (shape arguments, bounds)
};

struct ExampleOutput {
  Dims dims;  // declared: only memplan's own ops (ONNX ops' outputs are inferred)
  DType dtype = DType::f32;
};

struct Example {
  std::string domain;  // "" for ONNX's default domain
  std::string type;
  std::vector<ExampleInput> in;
  std::vector<ExampleOutput> out{ExampleOutput{}};
  std::map<std::string, analysis::Attribute> attrs;
  std::vector<std::string> covers = {};  // further op types ("memplan::BatchNormTraining") its training graph exercises
  bool forward = true;                   // false: only meaningful inside a training graph (not run alone)
  // Trained inputs reach the op as 1 * weight (an activation): Identity of a weight is folded into a weight
  // of its own, and Pow's exponent slot never trains as a weight.
  bool through_mul = false;
};

namespace ex {
inline ExampleInput t(Dims d) { return {std::move(d), DType::f32, Fill::distinct, true, std::nullopt}; }
inline ExampleInput tp(Dims d) { return {std::move(d), DType::f32, Fill::positive, true, std::nullopt}; }
inline ExampleInput x(Dims d) { return {std::move(d), DType::f32, Fill::distinct, false, std::nullopt}; }
inline ExampleInput xp(Dims d) { return {std::move(d), DType::f32, Fill::positive, false, std::nullopt}; }
inline ExampleInput mask(Dims d) { return {std::move(d), DType::boolean, Fill::mask, false, std::nullopt}; }
inline ExampleInput i64(Dims d, std::vector<double> v) { return {std::move(d), DType::i64, Fill::distinct, false, std::move(v)}; }
inline ExampleInput f32s(std::vector<double> v) {
  const auto n = static_cast<std::int64_t>(v.size());
  return {{n}, DType::f32, Fill::distinct, false, std::move(v)};
}
inline ExampleInput f32(double v) { return {{}, DType::f32, Fill::distinct, false, std::vector<double>{v}}; }
inline ExampleInput flag(bool v) { return {{}, DType::boolean, Fill::mask, false, std::vector<double>{v ? 1.0 : 0.0}}; }

inline analysis::Attribute i(std::int64_t v) { return testing::int_attr(v); }
inline analysis::Attribute f(double v) { return testing::float_attr(v); }
inline analysis::Attribute is(std::vector<std::int64_t> v) { return testing::ints_attr(std::move(v)); }
inline analysis::Attribute s(std::string v) { return testing::string_attr(std::move(v)); }
inline Example unary(const std::string& type, std::map<std::string, analysis::Attribute> attrs = {}) {
  return {"", type, {t({2, 3})}, {{}}, std::move(attrs)};
}
inline Example binary(const std::string& type, Dims b = {2, 3}, DType out = DType::f32) {
  return {"", type, {t({2, 3}), t(std::move(b))}, {{{}, out}}, {}};
}
}  // namespace ex

// Opset 17 spellings (ReduceMean's axes an attribute, ReduceSum's an input).
inline const std::vector<Example>& examples() {
  using namespace ex;
  using A = std::map<std::string, analysis::Attribute>;
  static const std::vector<Example> all = [] {
    std::vector<Example> v;
    // Identity passes the loss's gradient through unchanged: its check is the check of MSELoss's backward
    // rule, which seeds every training graph.
    v.push_back({"", "Identity", {t({2, 3})}, {{}}, {}, {"memplan::MSELoss"}, true, true});
    for (const char* u : {"Relu", "Sigmoid", "Tanh", "Erf", "Gelu", "Neg", "Exp", "Abs", "Reciprocal",
                          "Floor", "Ceil", "Softplus", "Elu", "HardSigmoid", "HardSwish", "Round", "Sign", "Sin", "Cos",
                          "Mish", "Selu", "Celu", "Swish"})
      v.push_back(unary(u));
    v.push_back({"", "Sqrt", {tp({2, 3})}});
    v.push_back({"", "Log", {tp({2, 3})}});
    v.push_back(unary("LeakyRelu", {{"alpha", f(0.1)}}));
    v.push_back(unary("Cast", {{"to", i(1)}}));
    v.push_back({"", "IsNaN", {x({2, 3})}, {{{}, DType::boolean}}});
    v.push_back({"", "Not", {mask({2, 3})}, {{{}, DType::boolean}}});
    v.push_back({"", "Clip", {t({2, 3}), f32(-0.55), f32(0.55)}});
    v.push_back(binary("Add", {3}));
    v.push_back(binary("Sub"));
    v.push_back(binary("Mul", {1, 3}));
    v.push_back(binary("Div"));
    v.push_back({"", "Pow", {tp({2, 3}), t({2, 3})}, {{}}, {}, {"memplan::PowGradExponent"}, true, true});
    v.push_back(binary("Max"));
    v.push_back(binary("Min"));
    v.push_back({"", "Sum", {t({2, 3}), t({2, 3}), t({3})}});
    v.push_back(binary("PRelu", {3}));
    for (const char* c : {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"})
      v.push_back({"", c, {x({2, 3}), x({2, 3})}, {{{}, DType::boolean}}});
    for (const char* c : {"And", "Or"}) v.push_back({"", c, {mask({2, 3}), mask({2, 3})}, {{{}, DType::boolean}}});
    v.push_back({"", "Where", {mask({2, 3}), t({2, 3}), t({2, 3})}});
    v.push_back({"", "Expand", {t({1, 3}), i64({2}, {4, 3})}});
    v.push_back({"", "Tile", {x({2, 3}), i64({2}, {2, 1})}});
    v.push_back({"", "MatMul", {t({2, 3, 4}), t({4, 5})}});
    v.push_back({"", "Gemm", {t({3, 4}), t({5, 4}), t({5})}, {{}}, A{{"transB", i(1)}}});
    v.push_back({"", "Conv", {t({1, 2, 5, 5}), t({3, 2, 3, 3}), t({3})}, {{}}, A{{"pads", is({1, 1, 1, 1})}}});
    v.push_back({"", "BatchNormalization", {t({2, 3, 2, 2}), t({3}), t({3}), x({3}), xp({3})}, {{}},
                 A{{"training_mode", i(1)}, {"epsilon", f(1e-5)}}, {"memplan::BatchNormTraining"}, false});
    v.push_back({"", "BatchNormalization", {x({2, 3, 2, 2}), x({3}), x({3}), x({3}), xp({3})}});
    v.push_back({"", "LayerNormalization", {t({2, 3, 4}), t({4}), t({4})}, {{}}, A{{"axis", i(-1)}}});
    v.push_back({"memplan", "RMSNormalization", {t({2, 3, 4}), t({4})}, {{{2, 3, 4}}}, A{{"axis", i(-1)}, {"epsilon", f(1e-6)}},
                 {"memplan::RMSNormGrad"}});
    v.push_back({"memplan", "RMSNormalization", {t({2, 3, 4})}, {{{2, 3, 4}}}, A{{"axis", i(1)}, {"epsilon", f(1e-5)}}});  // no scale
    v.push_back(unary("Gelu", {{"approximate", s("tanh")}}));
    v.push_back({"", "Softmax", {t({2, 4})}, {{}}, A{{"axis", i(-1)}}});
    v.push_back({"", "LogSoftmax", {t({2, 4})}, {{}}, A{{"axis", i(-1)}}});
    const A pool{{"kernel_shape", is({2, 2})}, {"strides", is({2, 2})}};
    v.push_back({"", "MaxPool", {t({1, 2, 4, 4})}, {{}}, pool});
    v.push_back({"", "AveragePool", {t({1, 2, 4, 4})}, {{}}, pool});
    v.push_back({"", "GlobalAveragePool", {t({1, 2, 3, 3})}});
    // 1-D and 3-D windows: groups, dilations, strides, asymmetric pads; ConvTranspose with output_padding, bias and
    // groups (its gradients: a Conv, ConvGradWeight with X and dY swapped, ConvGradBias).
    v.push_back({"", "Conv", {t({1, 4, 7}), t({2, 2, 3}), t({2})}, {{}}, A{{"group", i(2)}, {"dilations", is({2})}, {"pads", is({1, 0})}}});
    v.push_back({"", "Conv", {t({1, 2, 4, 4, 3}), t({2, 2, 2, 3, 2})}, {{}}, A{{"strides", is({2, 1, 1})}, {"pads", is({1, 0, 1, 0, 1, 0})}}});
    v.push_back({"", "ConvTranspose", {t({1, 2, 3, 3}), t({2, 3, 3, 2}), t({3})}, {{}},
                 A{{"strides", is({2, 2})}, {"pads", is({1, 0, 1, 1})}, {"output_padding", is({1, 0})}}});
    v.push_back({"", "ConvTranspose", {t({1, 4, 2, 2, 3}), t({4, 1, 2, 2, 2})}, {{}}, A{{"group", i(2)}, {"strides", is({1, 2, 1})}}});
    v.push_back({"", "ConvTranspose", {t({2, 2, 3}), t({2, 2, 3})}, {{}}, A{{"auto_pad", s("SAME_LOWER")}, {"strides", is({2})}}});
    v.push_back({"", "MaxPool", {t({1, 2, 4, 3, 4})}, {{}}, A{{"kernel_shape", is({2, 2, 3})}, {"strides", is({2, 1, 1})}, {"pads", is({1, 0, 1, 0, 1, 1})}}});
    v.push_back({"", "MaxPool", {t({1, 2, 7})}, {{}}, A{{"kernel_shape", is({2})}, {"dilations", is({2})}, {"ceil_mode", i(1)}, {"strides", is({2})}}});
    v.push_back({"", "MaxPool", {t({1, 2, 4, 5})}, {{}}, A{{"kernel_shape", is({2, 3})}, {"strides", is({2, 1})}, {"storage_order", i(1)}}});
    v.push_back({"", "AveragePool", {t({1, 2, 3, 4, 4})}, {{}},
                 A{{"kernel_shape", is({2, 2, 2})}, {"strides", is({1, 2, 2})}, {"pads", is({1, 1, 0, 0, 1, 1})}, {"count_include_pad", i(1)}}});
    v.push_back({"", "AveragePool", {t({1, 2, 5})}, {{}}, A{{"kernel_shape", is({2})}, {"strides", is({2})}, {"ceil_mode", i(1)}}});
    // A window wider than the map under ceil_mode (PyTorch's AvgPool2d(k, ceil_mode=True) on a smaller map): one output.
    v.push_back({"", "AveragePool", {t({2, 2, 3, 3})}, {{}},
                 A{{"kernel_shape", is({7, 5})}, {"strides", is({7, 5})}, {"ceil_mode", i(1)}, {"count_include_pad", i(1)}}});
    v.push_back({"", "LpPool", {x({1, 2, 3, 4})}, {{}}, A{{"kernel_shape", is({2, 2})}, {"p", i(3)}, {"pads", is({0, 1, 0, 1})}}});
    v.push_back({"", "GlobalLpPool", {x({1, 2, 2, 3, 2})}});
    v.push_back({"", "GlobalMaxPool", {x({1, 2, 3, 3})}});
    v.push_back({"", "ReduceMean", {t({2, 3, 4})}, {{}}, A{{"axes", is({1})}, {"keepdims", i(0)}}});
    v.push_back({"", "ReduceSum", {t({2, 3, 4}), i64({1}, {1})}, {{}}, A{{"keepdims", i(0)}}});
    for (const char* r : {"ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare"})
      v.push_back({"", r, {x({2, 3, 4})}, {{}}, A{{"axes", is({1})}, {"keepdims", i(1)}}});
    v.push_back({"", "Transpose", {t({2, 3, 4})}, {{}}, A{{"perm", is({2, 0, 1})}}});
    // perm entries counted from the end, as the TorchScript exporter writes them (nemotron_h's mixer).
    v.push_back({"", "Transpose", {t({2, 3, 4, 5})}, {{}}, A{{"perm", is({0, -2, -1, 1})}}});
    v.push_back({"", "Concat", {t({2, 3}), t({2, 2})}, {{}}, A{{"axis", i(1)}}});
    v.push_back({"", "Split", {t({2, 6}), i64({2}, {2, 4})}, {{}, {}}, A{{"axis", i(1)}}});
    v.push_back({"", "Pad", {t({2, 3}), i64({4}, {1, 0, 0, 2})}});
    // A pad value and axes (opset 18), crops (negative pads), the reflect, edge and wrap modes (pads beyond the
    // axis reflect and wrap more than once): their gradients are memplan PadGrad.
    v.push_back({"", "Pad", {t({2, 3, 4}), i64({4}, {1, -1, 2, 0}), f32(0.5), i64({2}, {0, -1})}, {{}}, {}, {"memplan::PadGrad"}});
    for (const char* mode : {"reflect", "edge", "wrap"}) {
      v.push_back({"", "Pad", {t({3, 4}), i64({4}, {2, -1, 1, 3})}, {{}}, A{{"mode", s(mode)}}});
      v.push_back({"", "Pad", {t({2, 3}), i64({4}, {1, 4, 0, 5})}, {{}}, A{{"mode", s(mode)}}});
    }
    v.push_back({"", "Slice", {t({4, 5}), i64({1}, {1}), i64({1}, {4}), i64({1}, {1})}});
    // Two axes, a negative shift and one past the axis (wrapped); the gradient is a Roll back.
    v.push_back({"memplan", "Roll", {t({2, 3, 4})}, {{{2, 3, 4}}}, A{{"shifts", is({-1, 5})}, {"axes", is({1, -1})}}});
    v.push_back({"", "Gather", {t({5, 3}), i64({4}, {0, 2, 4, 2})}, {{}}, A{{"axis", i(0)}}});
    v.push_back({"", "GatherElements", {t({3, 4}), i64({3, 2}, {0, 3, 1, 1, 2, 0})}, {{}}, A{{"axis", i(1)}}});
    v.push_back({"", "GatherElements", {x({3, 4}), i64({2, 4}, {0, -1, 2, 1, 2, 2, 0, 1})}, {{}}, A{{"axis", i(0)}}});
    // N-d indexing (kernels_scatter.cpp): negative indices, repeated tuples accumulating in GatherND's gradient,
    // batch_dims, each scatter reduction, int64 data.
    v.push_back({"", "GatherND", {t({3, 4}), i64({3, 1}, {2, -3, 2})}});
    v.push_back({"", "GatherND", {t({2, 3, 2}), i64({2, 2}, {1, 2, 0, -1})}});
    v.push_back({"", "GatherND", {x({2, 3, 2}), i64({2, 1, 1}, {1, 2})}, {{}}, A{{"batch_dims", i(1)}}});
    v.push_back({"", "ScatterND", {t({4, 3}), i64({2, 1}, {3, -4}), t({2, 3})}});
    v.push_back({"", "ScatterND", {t({2, 3, 2}), i64({2, 2}, {1, 2, 0, 0}), t({2, 2})}});
    // reduction add trains (its gradient checked, repeated indices included); the others are forward only
    v.push_back({"", "ScatterND", {t({4, 3}), i64({3, 1}, {1, 1, -2}), t({3, 3})}, {{}}, A{{"reduction", s("add")}}});
    for (const char* r : {"mul", "max", "min"})
      v.push_back({"", "ScatterND", {x({4, 3}), i64({3, 1}, {1, 1, -2}), x({3, 3})}, {{}}, A{{"reduction", s(r)}}});
    v.push_back({"", "ScatterND", {i64({2, 3}, {1, 2, 3, 4, 5, 6}), i64({2, 2}, {1, 0, 0, 2}), i64({2}, {-7, 9})}});
    v.push_back({"", "ScatterElements", {t({3, 4}), i64({2, 4}, {0, 2, 1, -1, 2, 0, 0, 1}), t({2, 4})}, {{}}, A{{"axis", i(0)}}});
    v.push_back({"", "ScatterElements", {t({3, 4}), i64({3, 2}, {0, 0, 3, 3, -1, 2}), t({3, 2})}, {{}}, A{{"axis", i(1)}, {"reduction", s("add")}}});
    for (const char* r : {"mul", "max", "min"})
      v.push_back({"", "ScatterElements", {x({3, 4}), i64({3, 2}, {0, 0, 3, 3, -1, 2}), x({3, 2})}, {{}}, A{{"axis", i(1)}, {"reduction", s(r)}}});
    v.push_back({"", "ScatterElements", {i64({2, 3}, {1, 2, 3, 4, 5, 6}), i64({1, 2}, {2, 0}), i64({1, 2}, {-7, 9})}, {{}}, A{{"axis", i(1)}}});
    // Resize and Upsample (kernels_resize.cpp): nearest, linear and cubic in each coordinate mode, scales or sizes, 1-3 resized
    // axes; their gradient memplan::ResizeGrad.
    v.push_back({"", "Resize", {t({1, 2, 3, 4}), f32s({}), f32s({1, 1, 2, 1.5})}});
    v.push_back({"", "Resize", {t({1, 1, 3, 3}), f32s({}), f32s({}), i64({4}, {1, 1, 5, 4})}, {{}},
                 A{{"mode", s("linear")}, {"coordinate_transformation_mode", s("align_corners")}}});
    v.push_back({"", "Resize", {t({2, 3, 4}), f32s({}), f32s({1, 0.5, 0.75})}, {{}}, A{{"mode", s("linear")}}});
    v.push_back({"", "Resize", {t({1, 1, 2, 2, 3}), f32s({}), f32s({1, 1, 2, 1.5, 2})}, {{}},
                 A{{"mode", s("linear")}, {"coordinate_transformation_mode", s("pytorch_half_pixel")}}});
    v.push_back({"", "Resize", {t({1, 1, 3, 5}), f32s({}), f32s({}), i64({2}, {2, 7})}, {{}},
                 A{{"axes", is({2, 3})}, {"nearest_mode", s("ceil")}, {"coordinate_transformation_mode", s("asymmetric")}}});
    // Cubic: PyTorch's bicubic (half_pixel, A = -0.75, edge taps clamped) as dinov2 resizes its position embeddings,
    // and exclude_outside with another A.
    v.push_back({"", "Resize", {t({1, 2, 4, 3}), f32s({}), f32s({}), i64({4}, {1, 2, 6, 5})}, {{}},
                 A{{"mode", s("cubic")}, {"cubic_coeff_a", f(-0.75)}}});
    v.push_back({"", "Resize", {t({1, 1, 5, 4}), f32s({}), f32s({1, 1, 0.6, 1.75})}, {{}},
                 A{{"mode", s("cubic")}, {"cubic_coeff_a", f(-0.5)}, {"exclude_outside", i(1)}}});
    v.push_back({"", "Upsample", {t({1, 1, 2, 3}), f32s({1, 1, 2, 2})}});
    v.push_back({"", "Upsample", {t({1, 2, 2, 3}), f32s({1, 1, 2, 1.5})}, {{}}, A{{"mode", s("linear")}}});
    v.push_back({"", "Resize", {x({1, 1, 4, 4}), f32s({0, 0, 0.2, -0.1, 1, 1, 0.9, 1.2}), f32s({1, 1, 1.5, 1})}, {{}},
                 A{{"mode", s("linear")}, {"coordinate_transformation_mode", s("tf_crop_and_resize")}, {"extrapolation_value", f(2.0)}}});
    v.push_back({"", "Resize", {i64({1, 2, 3}, {1, 2, 3, 4, 5, 6}), f32s({}), f32s({1, 1.5, 0.7})}, {{}},
                 A{{"coordinate_transformation_mode", s("tf_half_pixel_for_nn")}, {"nearest_mode", s("round_prefer_ceil")}}});
    // NonZero of data unknown at planning time: planned at x's element count, which these nonzero values fill.
    v.push_back({"", "NonZero", {x({2, 3})}, {{{}, DType::i64}}});
    v.push_back({"", "OneHot", {i64({2, 2}, {0, 2, -1, 5}), i64({}, {3}), f32s({-1, 7})}, {{}}, A{{"axis", i(1)}}});
    // Selections, integer and trigonometric ops (kernels_select.cpp, kernels_integer.cpp, fused_expr_activations.cpp).
    v.push_back({"", "ArgMax", {x({3, 4, 2})}, {{}}, A{{"axis", i(1)}, {"keepdims", i(0)}}});
    v.push_back({"", "ArgMin", {i64({2, 4}, {3, 1, 1, 2, 5, 5, 7, 5})}, {{}}, A{{"axis", i(-1)}, {"select_last_index", i(1)}}});
    v.push_back({"", "TopK", {t({3, 5}), i64({1}, {2})}, {{}, {}}});
    v.push_back({"", "TopK", {i64({3, 2}, {4, 1, 4, 2, 2, 9}), i64({1}, {3})}, {{}, {}}, A{{"axis", i(0)}, {"largest", i(0)}}});
    v.push_back({"", "Mod", {i64({2, 3}, {7, -7, 7, -7, 0, 5}), i64({3}, {3, 3, -3})}});
    v.push_back({"", "Mod", {x({2, 3}), xp({2, 3})}, {{}}, A{{"fmod", i(1)}}});
    for (const char* b : {"BitwiseAnd", "BitwiseOr", "BitwiseXor"}) v.push_back({"", b, {i64({2, 2}, {12, -3, 5, 0}), i64({2}, {10, 6})}});
    v.push_back({"", "BitwiseNot", {i64({3}, {0, 5, -1})}});
    const ExampleInput bytes{{3}, DType::u8, Fill::distinct, false, std::vector<double>{1, 16, 255}};
    const ExampleInput shifts{{3}, DType::u8, Fill::distinct, false, std::vector<double>{1, 3, 9}};
    v.push_back({"", "BitShift", {bytes, shifts}, {{}}, A{{"direction", s("RIGHT")}}});
    v.push_back({"", "BitShift", {bytes, shifts}, {{}}, A{{"direction", s("LEFT")}}});
    v.push_back({"", "IsInf", {x({2, 3})}, {{{}, DType::boolean}}, A{{"detect_negative", i(0)}}});
    v.push_back({"", "Size", {x({2, 3})}, {{{}, DType::i64}}});
    v.push_back({"", "Hardmax", {x({2, 3, 4})}, {{}}, A{{"axis", i(1)}}});
    v.push_back({"", "MeanVarianceNormalization", {x({2, 3, 2, 2})}});
    v.push_back({"", "ReduceLogSum", {xp({2, 3, 4})}, {{}}, A{{"axes", is({1})}, {"keepdims", i(0)}}});
    for (const char* u : {"Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Atanh"}) v.push_back(unary(u));
    v.push_back({"", "Acosh", {{{2, 3}, DType::f32, Fill::above_one, true, std::nullopt}}});
    v.push_back({"", "Range", {i64({}, {1}), i64({}, {10}), i64({}, {3})}, {{{}, DType::i64}}});
    v.push_back({"", "Range", {f32(0.5), f32(-1.0), f32(-0.25)}});
    v.push_back({"", "CumSum", {t({2, 3, 4}), i64({}, {1})}});
    v.push_back({"", "CumSum", {i64({2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}), i64({}, {-1})}, {{}}, A{{"exclusive", i(1)}, {"reverse", i(1)}}});
    v.push_back({"", "RandomUniformLike", {x({2, 3})}, {{}}, A{{"seed", i(5)}, {"low", f(-2.0)}, {"high", f(3.0)}}});
    v.push_back({"", "RandomUniformLike", {x({4})}, {{}}, A{{"dtype", i(1)}}});
    v.push_back({"", "Reshape", {t({2, 6}), i64({2}, {3, 4})}});
    v.push_back({"", "Flatten", {t({2, 3, 2})}, {{}}, A{{"axis", i(1)}}});
    v.push_back({"", "Squeeze", {t({2, 1, 3}), i64({1}, {1})}});
    v.push_back({"", "Unsqueeze", {t({2, 3}), i64({1}, {0})}});
    v.push_back({"", "Shape", {x({2, 3})}, {{{}, DType::i64}}});
    v.push_back({"", "ConstantOfShape", {i64({2}, {2, 3})}});
    v.push_back({"", "Dropout", {t({2, 6}), f32(0.5), flag(true)}, {{}}, A{{"seed", i(7)}}});
    v.push_back({"memplan", "SwapOut", {x({2, 3})}, {{{2, 3}}}});
    v.push_back({"memplan", "SwapIn", {x({2, 3})}, {{{2, 3}}}});
    // FusedAttention: grouped-query (4 query heads on 2 kv heads), mixed layouts, causal, a float bias
    // broadcast over the heads that trains. Its training graph adds the LSE output and runs FusedAttentionGrad.
    const A attention{{"scale", f(0.5)}, {"causal", i(1)}, {"k_layout", s("bshd")}, {"o_layout", s("bshd")}};
    v.push_back({"memplan", "FusedAttention", {t({1, 4, 3, 4}), t({1, 4, 2, 4}), t({1, 2, 4, 3}), t({1, 1, 3, 4})},
                 {{{1, 3, 4, 3}}}, attention, {"memplan::FusedAttentionGrad"}});
    // With dropout and a constant boolean mask (every row keeps a key): LSE is an output of the example too.
    const std::vector<double> keys{1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1};
    v.push_back({"memplan", "FusedAttention", {t({2, 2, 3, 4}), t({2, 1, 4, 4}), t({2, 1, 4, 2}), {{3, 4}, DType::boolean, Fill::mask, false, keys}},
                 {{{2, 2, 3, 2}}, {{2, 2, 3}}}, A{{"scale", f(0.5)}, {"dropout_ratio", f(0.25)}, {"seed", i(9)}}});
    v.push_back({"memplan", "FusedAttentionGrad", {x({1, 4, 3, 2}), x({1, 4, 3, 4}), x({1, 2, 5, 4}), x({1, 2, 5, 2}),
                  x({1, 4, 3, 2}), xp({1, 4, 3}), x({4, 1, 5})},
                 {{{1, 4, 3, 4}}, {{1, 2, 5, 4}}, {{1, 2, 5, 2}}, {{4, 1, 5}}}, A{{"scale", f(0.5)}, {"dropout_ratio", f(0.5)}, {"seed", i(3)}}});
    // MatMulT: each transpose combination, a broadcast batch, and outputs summed down (its gradients' form).
    const auto mm_t = [&](Dims a, Dims b, Dims y, int ta, int tb) {
      v.push_back({"memplan", "MatMulT", {t(std::move(a)), t(std::move(b))}, {{std::move(y)}}, A{{"trans_a", i(ta)}, {"trans_b", i(tb)}}});
    };
    mm_t({2, 3, 4}, {5, 4}, {2, 3, 5}, 0, 1);
    mm_t({4, 3}, {2, 4, 5}, {2, 3, 5}, 1, 0);
    mm_t({2, 1, 4, 3}, {3, 5, 4}, {2, 3, 3, 5}, 1, 1);
    mm_t({2, 3, 4}, {2, 4, 5}, {2, 3, 5}, 0, 0);
    mm_t({2, 3, 4}, {2, 3, 5}, {4, 5}, 1, 0);
    mm_t({2, 2, 3}, {2, 5, 3}, {1, 2, 5}, 0, 1);
    v.push_back({"memplan", "FusedElementwise", {x({2, 3}), x({2, 3})}, {{{2, 3}}}, A{{"expr", s("in 0;in 1;add 0 1;relu 2")}}});
    // Exact GELU of x + bias, the bias broadcast (its gradient is summed down by ReduceSumTo).
    v.push_back({"memplan", "FusedElementwise", {t({2, 3}), t({3})}, {{{2, 3}}},
                 A{{"expr", s("in 0;in 1;add 0 1;const 1.4142135623730951;div 2 3;erf 4;const 1;add 5 6;const 0.5;mul 2 8;mul 9 7")}},
                 {"memplan::ReduceSumTo"}});
    // Cross-entropy over the class axis: [N, C] with an ignored row (-100), axis 1 of [N, C, H, W] (strided rows)
    // with a negative label, and a language model's [B, S, V] over the last axis. Output 1 is the per-row logsumexp.
    v.push_back({"memplan", "CrossEntropyLoss", {t({3, 5}), i64({3}, {4, -100, 0})}, {{{}}, {{3}}},
                 A{{"axis", i(1)}, {"ignore_index", i(-100)}}, {"memplan::CrossEntropyLossGrad"}});
    v.push_back({"memplan", "CrossEntropyLoss", {t({2, 3, 2, 2}), i64({2, 2, 2}, {0, 2, 1, -1, 2, 2, 0, 1})}, {{{}}, {{2, 2, 2}}},
                 A{{"axis", i(1)}, {"ignore_index", i(-100)}}});
    v.push_back({"memplan", "CrossEntropyLoss", {t({2, 3, 5}), i64({2, 3}, {1, 4, 0, 3, 3, 2})}, {{{}}, {{2, 3}}},
                 A{{"axis", i(2)}, {"ignore_index", i(-100)}}});
    // ONNX's SoftmaxCrossEntropyLoss (forward only): scores [N, C, D], log_prob as a second output.
    v.push_back({"", "SoftmaxCrossEntropyLoss", {x({2, 3, 2}), i64({2, 2}, {0, 2, -100, 1})}, {{}, {}}, A{{"ignore_index", i(-100)}}});
    // The model's own loss summed (--loss none on a non-scalar output).
    v.push_back({"memplan", "SumLoss", {t({2, 3})}, {{{}}}, {}, {"memplan::SumLossGrad"}});
    // LinearCrossEntropy: X [4, 3], W [3, 5] (and [5, 3] read transposed), labels with one ignored, a bias; its
    // gradients come out of the forward (outputs 1-3).
    v.push_back({"memplan", "LinearCrossEntropy", {t({4, 3}), t({3, 5}), i64({4}, {4, -100, 0, 2}), t({5})},
                 {{{}}, {{4, 3}}, {{3, 5}}, {{5}}}, A{{"chunk", i(2)}, {"ignore_index", i(-100)}}});
    v.push_back({"memplan", "LinearCrossEntropy", {t({4, 3}), t({5, 3}), i64({4}, {1, 3, 0, 2})},
                 {{{}}, {{4, 3}}, {{5, 3}}}, A{{"chunk", i(3)}, {"ignore_index", i(-100)}, {"trans_b", i(1)}}});
    // fp16 loss scaling: the unscale of a gradient (a non-finite element sets found_inf), and the scale's update on
    // the step that reaches growth_interval (int32 growth tracker).
    const ExampleInput tracker{{}, DType::i32, Fill::distinct, false, std::vector<double>{1999}};
    v.push_back({"memplan", "AmpUnscale", {x({2, 3}), f32(4.0), f32(0.0)}, {{{2, 3}}, {{}}}, A{{"reset", i(0)}}});
    v.push_back({"memplan", "AmpUpdateScale", {f32(1024.0), tracker, f32(0.0)}, {{{}}, {{}, DType::i32}},
                 A{{"growth_factor", f(2.0)}, {"backoff_factor", f(0.5)}, {"growth_interval", i(2000)}}});
    // Activations evaluated through their fused expressions (kinks kept off the value grid), variadic ops of three
    // inputs, the remaining ReduceX gradients and Tile's, and the random draws (issue 16).
    for (const char* u : {"Softsign"}) v.push_back(unary(u));
    v.push_back(unary("ThresholdedRelu", {{"alpha", f(0.4)}}));
    v.push_back(unary("Shrink", {{"lambd", f(0.4)}, {"bias", f(0.1)}}));
    v.push_back(unary("Elu", {{"alpha", f(0.7)}}));
    v.push_back(unary("Celu", {{"alpha", f(1.5)}}));
    v.push_back(unary("HardSigmoid", {{"alpha", f(0.6)}, {"beta", f(0.4)}}));
    v.push_back({"", "PRelu", {t({2, 3, 2}), t({3, 1})}});
    v.push_back({"", "Max", {t({2, 3}), t({3}), t({2, 1})}});
    v.push_back({"", "Min", {t({2, 3}), t({3}), t({2, 1})}});
    v.push_back({"", "Mean", {t({2, 3}), t({3}), t({2, 1})}});
    v.push_back({"", "Sum", {t({2, 3}), t({1, 3})}});
    v.push_back({"", "Tile", {t({2, 3}), i64({2}, {2, 3})}});
    v.push_back({"", "CumSum", {t({2, 3, 4}), i64({}, {-1})}, {{}}, A{{"exclusive", i(1)}, {"reverse", i(1)}}});
    for (const char* r : {"ReduceMax", "ReduceMin", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSumExp"}) {
      v.push_back({"", r, {t({2, 3, 4})}, {{}}, A{{"axes", is({1})}, {"keepdims", i(0)}}});
      v.push_back({"", r, {t({2, 3, 4})}, {{}}, A{{"axes", is({0, 2})}, {"keepdims", i(1)}}});
    }
    v.push_back({"", "Trilu", {t({3, 4}), i64({}, {1})}, {{}}, A{{"upper", i(0)}}});
    v.push_back({"", "CastLike", {t({2, 3}), x({1})}});
    v.push_back({"", "RandomNormalLike", {x({3, 4})}, {{}}, A{{"seed", i(3)}, {"mean", f(1.0)}, {"scale", f(2.0)}}});
    v.push_back({"", "RandomNormal", {}, {{}}, A{{"shape", is({2, 5})}, {"seed", i(4)}}});
    v.push_back({"", "RandomUniform", {}, {{}}, A{{"shape", is({4})}, {"low", f(-1.0)}, {"high", f(1.0)}, {"dtype", i(11)}}});
    const ExampleInput probs{{2, 3}, DType::f32, Fill::distinct, false, std::vector<double>{0.1, 0.5, 0.9, 0.0, 1.0, 0.3}};
    v.push_back({"", "Bernoulli", {probs}, {{}}, A{{"seed", i(2)}}});
    v.push_back({"", "Bernoulli", {probs}, {{{}, DType::boolean}}, A{{"dtype", i(9)}}});
    // ONNX ops of the backend suites (runtime_allocator/kernels/kernels_onnx_legacy.cpp): LRN forward only;
    // InstanceNormalization (PyTorch's GroupNorm export) and GroupNormalization (scale per channel as opset 21, per group
    // as opset 18) train through GroupNormGrad.
    v.push_back({"", "LRN", {x({2, 5, 2, 2})}, {{}}, A{{"size", i(3)}, {"alpha", f(1e-3)}, {"beta", f(0.75)}, {"bias", f(1.0)}}});
    v.push_back({"", "InstanceNormalization", {t({2, 3, 2, 2}), t({3}), t({3})}, {{}}, A{{"epsilon", f(1e-5)}}, {"memplan::GroupNormGrad"}});
    v.push_back({"", "GroupNormalization", {t({2, 6, 2, 3}), t({6}), t({6})}, {{}}, A{{"num_groups", i(3)}, {"epsilon", f(1e-5)}}});
    v.push_back({"", "GroupNormalization", {t({2, 4, 5}), t({2}), t({2})}, {{}}, A{{"num_groups", i(2)}}});
    return v;
  }();
  return all;
}

}  // namespace memplan::runtime::testing
