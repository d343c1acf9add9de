// Hand-written CUDA kernels of the training-graph layers (see
// kernels_layers.hpp). Float arithmetic that the CPU kernels round step by step
// uses the _rn intrinsics, so no multiply-add is contracted into an FMA.
#include <cmath>

#include "runtime_allocator/cuda/block_reduce.cuh"
#include "runtime_allocator/cuda/half_io.cuh"
#include "runtime_allocator/cuda/cuda_context.hpp"
#include "runtime_allocator/cuda/kernels_layers.hpp"
#include "runtime_allocator/kernels/dropout_mask.hpp"

namespace memplan::runtime::cuda {

namespace {

__device__ __forceinline__ std::int64_t global_index() {
  return blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
}
__device__ __forceinline__ std::int64_t grid_stride() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

// The number of window elements the CPU kernel divides output (od, oh, ow) by.
__device__ std::int64_t pool_count(const AvgPoolGeometry &p, std::int64_t od, std::int64_t oh, std::int64_t ow) {
  std::int64_t count = 0;
  for (std::int64_t a = 0; a < p.kd; ++a)
    for (std::int64_t r = 0; r < p.kh; ++r)
      for (std::int64_t s = 0; s < p.kw; ++s) {
        const std::int64_t id = od * p.sd - p.pd + a * p.dd, ih = oh * p.sh - p.ph + r * p.dh, iw = ow * p.sw - p.pw + s * p.dw;
        if (p.count_include_pad)
          count += id < p.d + p.pd_end && ih < p.h + p.ph_end && iw < p.w + p.pw_end;
        else
          count += id >= 0 && id < p.d && ih >= 0 && ih < p.h && iw >= 0 && iw < p.w;
      }
  return count;
}

// Calls visit(o) for every output window o (flat over [od, oh, ow]) that reads input element (id, ih, iw), in window order.
template <typename Visit>
__device__ void windows_covering(const AvgPoolGeometry &p, std::int64_t id, std::int64_t ih, std::int64_t iw, Visit visit) {
  for (std::int64_t a = 0; a < p.kd; ++a) {
    const std::int64_t td = id + p.pd - a * p.dd;  // = od * sd for the window that reads id at offset a
    if (td < 0 || td % p.sd != 0 || td / p.sd >= p.od) continue;
    for (std::int64_t r = 0; r < p.kh; ++r) {
      const std::int64_t th = ih + p.ph - r * p.dh;
      if (th < 0 || th % p.sh != 0 || th / p.sh >= p.oh) continue;
      for (std::int64_t s = 0; s < p.kw; ++s) {
        const std::int64_t tw = iw + p.pw - s * p.dw;
        if (tw < 0 || tw % p.sw != 0 || tw / p.sw >= p.ow) continue;
        visit(td / p.sd, th / p.sh, tw / p.sw);
      }
    }
  }
}

template <typename T>
__global__ void average_pool_grad_kernel(const T *dy, T *dx, AvgPoolGeometry p) {
  const std::int64_t total = p.nc * p.d * p.h * p.w;
  for (std::int64_t i = global_index(); i < total; i += grid_stride()) {
    const std::int64_t iw = i % p.w, ih = (i / p.w) % p.h, id = (i / (p.w * p.h)) % p.d, nc = i / (p.w * p.h * p.d);
    float acc = 0.0f;
    windows_covering(p, id, ih, iw, [&](std::int64_t od, std::int64_t oh, std::int64_t ow) {
      const std::int64_t count = pool_count(p, od, oh, ow);
      if (count > 0)
        acc = __fadd_rn(acc, __fdiv_rn(widen(dy[((nc * p.od + od) * p.oh + oh) * p.ow + ow]), static_cast<float>(count)));
    });
    dx[i] = narrow<T>(acc);
  }
}

template <typename T>
__global__ void average_pool_kernel(const T *x, T *y, AvgPoolGeometry p) {
  const std::int64_t total = p.nc * p.od * p.oh * p.ow;
  for (std::int64_t o = global_index(); o < total; o += grid_stride()) {
    const std::int64_t ow = o % p.ow, oh = (o / p.ow) % p.oh, od = (o / (p.ow * p.oh)) % p.od, nc = o / (p.ow * p.oh * p.od);
    float acc = 0.0f;
    for (std::int64_t a = 0; a < p.kd; ++a)
      for (std::int64_t r = 0; r < p.kh; ++r)
        for (std::int64_t s = 0; s < p.kw; ++s) {
          const std::int64_t id = od * p.sd - p.pd + a * p.dd, ih = oh * p.sh - p.ph + r * p.dh, iw = ow * p.sw - p.pw + s * p.dw;
          if (id >= 0 && id < p.d && ih >= 0 && ih < p.h && iw >= 0 && iw < p.w)
            acc = __fadd_rn(acc, widen(x[((nc * p.d + id) * p.h + ih) * p.w + iw]));
        }
    const std::int64_t count = pool_count(p, od, oh, ow);
    y[o] = narrow<T>(count > 0 ? __fdiv_rn(acc, static_cast<float>(count)) : 0.0f);
  }
}

template <typename T>
__global__ void max_pool_grad_windows_kernel(const T *dy, const std::int64_t *indices, T *dx, AvgPoolGeometry p) {
  const std::int64_t total = p.nc * p.d * p.h * p.w;
  for (std::int64_t i = global_index(); i < total; i += grid_stride()) {
    const std::int64_t iw = i % p.w, ih = (i / p.w) % p.h, id = (i / (p.w * p.h)) % p.d, nc = i / (p.w * p.h * p.d);
    float acc = 0.0f;
    windows_covering(p, id, ih, iw, [&](std::int64_t od, std::int64_t oh, std::int64_t ow) {
      const std::int64_t o = ((nc * p.od + od) * p.oh + oh) * p.ow + ow;
      if (indices[o] == i) acc = __fadd_rn(acc, widen(dy[o]));
    });
    dx[i] = narrow<T>(acc);
  }
}

template <typename Index>
__global__ void gather_grad_kernel(const float *dy, const Index *idx, float *dx, std::int64_t outer, std::int64_t dim,
                                   std::int64_t inner, std::int64_t count) {
  const std::int64_t columns = outer * inner;
  for (std::int64_t t = global_index(); t < columns; t += grid_stride()) {
    const std::int64_t o = t / inner, e = t - o * inner;
    for (std::int64_t j = 0; j < count; ++j) {
      std::int64_t k = static_cast<std::int64_t>(idx[j]);
      if (k < 0) k += dim;
      if (k < 0 || k >= dim) continue;
      float &d = dx[(o * dim + k) * inner + e];
      d = __fadd_rn(d, dy[(o * count + j) * inner + e]);
    }
  }
}

// GatherGrad into a table whose rows are narrow (inner <= kRowGatherInner: a relative-position bias of a few
// heads) from any number of indices: one warp per table row (o, k). The warp reads the indices 32 at a time and
// ballots the lanes that hit row k; the hits are then added in index order, lane e owning columns e, e + 32, ...:
// each element is the CPU kernel's sequential sum, bit for bit, and the indices are read once per row, not once
// per element.
constexpr int kRowGatherInner = 128;
template <class Index>
__global__ void gather_grad_rows_kernel(const float *dy, const Index *idx, float *dx, std::int64_t outer, std::int64_t dim,
                                        std::int64_t inner, std::int64_t count) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  const std::int64_t warps = (static_cast<std::int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (std::int64_t row = global_index() >> 5; row < outer * dim; row += warps) {
    const std::int64_t o = row / dim, k = row - o * dim;
    float acc[kRowGatherInner / 32];
    for (int r = 0; r < kRowGatherInner / 32; ++r) acc[r] = 0.0f;
    constexpr int kBatch = 8;  // index loads in flight per lane: the scan is bound by their latency
    for (std::int64_t j0 = 0; j0 < count; j0 += 32 * kBatch) {
      bool hit[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const std::int64_t j = j0 + u * 32 + lane;
        std::int64_t i = j < count ? static_cast<std::int64_t>(idx[j]) : -dim - 1;
        if (i < 0) i += dim;
        hit[u] = i == k;
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        unsigned mask = __ballot_sync(0xffffffffu, hit[u]);
        while (mask) {  // the hits in index order
          const int b = __ffs(mask) - 1;
          mask &= mask - 1;
          const float *src = dy + (o * count + j0 + u * 32 + b) * inner;
          for (int r = 0; r * 32 + lane < inner; ++r) acc[r] = __fadd_rn(acc[r], src[r * 32 + lane]);
        }
      }
    }
    for (int r = 0; r * 32 + lane < inner; ++r) dx[row * inner + r * 32 + lane] = acc[r];
  }
}

// GatherGrad into a small table (dim <= kSmallGatherDim) from many indices (a relative-position bias
// gathered at every query/key pair): one block per column, each thread summing a fixed stride of the
// indices into its own row of partial sums, then a fixed-order block reduction per table row. Deterministic
// (the same bits every run), though not in the CPU kernel's sequential order.
constexpr int kSmallGatherDim = 64;
template <class Index>
__global__ void gather_grad_small_kernel(const float *dy, const Index *idx, float *dx, std::int64_t dim, std::int64_t inner,
                                         std::int64_t count) {
  const std::int64_t col = blockIdx.x, o = col / inner, e = col - o * inner;
  float acc[kSmallGatherDim];
  for (int k = 0; k < kSmallGatherDim; ++k) acc[k] = 0.0f;
  for (std::int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    std::int64_t k = static_cast<std::int64_t>(idx[j]);
    if (k < 0) k += dim;
    if (k < 0 || k >= dim) continue;
    acc[k] += dy[(o * count + j) * inner + e];
  }
  for (std::int64_t k = 0; k < dim; ++k) {
    const float v = block_reduce<false>(acc[k]);
    if (threadIdx.x == 0) dx[(o * dim + k) * inner + e] = v;
  }
}

// T: float, __nv_bfloat16 or __half storage; the division is float32 (16-bit results rounded once).
template <typename T>
__global__ void dropout_kernel(const T *x, T *y, std::uint8_t *mask, std::int64_t n, std::uint64_t key, std::uint64_t threshold,
                               float ratio) {
  const float kept = __fsub_rn(1.0f, ratio);
  for (std::int64_t i = global_index(); i < n; i += grid_stride()) {
    const bool keep = dropout_keep(key, static_cast<std::uint64_t>(i), threshold);
    y[i] = narrow<T>(keep ? __fdiv_rn(widen(x[i]), kept) : 0.0f);
    if (mask) mask[i] = keep ? 1 : 0;
  }
}

// Offset of output element i in operand k.
__device__ __forceinline__ std::int64_t broadcast_offset(const BroadcastShape &b, int k, std::int64_t i) {
  std::int64_t off = 0;
  for (int d = b.rank - 1; d >= 0; --d) {
    const std::int64_t q = i % b.dims[d];
    i /= b.dims[d];
    off += q * b.strides[k][d];
  }
  return off;
}

__device__ __forceinline__ std::int64_t element_count(const BroadcastShape &b) {
  std::int64_t n = 1;
  for (int d = 0; d < b.rank; ++d) n *= b.dims[d];
  return n;
}

__global__ void masked_grad_kernel(const float *dy, const std::uint8_t *mask, float *dx, BroadcastShape b, bool select,
                                   bool divide, float ratio) {
  const std::int64_t n = element_count(b);
  const float kept = __fsub_rn(1.0f, ratio);
  for (std::int64_t i = global_index(); i < n; i += grid_stride()) {
    const bool on = mask[broadcast_offset(b, 0, i)] != 0;
    const float g = dy[i];
    dx[i] = on == select ? (divide ? __fdiv_rn(g, kept) : g) : 0.0f;
  }
}

template <typename T>
__global__ void where_kernel(const std::uint8_t *cond, const T *x, const T *y, T *out, BroadcastShape b) {
  const std::int64_t n = element_count(b);
  for (std::int64_t i = global_index(); i < n; i += grid_stride())
    out[i] = cond[broadcast_offset(b, 0, i)] ? x[broadcast_offset(b, 1, i)] : y[broadcast_offset(b, 2, i)];
}

__global__ void is_nan_kernel(const float *x, std::uint8_t *out, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += grid_stride()) out[i] = isnan(x[i]) ? 1 : 0;
}

template <typename T>
__global__ void tile_kernel(const T *x, T *out, TileShape s, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += grid_stride()) {
    std::int64_t r = i, src = 0;
    for (int d = s.rank - 1; d >= 0; --d) {
      const std::int64_t q = r % s.out_dims[d];
      r /= s.out_dims[d];
      src += (q % s.in_dims[d]) * s.in_strides[d];
    }
    out[i] = x[src];
  }
}

