// Hand-written CUDA kernels of the training ops (see kernels_training.hpp).
#include <algorithm>

#include "runtime_allocator/cuda/block_reduce.cuh"
#include "runtime_allocator/cuda/cuda_context.hpp"
#include "runtime_allocator/cuda/half_io.cuh"
#include "runtime_allocator/cuda/kernels_training.hpp"

namespace memplan::runtime::cuda {

namespace {

__global__ void layer_norm_dx_kernel(const float* dy, const float* x, const float* scale, const float* mean, const float* inv,
                                     float* dx, std::int64_t n) {
  const std::int64_t r = blockIdx.x;
  const float* xr = x + r * n;
  const float* gr = dy + r * n;
  const float m = mean[r], iv = inv[r];
  float mg = 0.0f, mgx = 0.0f;
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float gs = gr[j] * scale[j];
    mg += gs;
    mgx += gs * (xr[j] - m) * iv;
  }
  mg = block_reduce<false>(mg) / static_cast<float>(n);
  mgx = block_reduce<false>(mgx) / static_cast<float>(n);
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x)
    dx[r * n + j] = iv * (gr[j] * scale[j] - mg - (xr[j] - m) * iv * mgx);
}

// Column sums over a chunk of rows: block (32 columns, 8 row lanes), one atomic add per column and block.
constexpr int kCols = 32, kRowLanes = 8, kRowsPerBlock = 256;

__global__ void layer_norm_params_kernel(const float* dy, const float* x, const float* mean, const float* inv, float* dscale,
                                         float* dbias, std::int64_t rows, std::int64_t n) {
  __shared__ float ps[kRowLanes][kCols], pb[kRowLanes][kCols];
  const std::int64_t j = blockIdx.x * static_cast<std::int64_t>(kCols) + threadIdx.x;
  const std::int64_t r0 = blockIdx.y * static_cast<std::int64_t>(kRowsPerBlock);
  const std::int64_t r1 = r0 + kRowsPerBlock < rows ? r0 + kRowsPerBlock : rows;
  float s = 0.0f, b = 0.0f;
  if (j < n)
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) {
      const float g = dy[r * n + j];
      s += g * (x[r * n + j] - mean[r]) * inv[r];
      b += g;
    }
  ps[threadIdx.y][threadIdx.x] = s;
  pb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y != 0 || j >= n) return;
  for (int k = 1; k < kRowLanes; ++k) {
    s += ps[k][threadIdx.x];
    b += pb[k][threadIdx.x];
  }
  if (dscale) atomicAdd(dscale + j, s);
  if (dbias) atomicAdd(dbias + j, b);
}

__global__ void softmax_grad_kernel(const float* dy, const float* y, float* dx, std::int64_t n, std::int64_t inner,
                                    bool log_softmax) {
  const std::int64_t row = blockIdx.x;
  const std::int64_t base = (row / inner) * n * inner + row % inner;
  float s = 0.0f;
  for (std::int64_t k = threadIdx.x; k < n; k += blockDim.x) {
    const std::int64_t e = base + k * inner;
    s += log_softmax ? dy[e] : dy[e] * y[e];
  }
  s = block_reduce<false>(s);  // its barriers: all reads for s precede any write of dx (dx may alias dy, y)
  for (std::int64_t k = threadIdx.x; k < n; k += blockDim.x) {
    const std::int64_t e = base + k * inner;
    const float g = dy[e], p = y[e];
    dx[e] = log_softmax ? g - expf(p) * s : p * (g - s);
  }
}

// The mean of (y - t)^2 in two deterministic passes: kMseBlocks partial sums (grid-stride, a fixed
// assignment of elements to threads), then one block sums them in a fixed order. The partials live in this
// module's device memory (4 KiB, never in a plan): one loss at a time per process, which a training step is.
constexpr int kMseBlocks = 1024;
__device__ float g_mse_partials[kMseBlocks];

__global__ void mse_partial_kernel(const float* y, const float* t, std::int64_t n) {
  float s = 0.0f;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float d = y[i] - t[i];
    s += d * d;
  }
  s = block_reduce<false>(s);
  if (threadIdx.x == 0) g_mse_partials[blockIdx.x] = s;
}

__global__ void mse_final_kernel(float* loss, int blocks, std::int64_t n) {
  float s = 0.0f;
  for (int i = threadIdx.x; i < blocks; i += blockDim.x) s += g_mse_partials[i];
  s = block_reduce<false>(s);
  if (threadIdx.x == 0) *loss = s / static_cast<float>(n);
}

