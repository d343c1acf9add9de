// CPU kernels of memplan's elementwise gradients, the MSE loss and the optimizer updates (docs/backward-ops.md).
#include <cmath>
#include <limits>

#include "runtime_allocator/kernels/cpu_kernels.hpp"

namespace memplan::runtime::cpu {
namespace {

constexpr float kPi = 3.14159265358979323846f;

// out[0][i] = f(v) where v[k] is input k (k < n) broadcast to out[0]'s shape; absent inputs read `absent`.
template <std::size_t kN, class F>
void map_grad(const Op& op, const Refs& in, const Refs& out, F f, float absent = 0.0f) {
  std::vector<const std::vector<std::int64_t>*> shapes;
  const std::vector<std::int64_t> scalar;
  std::array<const float*, kN> p{};
  for (std::size_t k = 0; k < kN; ++k) {
    const bool has = k < in.size() && in[k].data;
    if (has && in[k].dtype != DType::f32 && in[k].dtype != DType::boolean) unsupported(op, "float32 operands only");
    p[k] = has && in[k].dtype == DType::f32 ? in[k].as<float>() : nullptr;
    shapes.push_back(has ? &in[k].shape : &scalar);
  }
  float* y = out[0].as<float>();
  std::array<float, kN> v{};
  broadcast_loop(out[0].shape, shapes, [&](std::int64_t i, const Offsets& o) {
    for (std::size_t k = 0; k < kN; ++k)
      v[k] = p[k] ? p[k][o[k]] : (k < in.size() && in[k].data ? static_cast<float>(in[k].as<bool>()[o[k]]) : absent);
    y[i] = f(v);
  });
}

#define MEMPLAN_GRAD(NAME, N, EXPR)                                                          \
  void NAME(const Op& op, const Refs& in, const Refs& out) {                                 \
    map_grad<N>(op, in, out, [&](const std::array<float, N>& v) -> float { return EXPR; }); \
  }
MEMPLAN_GRAD(k_relu_grad, 2, v[1] > 0.0f ? v[0] : 0.0f)
MEMPLAN_GRAD(k_leaky_relu_grad, 2, v[1] > 0.0f ? v[0] : static_cast<float>(op.attr_float("alpha", 0.01)) * v[0])
MEMPLAN_GRAD(k_sigmoid_grad, 2, v[0] * v[1] * (1.0f - v[1]))
MEMPLAN_GRAD(k_tanh_grad, 2, v[0] * (1.0f - v[1] * v[1]))
MEMPLAN_GRAD(k_sqrt_grad, 2, v[0] / (2.0f * v[1]))
MEMPLAN_GRAD(k_erf_grad, 2, v[0] * (2.0f / std::sqrt(kPi)) * std::exp(-v[1] * v[1]))
MEMPLAN_GRAD(k_div_grad_b, 3, -v[0] * v[1] / (v[2] * v[2]))
MEMPLAN_GRAD(k_pow_grad_base, 3, v[0] * v[2] * std::pow(v[1], v[2] - 1.0f))
MEMPLAN_GRAD(k_pow_grad_exponent, 3, v[1] == 0.0f ? 0.0f : v[0] * v[2] * std::log(v[1]))
MEMPLAN_GRAD(k_grad_accumulate, 2, v[0] + v[1])  // acc += dW, in place over the accumulator
#undef MEMPLAN_GRAD

void k_clip_grad(const Op& op, const Refs& in, const Refs& out) {
  const float lo = scalar_value(op, in, 2, static_cast<float>(op.attr_float("min", -std::numeric_limits<float>::infinity())));
  const float hi = scalar_value(op, in, 3, static_cast<float>(op.attr_float("max", std::numeric_limits<float>::infinity())));
  map_grad<2>(op, in, out, [&](const std::array<float, 2>& v) { return lo <= v[1] && v[1] <= hi ? v[0] : 0.0f; });
}

void k_gelu_grad(const Op& op, const Refs& in, const Refs& out) {
  const bool tanh_form = op.attr_string("approximate", "none") == "tanh";
  map_grad<2>(op, in, out, [&](const std::array<float, 2>& v) {
    const float x = v[1];
    if (!tanh_form) return v[0] * (0.5f * (1.0f + std::erf(x / std::sqrt(2.0f))) + x * std::exp(-0.5f * x * x) / std::sqrt(2.0f * kPi));
    const float c = std::sqrt(2.0f / kPi), u = c * (x + 0.044715f * x * x * x), t = std::tanh(u);
    return v[0] * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * c * (1.0f + 3.0f * 0.044715f * x * x));
  });
}

void k_dropout_grad(const Op& op, const Refs& in, const Refs& out) {
  const float ratio = scalar_value(op, in, 2, 0.5f);
  // Dropped elements give 0 without dividing (ratio 1 drops all); kept ones dY / (1 - ratio), as the forward.
  map_grad<2>(op, in, out, [&](const std::array<float, 2>& v) { return v[1] != 0.0f ? v[0] / (1.0f - ratio) : 0.0f; });
}

void k_where_grad(const Op& op, const Refs& in, const Refs& out) {
  const bool select = op.attr_int("select", 1) != 0;
  map_grad<2>(op, in, out, [&](const std::array<float, 2>& v) { return (v[1] != 0.0f) == select ? v[0] : 0.0f; });
}

void k_mse_loss(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& y = required(op, in, 0);
  const TensorRef& t = required(op, in, 1);
  float sum = 0.0f;
  for (std::int64_t i = 0; i < y.elements(); ++i) sum += (y.as<float>()[i] - t.as<float>()[i]) * (y.as<float>()[i] - t.as<float>()[i]);
  *out[0].as<float>() = sum / static_cast<float>(y.elements());
}

// dloss (input 2, absent: 1) is the loss gradient seed: the loss scale under fp16 loss scaling.
void k_mse_loss_grad(const Op& op, const Refs& in, const Refs& out) {
  const float n = static_cast<float>(required(op, in, 0).elements());
  const float dloss = scalar_value(op, in, 2, 1.0f);
  map_grad<2>(op, in, out, [&](const std::array<float, 2>& v) { return 2.0f * (v[0] - v[1]) / n * dloss; });
}

float attr(const Op& op, const char* key, double fallback) { return static_cast<float>(op.attr_float(key, fallback)); }

// The optimizer updates follow torch.optim exactly (docs/training-recipes.md): weight_decay is L2 added to the
// gradient, but for AdamUpdate with `decoupled` (AdamW), which scales the weight by 1 - lr * weight_decay
// first. Every element is read before it is written: the outputs rewrite W and the state in place.
// Under fp16 loss scaling the last input is found_inf: when it is set the step is skipped (GradScaler.step), each
// output keeping the value of the input it rewrites.
bool skipped(const Op& op, const Refs& in, std::size_t found_inf) { return scalar_value(op, in, found_inf, 0.0f) != 0.0f; }

void keep(const TensorRef& from, const TensorRef& to) { copy_if_moved(to.data, from.data, to.bytes); }

void k_sgd(const Op& op, const Refs& in, const Refs& out) {
  if (skipped(op, in, 2)) return keep(required(op, in, 0), out[0]);
  const float lr = attr(op, "lr", 0.01), wd = attr(op, "weight_decay", 0.0);
  map_grad<2>(op, in, out, [&](const std::array<float, 2>& v) { return v[0] - lr * (v[1] + wd * v[0]); });
}

void k_momentum(const Op& op, const Refs& in, const Refs& out) {
  if (skipped(op, in, 3)) return keep(required(op, in, 0), out[0]), keep(required(op, in, 2), out[1]);
  const float lr = attr(op, "lr", 0.01), m = attr(op, "momentum", 0.9), wd = attr(op, "weight_decay", 0.0);
  const float* w = required(op, in, 0).as<float>();
  const float* g = required(op, in, 1).as<float>();
  const float* v = required(op, in, 2).as<float>();
  for (std::int64_t i = 0; i < out[0].elements(); ++i) {
    // The buffer starts at zero, so the first step's m * 0 + g is PyTorch's clone(g).
    const float nv = m * v[i] + (g[i] + wd * w[i]);
    out[0].as<float>()[i] = w[i] - lr * nv;
    out[1].as<float>()[i] = nv;
  }
}

void k_adam_step(const Op& op, const Refs& in, const Refs& out) {
  *out[0].as<float>() = *required(op, in, 0).as<float>() + (skipped(op, in, 1) ? 0.0f : 1.0f);
}

void k_adam(const Op& op, const Refs& in, const Refs& out) {
  if (skipped(op, in, 5))
    return keep(required(op, in, 0), out[0]), keep(required(op, in, 2), out[1]), keep(required(op, in, 3), out[2]);
  const float lr = attr(op, "lr", 0.001), b1 = attr(op, "beta1", 0.9), b2 = attr(op, "beta2", 0.999), eps = attr(op, "epsilon", 1e-8);
  const float wd = attr(op, "weight_decay", 0.0);
  const bool decoupled = op.attr_int("decoupled", 0) != 0;
  const float* w = required(op, in, 0).as<float>();
  const float* g = required(op, in, 1).as<float>();
  const float* m = required(op, in, 2).as<float>();
  const float* v = required(op, in, 3).as<float>();
  const float step = *required(op, in, 4).as<float>();
  const float step_size = lr / (1.0f - std::pow(b1, step)), c2_sqrt = std::sqrt(1.0f - std::pow(b2, step));
  for (std::int64_t i = 0; i < out[0].elements(); ++i) {
    const float wi = decoupled ? w[i] * (1.0f - lr * wd) : w[i];
    const float gi = decoupled ? g[i] : g[i] + wd * w[i];
    const float nm = m[i] + (1.0f - b1) * (gi - m[i]), nv = b2 * v[i] + (1.0f - b2) * gi * gi;  // lerp, mul + addcmul
    out[0].as<float>()[i] = wi - step_size * nm / (std::sqrt(nv) / c2_sqrt + eps);
    out[1].as<float>()[i] = nm;
    out[2].as<float>()[i] = nv;
  }
}

}  // namespace