template <typename T>
__global__ void fill_kernel(T *out, std::int64_t n, T value) {
  for (std::int64_t i = global_index(); i < n; i += grid_stride()) out[i] = value;
}

__global__ void reduce_serial_kernel(const float *x, float *y, ReduceSpec s, std::int64_t outs, std::int64_t reds, bool product) {
  for (std::int64_t o = global_index(); o < outs; o += grid_stride()) {
    std::int64_t r = o, base = 0;
    for (int k = s.out_rank - 1; k >= 0; --k) {
      base += (r % s.out_dims[k]) * s.out_strides[k];
      r /= s.out_dims[k];
    }
    float acc = product ? 1.0f : 0.0f;
    for (std::int64_t j = 0; j < reds; ++j) {
      std::int64_t q = j, off = base;
      for (int k = s.red_rank - 1; k >= 0; --k) {
        off += (q % s.red_dims[k]) * s.red_strides[k];
        q /= s.red_dims[k];
      }
      const float v = x[off];
      acc = product ? __fmul_rn(acc, v) : __fadd_rn(acc, __fmul_rn(v, v));
    }
    y[o] = acc;
  }
}

template <template <typename> class Launch, typename... Args>
void by_elem_bytes(int elem_bytes, const char *what, Args &&...args) {
  switch (elem_bytes) {
    case 1:
      Launch<unsigned char>{}(args...);
      break;
    case 2:
      Launch<unsigned short>{}(args...);
      break;
    case 4:
      Launch<unsigned int>{}(args...);
      break;
    case 8:
      Launch<unsigned long long>{}(args...);
      break;
    default:
      fail(ErrorKind::unsupported, std::string(what) + " of " + std::to_string(elem_bytes) + "-byte elements");
  }
}