__global__ void adam_kernel(const float* w, const float* g, const float* m, const float* v, const float* step, float* w_out,
                            float* m_out, float* v_out, const float* found_inf, std::int64_t n, AdamHyper h) {
  if (found_inf && *found_inf != 0.0f) {  // skipped: each output keeps its input's value
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
      w_out[i] = w[i];
      m_out[i] = m[i];
      v_out[i] = v[i];
    }
    return;
  }
  const float t = *step;
  const float step_size = h.lr / (1.0f - powf(h.beta1, t)), c2_sqrt = sqrtf(1.0f - powf(h.beta2, t));
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float wi = h.decoupled ? w[i] * (1.0f - h.lr * h.weight_decay) : w[i];
    const float gi = h.decoupled ? g[i] : g[i] + h.weight_decay * w[i];
    const float mi = m[i];
    const float nm = mi + (1.0f - h.beta1) * (gi - mi), nv = h.beta2 * v[i] + (1.0f - h.beta2) * gi * gi;
    w_out[i] = wi - step_size * nm / (sqrtf(nv) / c2_sqrt + h.epsilon);
    m_out[i] = nm;
    v_out[i] = nv;
  }
}

__global__ void momentum_kernel(const float* w, const float* g, const float* v, float* w_out, float* v_out, const float* found_inf,
                                std::int64_t n, float lr, float momentum, float weight_decay) {
  const bool skip = found_inf && *found_inf != 0.0f;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    if (skip) {  // each output keeps its input's value
      w_out[i] = w[i];
      v_out[i] = v[i];
      continue;
    }
    const float nv = momentum * v[i] + (g[i] + weight_decay * w[i]);
    w_out[i] = w[i] - lr * nv;
    v_out[i] = nv;
  }
}

// T: the storage of x and y (float, __nv_bfloat16, __half), compared as float32 (exact: widening keeps the order).
template <typename T>
__global__ void max_pool_kernel(const T* x, T* y, std::int64_t* indices, PoolGeometry p) {
  const std::int64_t total = p.nc * p.od * p.oh * p.ow;
  for (std::int64_t o = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; o < total;
       o += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t ow = o % p.ow, oh = (o / p.ow) % p.oh, od = (o / (p.ow * p.oh)) % p.od, nc = o / (p.ow * p.oh * p.od);
    float acc = -FLT_MAX;
    std::int64_t arg = 0;
    bool any = false;
    for (int a = 0; a < p.kd; ++a)
      for (int r = 0; r < p.kh; ++r)
        for (int s = 0; s < p.kw; ++s) {
          const std::int64_t id = od * p.sd - p.pd + a * p.dd, ih = oh * p.sh - p.ph + r * p.dh, iw = ow * p.sw - p.pw + s * p.dw;
          if (id < 0 || id >= p.d || ih < 0 || ih >= p.h || iw < 0 || iw >= p.w) continue;
          const std::int64_t at = ((nc * p.d + id) * p.h + ih) * p.w + iw;
          const float v = widen(x[at]);
          if (v > acc || !any) {
            acc = v;
            arg = at;
            any = true;
          }
        }
    y[o] = narrow<T>(any ? acc : -INFINITY);
    if (indices) indices[o] = arg;
  }
}

__global__ void amp_unscale_kernel(const float* g, const float* scale, float* out, float* found_inf, std::int64_t n) {
  const float inv = static_cast<float>(1.0 / static_cast<double>(*scale));
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float x = g[i];
    if (!isfinite(x)) *found_inf = 1.0f;  // every writer stores the same value
    out[i] = __fmul_rn(x, inv);
  }
}

__global__ void amp_update_scale_kernel(const float* scale, const std::int32_t* tracker, const float* found_inf, float* scale_out,
                                        std::int32_t* tracker_out, float growth, float backoff, std::int32_t growth_interval) {
  float s = *scale;
  std::int32_t clean = *tracker;
  if (*found_inf != 0.0f) {
    s = __fmul_rn(s, backoff);
    clean = 0;
  } else if (++clean == growth_interval) {
    const float grown = __fmul_rn(s, growth);
    if (isfinite(grown)) s = grown;
    clean = 0;
  }
  *scale_out = s;
  *tracker_out = clean;
}

__global__ void max_pool_grad_kernel(const float* dy, const std::int64_t* indices, float* dx, std::int64_t outputs,
                                     std::int64_t inputs) {
  for (std::int64_t o = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; o < outputs;
       o += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t i = indices[o];
    if (i >= 0 && i < inputs) atomicAdd(dx + i, dy[o]);
  }
}

}  // namespace

