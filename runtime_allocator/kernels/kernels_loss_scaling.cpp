// CPU kernels of fp16 dynamic loss scaling (torch.amp.GradScaler): the in-place unscale of a weight gradient with its
// non-finite check (torch._amp_foreach_non_finite_check_and_unscale_) and the scale update (torch._amp_update_scale_).
#include <cmath>
#include <cstdint>

#include "runtime_allocator/kernels/cpu_kernels.hpp"

namespace memplan::runtime::cpu {
namespace {

float float_scalar(const Op& op, const Refs& in, std::size_t i) {
  const TensorRef& t = required(op, in, i);
  if (t.dtype != DType::f32 || t.elements() != 1) unsupported(op, "input " + std::to_string(i) + " must be a float32 scalar");
  return *t.as<float>();
}

// AmpUnscale(grad, scale, found_inf) -> (grad * (1 / scale), found_inf'): found_inf' = 1 when an element of grad is not
// finite, else found_inf (0 with `reset`, the step's first unscale). The reciprocal is taken in double and rounded to
// float, as GradScaler's inv_scale = scale.double().reciprocal().float().
void k_amp_unscale(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& g = required(op, in, 0);
  if (g.dtype != DType::f32 || out[0].dtype != DType::f32) unsupported(op, "float32 gradients only");
  const float inv = static_cast<float>(1.0 / static_cast<double>(float_scalar(op, in, 1)));
  float found = op.attr_int("reset", 0) != 0 ? 0.0f : float_scalar(op, in, 2);
  const float* x = g.as<float>();
  float* y = out[0].as<float>();
  for (std::int64_t i = 0; i < g.elements(); ++i) {
    if (!std::isfinite(x[i])) found = 1.0f;
    y[i] = x[i] * inv;
  }
  *out[1].as<float>() = found;
}

// AmpUpdateScale(scale, growth_tracker, found_inf) -> (scale', growth_tracker'), PyTorch's _amp_update_scale_: on
// found_inf the scale is multiplied by backoff_factor and the tracker reset; else the tracker counts the clean step and
// at growth_interval the scale is multiplied by growth_factor (kept when that is not finite) and the tracker reset.
void k_amp_update_scale(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& tracker = required(op, in, 1);
  if (tracker.dtype != DType::i32 || out[1].dtype != DType::i32) unsupported(op, "an int32 growth tracker expected");
  float scale = float_scalar(op, in, 0);
  std::int32_t clean = *tracker.as<std::int32_t>();
  if (float_scalar(op, in, 2) != 0.0f) {
    scale *= static_cast<float>(op.attr_float("backoff_factor", 0.5));
    clean = 0;
  } else if (++clean == static_cast<std::int32_t>(op.attr_int("growth_interval", 2000))) {
    const float grown = scale * static_cast<float>(op.attr_float("growth_factor", 2.0));
    if (std::isfinite(grown)) scale = grown;
    clean = 0;
  }
  *out[0].as<float>() = scale;
  *out[1].as<std::int32_t>() = clean;
}

}  // namespace

void add_loss_scaling_kernels(KernelTable& t) {
  t["memplan::AmpUnscale"] = {k_amp_unscale, true};
  t["memplan::AmpUpdateScale"] = {k_amp_update_scale, true, {kAnyDType}};
}

}  // namespace memplan::runtime::cpu