template <typename T>
struct LaunchWhere {
  void operator()(const std::uint8_t *cond, const void *x, const void *y, void *out, const BroadcastShape &b, std::int64_t n,
                  cudaStream_t stream) const {
    where_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(cond, static_cast<const T *>(x), static_cast<const T *>(y),
                                                          static_cast<T *>(out), b);
  }
};

template <typename T>
struct LaunchTile {
  void operator()(const void *x, void *out, const TileShape &s, std::int64_t n, cudaStream_t stream) const {
    tile_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T *>(x), static_cast<T *>(out), s, n);
  }
};

template <typename T>
struct LaunchFill {
  void operator()(void *out, std::int64_t n, std::uint64_t pattern, cudaStream_t stream) const {
    fill_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<T *>(out), n, static_cast<T>(pattern));
  }
};

}  // namespace

void average_pool_grad(const void *dy, void *dx, FloatStorage storage, const AvgPoolGeometry &p, cudaStream_t stream) {
  const std::int64_t n = p.nc * p.d * p.h * p.w;
  if (n == 0) return;
  if (p.sd <= 0 || p.sh <= 0 || p.sw <= 0) fail(ErrorKind::unsupported, "AveragePoolGrad with a stride below 1");
  by_float_storage(storage, [&](auto tag) {
    using T = decltype(tag);
    average_pool_grad_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T *>(dy), static_cast<T *>(dx), p);
  });
  check_launch("average_pool_grad");
}

