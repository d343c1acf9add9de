// Hand-written CUDA kernels of the training-graph layers the libraries do not
// cover: BatchNorm in training mode and its gradient, the AveragePool, Gather
// gradients, deterministic Dropout, Where/IsNaN, Tile, fills and serial
// reductions. Semantics and float32 formulas follow the CPU kernels
// (runtime_allocator/kernels/kernels_*.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime_allocator/cuda/kernels.hpp"

namespace memplan::runtime::cuda {

// BatchNormTraining over x viewed as [n, c, plane]: per-channel mean and biased
// variance (sums of x and x^2 accumulated in double), y = (x - mean) *
// invstd * scale + bias with invstd = 1 / sqrt(var + epsilon). The optional
// outputs (null when absent): running_mean_out = running_mean * momentum + mean
// * (1 - momentum), likewise for the variance; saved_mean = mean; saved_invstd
// = invstd. y may alias x. x and y hold `storage` elements (bf16/f16: cuDNN's
// mixed batch norm, float32 arithmetic); scale, bias and the statistics are float32.
struct BatchNormTrainingArgs {
  const void *x = nullptr;
  const float *scale = nullptr;
  const float *bias = nullptr;
  const float *running_mean = nullptr;
  const float *running_var = nullptr;
  void *y = nullptr;
  float *running_mean_out = nullptr;
  float *running_var_out = nullptr;
  float *saved_mean = nullptr;
  float *saved_invstd = nullptr;
  std::int64_t n = 0, c = 0, plane = 1;
  float epsilon = 1e-5f, momentum = 0.9f;
  FloatStorage storage = FloatStorage::f32;
};
// `scratch`: batch_norm_scratch_bytes(c) device bytes for the per-block partial sums (kernels_batch_norm.cu).
std::uint64_t batch_norm_scratch_bytes(std::int64_t c);
void batch_norm_training(const BatchNormTrainingArgs &a, void *scratch, cudaStream_t stream);

// BatchNormGrad from dy, x and the saved mean/invstd: dbias = sum dy, dscale =
// sum dy * xhat per channel, and dx = scale * invstd / m * (m * dy - dbias -
// xhat * dscale) with m = n * plane. dx, dscale, dbias may be null. dy, x and dx
// hold `storage` elements; scale, the statistics, dscale and dbias are float32.
void batch_norm_grad(const void *dy, const void *x, const float *scale, const float *mean, const float *invstd, void *dx,
                     float *dscale, float *dbias, std::int64_t n, std::int64_t c, std::int64_t plane, FloatStorage storage,
                     void *scratch, cudaStream_t stream);

// A pooling window over x [nc, d, h, w] <-> y [nc, od, oh, ow] (d = od = 1 below 3 spatial axes); pads at the
// start (pd, ph, pw) and end (pd_end, ph_end, pw_end): AveragePool, its gradient and the MaxPoolGrad of 16-bit
// tensors (the CPU kernels' cpu::window).
struct AvgPoolGeometry {
  std::int64_t nc = 1, h = 1, w = 1, oh = 1, ow = 1;
  std::int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1, ph = 0, pw = 0, ph_end = 0, pw_end = 0;
  std::int64_t d = 1, od = 1, kd = 1, sd = 1, dd = 1, pd = 0, pd_end = 0;
  bool count_include_pad = false;
};
// dx[i] = sum over the windows covering i of dy[o] / count(o); each dx element
// is summed by one thread (no atomics). dy and dx hold `storage` elements.
void average_pool_grad(const void *dy, void *dx, FloatStorage storage, const AvgPoolGeometry &p, cudaStream_t stream);
// AveragePool: y[o] = the sum of the window's elements inside x / count(o) (the
// CPU kernel's count, count_include_pad included), summed in float32.
void average_pool(const void *x, void *y, FloatStorage storage, const AvgPoolGeometry &p, cudaStream_t stream);
// MaxPoolGrad as a gather: dx[i] = the sum, in float32 and window order, of
// dy[o] over the windows o covering i whose index (flat over x) is i; each dx
// element is written once by one thread (no atomics, rounded once: the 16-bit
// path; float32 keeps max_pool_grad's scatter).
void max_pool_grad_windows(const void *dy, const std::int64_t *indices, void *dx, FloatStorage storage, const AvgPoolGeometry &p,
                           cudaStream_t stream);

// GatherGrad: dx [outer, dim, inner] = 0, then dx[o, idx[j], e] += dy[o, j, e]
// for j in order (int64 or int32 indices, negative ones counting from the end,
// out-of-range ones skipped). One thread owns each (o, e) column, so repeated
// indices are summed in index order without atomics: deterministic and
// bit-equal to the CPU kernel.
void gather_grad(const float *dy, const void *indices, bool indices_i64, float *dx, std::int64_t outer, std::int64_t dim,
                 std::int64_t inner, std::int64_t count, cudaStream_t stream);

// Training-mode Dropout (dropout_mask.hpp): y[i] = keep(i) ? x[i] / (1 - ratio)
// : 0; mask (bool bytes) may be null.
void dropout_forward(const float *x, float *y, std::uint8_t *mask, std::int64_t n, std::uint64_t key, std::uint64_t threshold,
                     float ratio, cudaStream_t stream);
// The same over bf16 (bf16 true) or f16 elements: y = x / (1 - ratio) computed in float32, rounded to nearest even.
void dropout_forward_half(const void *x, void *y, bool bf16, std::uint8_t *mask, std::int64_t n, std::uint64_t key,
                          std::uint64_t threshold, float ratio, cudaStream_t stream);

// A float operand under numpy broadcasting against an output of `rank` dims:
// element strides (0 on broadcast dims).
struct BroadcastShape {
  int rank = 0;
  std::int64_t dims[kMaxRank] = {};
  std::int64_t strides[3][kMaxRank] = {};  // per operand
};

// dx[i] = (mask[i'] != 0) == select ? (divide ? dy[i] / (1 - ratio) : dy[i]) :
// 0, mask (bool bytes) read through strides[0] of `shape` (dy and dx have the
// output shape): WhereGrad (select) and DropoutGrad (divide).
void masked_grad(const float *dy, const std::uint8_t *mask, float *dx, const BroadcastShape &shape, bool select, bool divide,
                 float ratio, cudaStream_t stream);

// Where: out[i] = cond[i'] ? x[i''] : y[i'''] (operands 0, 1, 2 of `shape`),
// elements of elem_bytes (1, 2, 4, 8).
void where(const std::uint8_t *cond, const void *x, const void *y, void *out, const BroadcastShape &shape, int elem_bytes,
           cudaStream_t stream);

// IsNaN of float32: out bool bytes.
void is_nan(const float *x, std::uint8_t *out, std::int64_t n, cudaStream_t stream);

// Tile: out [out_dims] element i reads x at sum_k ((i_k mod in_dims[k]) *
// in_strides[k]).
struct TileShape {
  int rank = 0;
  std::int64_t out_dims[kMaxRank] = {};
  std::int64_t in_dims[kMaxRank] = {};
  std::int64_t in_strides[kMaxRank] = {};
};
void tile(const void *x, void *out, const TileShape &shape, int elem_bytes, cudaStream_t stream);

// n elements of elem_bytes (1, 2, 4, 8), each the low elem_bytes bytes of
// `pattern` (little-endian).
void fill_pattern(void *out, std::int64_t n, int elem_bytes, std::uint64_t pattern, cudaStream_t stream);

// ReduceProd or ReduceSumSquare in the CPU kernel's order: one thread per
// output walks its reduced elements in row-major order, so results are
// bit-equal to the CPU's. spec.kind and spec.scale are ignored.
void reduce_serial(const float *x, float *y, const ReduceSpec &spec, bool product, cudaStream_t stream);

}  // namespace memplan::runtime::cuda
