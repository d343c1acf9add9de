// Hand-written CUDA kernels of the training ops: norm and softmax gradients, the MSE loss, optimizer steps with
// several outputs, max pooling with indices and its gradient. Semantics follow the CPU kernels
// (runtime_allocator/kernels_grad_*.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime_allocator/cuda/kernels.hpp"

namespace memplan::runtime::cuda {

// LayerNormGrad over rows [rows, n]: dx (may be null) per row; dscale and dbias (either may be null) are column sums
// of dy * xhat and dy over the rows.
void layer_norm_grad(const float* dy, const float* x, const float* scale, const float* mean, const float* inv, float* dx,
                     float* dscale, float* dbias, std::int64_t rows, std::int64_t n, cudaStream_t stream);

// SoftmaxGrad (dx = y * (dy - sum dy*y)) or LogSoftmaxGrad (dx = dy - exp(y) * sum dy) over the middle axis of
// [outer, n, inner]. dx may alias dy or y.
void softmax_grad(const float* dy, const float* y, float* dx, std::int64_t outer, std::int64_t n, std::int64_t inner,
                  bool log_softmax, cudaStream_t stream);

// loss[0] = mean over n of (y - t)^2.
void mse_loss(const float* y, const float* t, float* loss, std::int64_t n, cudaStream_t stream);

struct AdamHyper {
  float lr = 0.001f, beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;
  float weight_decay = 0.0f;
  bool decoupled = false;  // AdamW: w *= 1 - lr * weight_decay; else weight_decay * w is added to the gradient
};
// Adam (torch.optim.Adam / AdamW) with bias correction at the step count *step (device scalar); the outputs may
// alias w, m, v (every element is read before it is written). found_inf (device scalar, may be null): when non-zero
// the step is skipped, each output keeping its input's value (fp16 loss scaling, GradScaler.step).
void adam_update(const float* w, const float* g, const float* m, const float* v, const float* step, float* w_out, float* m_out,
                 float* v_out, const float* found_inf, std::int64_t n, const AdamHyper& h, cudaStream_t stream);
// Momentum SGD (torch.optim.SGD, dampening 0): v' = momentum * v + (g + weight_decay * w), w' = w - lr * v'; the
// outputs may alias w and v; skipped as adam_update's when *found_inf is non-zero.
void momentum_update(const float* w, const float* g, const float* v, float* w_out, float* v_out, const float* found_inf,
                     std::int64_t n, float lr, float momentum, float weight_decay, cudaStream_t stream);

// fp16 loss scaling (torch.amp.GradScaler). AmpUnscale: out = g * (1 / *scale) (the reciprocal in double, rounded to
// float, as GradScaler's inv_scale) and *found_inf = 1 where an element of g is not finite (left alone otherwise: the
// caller initialises it); out may alias g.
void amp_unscale(const float* g, const float* scale, float* out, float* found_inf, std::int64_t n, cudaStream_t stream);
// AmpUpdateScale (torch._amp_update_scale_): on *found_inf, scale * backoff and tracker 0; else tracker + 1, and at
// growth_interval scale * growth (kept when not finite) and tracker 0. One thread; the outputs may alias the inputs.
void amp_update_scale(const float* scale, const std::int32_t* tracker, const float* found_inf, float* scale_out,
                      std::int32_t* tracker_out, float growth, float backoff, std::int32_t growth_interval, cudaStream_t stream);

// A 2-D pooling window over x [nc, h, w] -> y [nc, oh, ow] (1-D pools have h = oh = kh = 1).
struct PoolGeometry {  // d = od = 1 below 3 spatial axes
  std::int64_t nc = 1, h = 1, w = 1, oh = 1, ow = 1, d = 1, od = 1;
  int kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1, ph = 0, pw = 0, kd = 1, sd = 1, dd = 1, pd = 0;
};
// MaxPool writing y and the flat index into x of each maximum (the first one in window order); indices may be null. x
// and y hold `storage` elements.
void max_pool_with_indices(const void* x, void* y, std::int64_t* indices, FloatStorage storage, const PoolGeometry& p,
                           cudaStream_t stream);
// dx = 0, then dx[indices[o]] += dy[o] for every output element o (indices outside dx are skipped).
void max_pool_grad(const float* dy, const std::int64_t* indices, float* dx, std::int64_t outputs, std::int64_t inputs,
                   cudaStream_t stream);

}  // namespace memplan::runtime::cuda