void average_pool(const void *x, void *y, FloatStorage storage, const AvgPoolGeometry &p, cudaStream_t stream) {
  const std::int64_t n = p.nc * p.od * p.oh * p.ow;
  if (n == 0) return;
  by_float_storage(storage, [&](auto tag) {
    using T = decltype(tag);
    average_pool_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T *>(x), static_cast<T *>(y), p);
  });
  check_launch("average_pool");
}

void max_pool_grad_windows(const void *dy, const std::int64_t *indices, void *dx, FloatStorage storage, const AvgPoolGeometry &p,
                           cudaStream_t stream) {
  const std::int64_t n = p.nc * p.d * p.h * p.w;
  if (n == 0) return;
  if (p.sd <= 0 || p.sh <= 0 || p.sw <= 0) fail(ErrorKind::unsupported, "MaxPoolGrad with a stride below 1");
  by_float_storage(storage, [&](auto tag) {
    using T = decltype(tag);
    max_pool_grad_windows_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T *>(dy), indices, static_cast<T *>(dx), p);
  });
  check_launch("max_pool_grad_windows");
}

void gather_grad(const float *dy, const void *indices, bool indices_i64, float *dx, std::int64_t outer, std::int64_t dim,
                 std::int64_t inner, std::int64_t count, cudaStream_t stream) {
  const std::int64_t n = outer * dim * inner;
  if (n == 0) return;
  if (count == 0 || inner == 0) {
    check(cudaMemsetAsync(dx, 0, static_cast<std::size_t>(n) * sizeof(float), stream), "GatherGrad zero");
    return;
  }
  const std::int64_t columns = outer * inner;
  if (dim <= kSmallGatherDim && columns < 4096 && count >= 4096) {  // few columns, many indices: a block per column
    if (indices_i64)
      gather_grad_small_kernel<<<static_cast<unsigned>(columns), kThreads, 0, stream>>>(
          dy, static_cast<const std::int64_t *>(indices), dx, dim, inner, count);
    else
      gather_grad_small_kernel<<<static_cast<unsigned>(columns), kThreads, 0, stream>>>(
          dy, static_cast<const std::int32_t *>(indices), dx, dim, inner, count);
    check_launch("gather_grad");
    return;
  }
  // Narrow rows: a warp per table row reads the indices once (outer * dim passes over them in all); wide rows (an
  // embedding table) keep a thread per column, each scanning the indices once.
  if (inner <= kRowGatherInner && outer * dim * count <= (std::int64_t{1} << 32)) {
    const std::int64_t threads = outer * dim * 32;
    if (indices_i64)
      gather_grad_rows_kernel<<<grid_for(threads), kThreads, 0, stream>>>(dy, static_cast<const std::int64_t *>(indices), dx, outer,
                                                                         dim, inner, count);
    else
      gather_grad_rows_kernel<<<grid_for(threads), kThreads, 0, stream>>>(dy, static_cast<const std::int32_t *>(indices), dx, outer,
                                                                         dim, inner, count);
    check_launch("gather_grad");
    return;
  }
  check(cudaMemsetAsync(dx, 0, static_cast<std::size_t>(n) * sizeof(float), stream), "GatherGrad zero");  // summed into
  if (indices_i64)
    gather_grad_kernel<<<grid_for(columns), kThreads, 0, stream>>>(dy, static_cast<const std::int64_t *>(indices), dx, outer, dim,
                                                                   inner, count);
  else
    gather_grad_kernel<<<grid_for(columns), kThreads, 0, stream>>>(dy, static_cast<const std::int32_t *>(indices), dx, outer, dim,
                                                                   inner, count);
  check_launch("gather_grad");
}

