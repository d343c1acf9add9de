// Backward rules of elementwise ops: activations, arithmetic with broadcasting, masks, casts, Dropout.
#include <initializer_list>
#include <utility>

#include "analysis/autodiff.hpp"

namespace memplan::analysis::autodiff {
namespace {

// A memplan op Type(dY, saved...) whose one output is input 0's gradient.
void unary(GradContext& c, const char* type, std::vector<TensorId> saved, std::map<std::string, Attribute> attrs = {}) {
  TensorId g = c.grad_tensor(0);
  saved.insert(saved.begin(), c.dy());
  c.emit(type, "memplan", std::move(saved), {g}, std::move(attrs));
  c.give(0, g);
}

void relu(GradContext& c) { unary(c, "ReluGrad", {c.out(0)}); }
void sigmoid(GradContext& c) { unary(c, "SigmoidGrad", {c.out(0)}); }
void tanh_(GradContext& c) { unary(c, "TanhGrad", {c.out(0)}); }
void sqrt_(GradContext& c) { unary(c, "SqrtGrad", {c.out(0)}); }
void erf(GradContext& c) { unary(c, "ErfGrad", {c.in(0)}); }
void gelu(GradContext& c) {
  unary(c, "GeluGrad", {c.in(0)}, {{"approximate", attr_s(c.fwd().attr_string("approximate", "none"))}});
}
void leaky_relu(GradContext& c) {
  unary(c, "LeakyReluGrad", {c.in(0)}, {{"alpha", attr_f(c.fwd().attr_float("alpha", 0.01))}});
}
void clip(GradContext& c) {
  std::map<std::string, Attribute> attrs;  // opset < 11 keeps the bounds as attributes
  for (const char* k : {"min", "max"})
    if (const Attribute* a = c.fwd().attr(k)) attrs[k] = *a;
  unary(c, "ClipGrad", {c.in(0), c.in(1), c.in(2)}, std::move(attrs));
}

// Exact with plain ONNX ops.
void plain(GradContext& c, const char* type, std::vector<TensorId> inputs, std::map<std::string, Attribute> attrs = {}) {
  TensorId g = c.grad_tensor(0);
  c.emit(type, "", std::move(inputs), {g}, std::move(attrs));
  c.give(0, g);
}
void neg(GradContext& c) { plain(c, "Neg", {c.dy()}); }
void exp_(GradContext& c) { plain(c, "Mul", {c.dy(), c.out(0)}); }
void log_(GradContext& c) { plain(c, "Div", {c.dy(), c.in(0)}); }
void cast(GradContext& c) { plain(c, "Cast", {c.dy()}, {{"to", attr_i(static_cast<std::int64_t>(c.tensor(c.in(0)).dtype))}}); }
void identity(GradContext& c) { c.give(0, c.dy()); }

// A chain of plain ONNX ops whose last output is input 0's gradient: steps[k] = (type, second operand) applied to
// the previous value (dY first); a kNoTensor operand makes the step unary. Intermediates are activations.
void chain(GradContext& c, std::initializer_list<std::pair<const char*, TensorId>> steps) {
  const Tensor& x = c.tensor(c.in(0));
  const DType dtype = x.dtype;
  const Shape shape = x.shape();
  TensorId v = c.dy();
  std::size_t k = 0;
  for (const auto& [type, operand] : steps) {
    const bool last = ++k == steps.size();
    const TensorId y = last ? c.grad_tensor(0) : c.temp(std::string("grad_") + type, dtype, shape);
    c.emit(type, "", operand == kNoTensor ? std::vector<TensorId>{v} : std::vector<TensorId>{v, operand}, {y});
    v = y;
  }
  c.give(0, v);
}
// d(1/x) = -dY * y * y, from the saved output (RMSNorm's 1/sqrt(mean(x^2) + eps) in Llama-style exports).
void reciprocal(GradContext& c) { chain(c, {{"Mul", c.out(0)}, {"Mul", c.out(0)}, {"Neg", kNoTensor}}); }
// d sin(x) = dY * cos(x); d cos(x) = -dY * sin(x): the cosine or sine is rebuilt from the saved input.
void sin_(GradContext& c) {
  const TensorId cx = c.temp("cos", c.tensor(c.in(0)).dtype, c.shape(c.in(0)));
  c.emit("Cos", "", {c.in(0)}, {cx});
  chain(c, {{"Mul", cx}});
}
void cos_(GradContext& c) {
  const TensorId sx = c.temp("sin", c.tensor(c.in(0)).dtype, c.shape(c.in(0)));
  c.emit("Sin", "", {c.in(0)}, {sx});
  chain(c, {{"Mul", sx}, {"Neg", kNoTensor}});
}

void dropout(GradContext& c) {
  if (c.out(1) == kNoTensor) return c.give(0, c.dy());  // inference mode: Dropout is the identity
  unary(c, "DropoutGrad", {c.out(1), c.in(1)});
}

// Add, Sub, Sum: the gradient passes through, summed over broadcast axes (times -1 for Sub's B).
void add(GradContext& c) {
  for (std::size_t i = 0; i < c.fwd().inputs.size(); ++i)
    if (c.wants(i)) c.give_reduced(i, c.dy(), c.fwd().type == "Sub" && i == 1 ? -1.0 : 1.0);
}

// An op computing input i's gradient at the broadcast output shape, then summed down to input i's shape.
void broadcast_grad(GradContext& c, std::size_t i, const char* type, const char* domain, std::vector<TensorId> inputs,
                    std::map<std::string, Attribute> attrs = {}) {
  TensorId full = c.full_or_grad(i, c.shape(c.out(0)));
  c.emit(type, domain, std::move(inputs), {full}, std::move(attrs));
  c.give_reduced(i, full);
}

void mul(GradContext& c) {
  if (c.wants(0)) broadcast_grad(c, 0, "Mul", "", {c.dy(), c.in(1)});
  if (c.wants(1)) broadcast_grad(c, 1, "Mul", "", {c.dy(), c.in(0)});
}
void div(GradContext& c) {
  if (c.wants(0)) broadcast_grad(c, 0, "Div", "", {c.dy(), c.in(1)});
  if (c.wants(1)) broadcast_grad(c, 1, "DivGradB", "memplan", {c.dy(), c.in(0), c.in(1)});
}
void pow_(GradContext& c) {
  if (c.wants(0)) broadcast_grad(c, 0, "PowGradBase", "memplan", {c.dy(), c.in(0), c.in(1)});
  if (c.wants(1)) broadcast_grad(c, 1, "PowGradExponent", "memplan", {c.dy(), c.in(0), c.out(0)});
}
void where(GradContext& c) {
  if (c.wants(1)) broadcast_grad(c, 1, "WhereGrad", "memplan", {c.dy(), c.in(0)}, {{"select", attr_i(1)}});
  if (c.wants(2)) broadcast_grad(c, 2, "WhereGrad", "memplan", {c.dy(), c.in(0)}, {{"select", attr_i(0)}});
}
void expand(GradContext& c) { c.give_reduced(0, c.dy()); }

}  // namespace

void add_elementwise_grads(GradTable& t) {
  t["Relu"] = {relu, 1u, 1u};
  t["Sigmoid"] = {sigmoid, 1u, 1u};
  t["Tanh"] = {tanh_, 1u, 1u};
  t["Sqrt"] = {sqrt_, 1u, 1u};
  t["Erf"] = {erf, 1u, 1u};
  t["Gelu"] = {gelu, 1u, 1u};
  t["LeakyRelu"] = {leaky_relu, 1u, 1u};
  t["Clip"] = {clip, 1u, 1u};
  t["Neg"] = {neg, 1u, 1u};
  t["Exp"] = {exp_, 1u, 1u};
  t["Log"] = {log_, 1u, 1u};
  t["Cast"] = {cast, 1u, 1u};
  t["Identity"] = {identity, 1u, 1u};
  t["Reciprocal"] = {reciprocal, 1u, 1u};
  t["Sin"] = {sin_, 1u, 1u};
  t["Cos"] = {cos_, 1u, 1u};
  t["Dropout"] = {dropout, 1u, 1u};
  t["Add"] = {add, 3u, 1u};
  t["Sub"] = {add, 3u, 1u};
  t["Sum"] = {add, kAll, 1u};
  t["Mul"] = {mul, 3u, 1u};
  t["Div"] = {div, 3u, 1u};
  t["Pow"] = {pow_, 3u, 1u};
  t["Where"] = {where, 6u, 1u};
  t["Expand"] = {expand, 1u, 1u};
}

}  // namespace memplan::analysis::autodiff