void add_gradient_elementwise_kernels(KernelTable& t) {
  for (auto [name, fn] : std::initializer_list<std::pair<const char*, KernelFn>>{
           {"ReluGrad", k_relu_grad}, {"LeakyReluGrad", k_leaky_relu_grad}, {"ClipGrad", k_clip_grad},
           {"SigmoidGrad", k_sigmoid_grad}, {"TanhGrad", k_tanh_grad}, {"SqrtGrad", k_sqrt_grad},
           {"ErfGrad", k_erf_grad}, {"GeluGrad", k_gelu_grad}, {"DropoutGrad", k_dropout_grad},
           {"DivGradB", k_div_grad_b}, {"PowGradBase", k_pow_grad_base}, {"PowGradExponent", k_pow_grad_exponent},
           {"WhereGrad", k_where_grad}, {"MSELossGrad", k_mse_loss_grad}, {"SGDUpdate", k_sgd},
           {"MomentumUpdate", k_momentum}, {"AdamUpdate", k_adam}, {"GradAccumulate", k_grad_accumulate}})
    t[std::string("memplan::") + name] = {fn, true, {kF32 | kBool}};  // float32 operands, bool masks
  t["memplan::MSELoss"] = {k_mse_loss, false};
  t["memplan::AdamStep"] = {k_adam_step, true};
}

}  // namespace memplan::runtime::cpu