void dropout_forward(const float *x, float *y, std::uint8_t *mask, std::int64_t n, std::uint64_t key, std::uint64_t threshold,
                     float ratio, cudaStream_t stream) {
  if (n == 0) return;
  dropout_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, mask, n, key, threshold, ratio);
  check_launch("dropout");
}

void dropout_forward_half(const void *x, void *y, bool bf16, std::uint8_t *mask, std::int64_t n, std::uint64_t key,
                          std::uint64_t threshold, float ratio, cudaStream_t stream) {
  if (n == 0) return;
  if (bf16)
    dropout_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const __nv_bfloat16 *>(x), static_cast<__nv_bfloat16 *>(y), mask,
                                                         n, key, threshold, ratio);
  else
    dropout_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const __half *>(x), static_cast<__half *>(y), mask, n, key,
                                                         threshold, ratio);
  check_launch("dropout");
}

void masked_grad(const float *dy, const std::uint8_t *mask, float *dx, const BroadcastShape &shape, bool select, bool divide,
                 float ratio, cudaStream_t stream) {
  std::int64_t n = 1;
  for (int d = 0; d < shape.rank; ++d) n *= shape.dims[d];
  if (n == 0) return;
  masked_grad_kernel<<<grid_for(n), kThreads, 0, stream>>>(dy, mask, dx, shape, select, divide, ratio);
  check_launch("masked_grad");
}