void layer_norm_grad(const float* dy, const float* x, const float* scale, const float* mean, const float* inv, float* dx,
                     float* dscale, float* dbias, std::int64_t rows, std::int64_t n, cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  if (dscale) check(cudaMemsetAsync(dscale, 0, static_cast<std::size_t>(n) * 4, stream), "LayerNormGrad zero");
  if (dbias) check(cudaMemsetAsync(dbias, 0, static_cast<std::size_t>(n) * 4, stream), "LayerNormGrad zero");
  if (dscale || dbias) {
    const dim3 grid(static_cast<unsigned>((n + kCols - 1) / kCols),
                    static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock));
    layer_norm_params_kernel<<<grid, dim3(kCols, kRowLanes), 0, stream>>>(dy, x, mean, inv, dscale, dbias, rows, n);
    check_launch("layer_norm_grad (scale, bias)");
  }
  if (dx) {
    layer_norm_dx_kernel<<<static_cast<unsigned>(rows), block_for_row(n), 0, stream>>>(dy, x, scale, mean, inv, dx, n);
    check_launch("layer_norm_grad");
  }
}

void softmax_grad(const float* dy, const float* y, float* dx, std::int64_t outer, std::int64_t n, std::int64_t inner,
                  bool log_softmax, cudaStream_t stream) {
  if (outer * inner == 0 || n == 0) return;
  softmax_grad_kernel<<<static_cast<unsigned>(outer * inner), block_for_row(n), 0, stream>>>(dy, y, dx, n, inner, log_softmax);
  check_launch("softmax_grad");
}

void mse_loss(const float* y, const float* t, float* loss, std::int64_t n, cudaStream_t stream) {
  const int blocks = static_cast<int>(std::min<std::int64_t>(kMseBlocks, std::max<std::int64_t>(1, (n + 255) / 256)));
  mse_partial_kernel<<<blocks, 256, 0, stream>>>(y, t, n);
  check_launch("mse_loss");
  mse_final_kernel<<<1, 1024, 0, stream>>>(loss, blocks, n);
  check_launch("mse_loss");
}

void adam_update(const float* w, const float* g, const float* m, const float* v, const float* step, float* w_out, float* m_out,
                 float* v_out, const float* found_inf, std::int64_t n, const AdamHyper& h, cudaStream_t stream) {
  if (n == 0) return;
  adam_kernel<<<grid_for(n), kThreads, 0, stream>>>(w, g, m, v, step, w_out, m_out, v_out, found_inf, n, h);
  check_launch("adam_update");
}

void momentum_update(const float* w, const float* g, const float* v, float* w_out, float* v_out, const float* found_inf,
                     std::int64_t n, float lr, float momentum, float weight_decay, cudaStream_t stream) {
  if (n == 0) return;
  momentum_kernel<<<grid_for(n), kThreads, 0, stream>>>(w, g, v, w_out, v_out, found_inf, n, lr, momentum, weight_decay);
  check_launch("momentum_update");
}

void amp_unscale(const float* g, const float* scale, float* out, float* found_inf, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  amp_unscale_kernel<<<grid_for(n), kThreads, 0, stream>>>(g, scale, out, found_inf, n);
  check_launch("amp_unscale");
}

void amp_update_scale(const float* scale, const std::int32_t* tracker, const float* found_inf, float* scale_out,
                      std::int32_t* tracker_out, float growth, float backoff, std::int32_t growth_interval, cudaStream_t stream) {
  amp_update_scale_kernel<<<1, 1, 0, stream>>>(scale, tracker, found_inf, scale_out, tracker_out, growth, backoff, growth_interval);
  check_launch("amp_update_scale");
}

void max_pool_with_indices(const void* x, void* y, std::int64_t* indices, FloatStorage storage, const PoolGeometry& p,
                           cudaStream_t stream) {
  const std::int64_t n = p.nc * p.od * p.oh * p.ow;
  if (n == 0) return;
  by_float_storage(storage, [&](auto tag) {
    using T = decltype(tag);
    max_pool_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), indices, p);
  });
  check_launch("max_pool_with_indices");
}

void max_pool_grad(const float* dy, const std::int64_t* indices, float* dx, std::int64_t outputs, std::int64_t inputs,
                   cudaStream_t stream) {
  check(cudaMemsetAsync(dx, 0, static_cast<std::size_t>(inputs) * 4, stream), "MaxPoolGrad zero");
  if (outputs == 0) return;
  max_pool_grad_kernel<<<grid_for(outputs), kThreads, 0, stream>>>(dy, indices, dx, outputs, inputs);
  check_launch("max_pool_grad");
}

}  // namespace memplan::runtime::cuda