void where(const std::uint8_t *cond, const void *x, const void *y, void *out, const BroadcastShape &shape, int elem_bytes,
           cudaStream_t stream) {
  std::int64_t n = 1;
  for (int d = 0; d < shape.rank; ++d) n *= shape.dims[d];
  if (n == 0) return;
  by_elem_bytes<LaunchWhere>(elem_bytes, "Where", cond, x, y, out, shape, n, stream);
  check_launch("where");
}

void is_nan(const float *x, std::uint8_t *out, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  is_nan_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, out, n);
  check_launch("is_nan");
}

void tile(const void *x, void *out, const TileShape &shape, int elem_bytes, cudaStream_t stream) {
  std::int64_t n = 1;
  for (int d = 0; d < shape.rank; ++d) n *= shape.out_dims[d];
  if (n == 0) return;
  for (int d = 0; d < shape.rank; ++d)
    if (shape.in_dims[d] <= 0) fail(ErrorKind::unsupported, "Tile of an empty input into a non-empty output");
  by_elem_bytes<LaunchTile>(elem_bytes, "Tile", x, out, shape, n, stream);
  check_launch("tile");
}

void fill_pattern(void *out, std::int64_t n, int elem_bytes, std::uint64_t pattern, cudaStream_t stream) {
  if (n == 0) return;
  by_elem_bytes<LaunchFill>(elem_bytes, "fill", out, n, pattern, stream);
  check_launch("fill_pattern");
}

void reduce_serial(const float *x, float *y, const ReduceSpec &spec, bool product, cudaStream_t stream) {
  std::int64_t outs = 1, reds = 1;
  for (int k = 0; k < spec.out_rank; ++k) outs *= spec.out_dims[k];
  for (int k = 0; k < spec.red_rank; ++k) reds *= spec.red_dims[k];
  if (outs == 0) return;
  reduce_serial_kernel<<<grid_for(outs), kThreads, 0, stream>>>(x, y, spec, outs, reds, product);
  check_launch("reduce_serial");
}

}  // namespace memplan::runtime::cuda
