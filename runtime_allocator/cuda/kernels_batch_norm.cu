// BatchNorm in training mode and its gradient on the GPU (see kernels_layers.hpp), in three launches each:
//   1. partial sums: every channel's n * plane elements split over several blocks (the grid fills the device however
//      few channels there are: ResNet's first stage has 64 channels of 32 x 56 x 56 elements), each block writing
//      its double-precision sums to its own slot of the scratch;
//   2. one thread per channel adds its partials in slot order (deterministic: no atomics) and writes the statistics;
//   3. an elementwise pass over every element, with the CPU kernel's float32 formula rounded step by step.
// x is read twice and y written once, where one block per channel read x three times on a fraction of the SMs.
#include <algorithm>

#include "runtime_allocator/cuda/block_reduce.cuh"
#include "runtime_allocator/cuda/cuda_context.hpp"
#include "runtime_allocator/cuda/half_io.cuh"
#include "runtime_allocator/cuda/kernels_layers.hpp"

namespace memplan::runtime::cuda {

namespace {

constexpr int kStatThreads = 256;
constexpr int kMaxSplits = 64;  // slots per channel in the scratch

// The scratch: kMaxSplits double2 partials per channel, then 4 floats per channel (the statistics pass 3 reads).
struct BnScratch {
  double2 *partial;
  float *stat;
  BnScratch(void *p, std::int64_t c)
      : partial(static_cast<double2 *>(p)), stat(reinterpret_cast<float *>(static_cast<double2 *>(p) + c * kMaxSplits)) {}
};

// Blocks per channel: enough blocks for four per SM over all channels, each thread summing at least 8 elements.
int splits_for(std::int64_t c, std::int64_t count) {
  static int sms = 0;
  if (sms == 0) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        sms <= 0)
      sms = 108;
  }
  const std::int64_t want = (4 * static_cast<std::int64_t>(sms) + c - 1) / c;
  const std::int64_t most = std::max<std::int64_t>(1, count / (kStatThreads * 8));
  return static_cast<int>(std::clamp<std::int64_t>(std::min(want, most), 1, kMaxSplits));
}

// Grid of pass 1: x = the split, y = the channel (strided past 65535 channels).
dim3 stat_grid(std::int64_t c, int splits) { return dim3(static_cast<unsigned>(splits), static_cast<unsigned>(std::min<std::int64_t>(c, 65535))); }

__device__ double2 block_sum_double2(double2 v) {
  __shared__ double2 part[32];
  for (int o = 16; o > 0; o >>= 1) {
    v.x += __shfl_xor_sync(0xffffffffu, v.x, o);
    v.y += __shfl_xor_sync(0xffffffffu, v.y, o);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  v = lane < warps ? part[lane] : make_double2(0.0, 0.0);
  for (int o = 16; o > 0; o >>= 1) {
    v.x += __shfl_xor_sync(0xffffffffu, v.x, o);
    v.y += __shfl_xor_sync(0xffffffffu, v.y, o);
  }
  return v;
}

// Element k of channel ch's n * plane elements, k = start, start + stride, ...: (batch, position) advanced by
// addition, one 64-bit division per thread.
struct Walk {
  std::int64_t b, p, step_b, step_p, plane, batch_stride, base;
  __device__ Walk(std::int64_t ch, std::int64_t channels, std::int64_t plane_, std::int64_t start, std::int64_t stride)
      : b(start / plane_), p(start % plane_), step_b(stride / plane_), step_p(stride % plane_), plane(plane_),
        batch_stride(channels * plane_), base(ch * plane_) {}
  __device__ std::int64_t index() const { return b * batch_stride + base + p; }
  __device__ void next() {
    p += step_p;
    b += step_b;
    if (p >= plane) p -= plane, ++b;
  }
};

// Pass 1 of the forward: per (split, channel) the sum of x and of x^2.
template <typename T>
__global__ void bn_stats_partial(const T *x, std::int64_t n, std::int64_t c, std::int64_t plane, double2 *partial) {
  const int splits = gridDim.x;
  for (std::int64_t ch = blockIdx.y; ch < c; ch += gridDim.y) {
    double s = 0.0, s2 = 0.0;
    for (Walk w(ch, c, plane, blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x,
                static_cast<std::int64_t>(splits) * blockDim.x);
         w.b < n; w.next()) {
      const double v = widen(x[w.index()]);
      s += v;
      s2 += v * v;
    }
    const double2 t = block_sum_double2(make_double2(s, s2));
    if (threadIdx.x == 0) partial[ch * kMaxSplits + blockIdx.x] = t;
  }
}

// Pass 2 of the forward: statistics per channel, the running averages, the saved mean and invstd.
__global__ void bn_stats_final(BatchNormTrainingArgs a, int splits, BnScratch sc) {
  const std::int64_t ch = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (ch >= a.c) return;
  double s = 0.0, s2 = 0.0;
  for (int i = 0; i < splits; ++i) {
    const double2 t = sc.partial[ch * kMaxSplits + i];
    s += t.x;
    s2 += t.y;
  }
  const double count = static_cast<double>(a.n * a.plane), m = s / count;
  const float mean = static_cast<float>(m), var = static_cast<float>(fmax(s2 / count - m * m, 0.0));
  const float invstd = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(var, a.epsilon)));
  sc.stat[4 * ch] = mean;
  sc.stat[4 * ch + 1] = invstd;
  const float keep = a.momentum, take = __fsub_rn(1.0f, a.momentum);
  if (a.running_mean_out) a.running_mean_out[ch] = __fadd_rn(__fmul_rn(a.running_mean[ch], keep), __fmul_rn(mean, take));
  if (a.running_var_out) a.running_var_out[ch] = __fadd_rn(__fmul_rn(a.running_var[ch], keep), __fmul_rn(var, take));
  if (a.saved_mean) a.saved_mean[ch] = mean;
  if (a.saved_invstd) a.saved_invstd[ch] = invstd;
}

// Pass 3 of the forward: y = ((x - mean) * invstd) * scale + bias. y may alias x (each element read, then written,
// by one thread). I: 32-bit indices where the tensor allows them (cheaper channel arithmetic).
template <typename T, typename I>
__global__ void bn_normalize(const T *x, T *y, const float *scale, const float *bias, const float *stat, I total, I c, I plane) {
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < total; i += static_cast<I>(gridDim.x) * blockDim.x) {
    const I ch = (i / plane) % c;
    const float mean = stat[4 * ch], invstd = stat[4 * ch + 1];
    y[i] = narrow<T>(__fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(widen(x[i]), mean), invstd), scale[ch]), bias[ch]));
  }
}

// Pass 1 of the gradient: per (split, channel) the sum of dy and of dy * (x - mean) * invstd.
template <typename T>
__global__ void bn_grad_partial(const T *dy, const T *x, const float *mean, const float *invstd, std::int64_t n, std::int64_t c,
                                std::int64_t plane, double2 *partial) {
  const int splits = gridDim.x;
  for (std::int64_t ch = blockIdx.y; ch < c; ch += gridDim.y) {
    const float mu = mean[ch], is = invstd[ch];
    double db = 0.0, ds = 0.0;
    for (Walk w(ch, c, plane, blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x,
                static_cast<std::int64_t>(splits) * blockDim.x);
         w.b < n; w.next()) {
      const std::int64_t i = w.index();
      const float g = widen(dy[i]);
      db += g;
      ds += __fmul_rn(__fmul_rn(g, __fsub_rn(widen(x[i]), mu)), is);
    }
    const double2 t = block_sum_double2(make_double2(db, ds));
    if (threadIdx.x == 0) partial[ch * kMaxSplits + blockIdx.x] = t;
  }
}

// Pass 2 of the gradient: dbias, dscale and the factors of dx per channel.
__global__ void bn_grad_final(const float *scale, const float *invstd, float *dscale, float *dbias, std::int64_t c, std::int64_t count,
                              int splits, BnScratch sc) {
  const std::int64_t ch = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (ch >= c) return;
  double db = 0.0, ds = 0.0;
  for (int i = 0; i < splits; ++i) {
    const double2 t = sc.partial[ch * kMaxSplits + i];
    db += t.x;
    ds += t.y;
  }
  const float sum_dy = static_cast<float>(db), sum_dy_xhat = static_cast<float>(ds);
  if (dscale) dscale[ch] = sum_dy_xhat;
  if (dbias) dbias[ch] = sum_dy;
  sc.stat[4 * ch] = sum_dy;
  sc.stat[4 * ch + 1] = sum_dy_xhat;
  sc.stat[4 * ch + 2] = __fdiv_rn(__fmul_rn(scale[ch], invstd[ch]), static_cast<float>(count));
}

// Pass 3 of the gradient: dx = k0 * (m * dy - sum_dy - xhat * sum_dy_xhat). dx may alias dy.
template <typename T, typename I>
__global__ void bn_grad_input(const T *dy, const T *x, const float *mean, const float *invstd, T *dx, const float *stat, I total,
                              I c, I plane, float m) {
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < total; i += static_cast<I>(gridDim.x) * blockDim.x) {
    const I ch = (i / plane) % c;
    const float xhat = __fmul_rn(__fsub_rn(widen(x[i]), mean[ch]), invstd[ch]);
    dx[i] = narrow<T>(__fmul_rn(stat[4 * ch + 2], __fsub_rn(__fsub_rn(__fmul_rn(m, widen(dy[i])), stat[4 * ch]),
                                                             __fmul_rn(xhat, stat[4 * ch + 1]))));
  }
}

// Runs f(I{}) with 32-bit indices when `total` elements allow them.
template <typename F>
void by_index_width(std::int64_t total, F &&f) {
  if (total < (std::int64_t{1} << 31)) return f(std::uint32_t{});
  return f(std::int64_t{});
}

void check_shape(std::int64_t n, std::int64_t c, std::int64_t plane, const char *what) {
  if (n * plane == 0) fail(ErrorKind::unsupported, std::string(what) + " over an empty batch");
  if (c > 0x7fffffff) fail(ErrorKind::unsupported, std::string(what) + " with more than 2^31-1 channels");
}

}  // namespace

std::uint64_t batch_norm_scratch_bytes(std::int64_t c) {
  return static_cast<std::uint64_t>(c) * (kMaxSplits * sizeof(double2) + 4 * sizeof(float));
}

void batch_norm_training(const BatchNormTrainingArgs &a, void *scratch, cudaStream_t stream) {
  if (a.c == 0) return;
  check_shape(a.n, a.c, a.plane, "BatchNormTraining");
  const BnScratch sc(scratch, a.c);
  const int splits = splits_for(a.c, a.n * a.plane);
  const std::int64_t total = a.n * a.c * a.plane;
  by_float_storage(a.storage, [&](auto tag) {
    using T = decltype(tag);
    bn_stats_partial<T><<<stat_grid(a.c, splits), kStatThreads, 0, stream>>>(static_cast<const T *>(a.x), a.n, a.c, a.plane,
                                                                              sc.partial);
    bn_stats_final<<<grid_for(a.c), kThreads, 0, stream>>>(a, splits, sc);
    by_index_width(total, [&](auto itag) {
      using I = decltype(itag);
      bn_normalize<T, I><<<grid_for(total), kThreads, 0, stream>>>(static_cast<const T *>(a.x), static_cast<T *>(a.y), a.scale, a.bias,
                                                                   sc.stat, static_cast<I>(total), static_cast<I>(a.c),
                                                                   static_cast<I>(a.plane));
    });
  });
  check_launch("batch_norm_training");
}

void batch_norm_grad(const void *dy, const void *x, const float *scale, const float *mean, const float *invstd, void *dx,
                     float *dscale, float *dbias, std::int64_t n, std::int64_t c, std::int64_t plane, FloatStorage storage,
                     void *scratch, cudaStream_t stream) {
  if (c == 0) return;
  check_shape(n, c, plane, "BatchNormGrad");
  const BnScratch sc(scratch, c);
  const std::int64_t count = n * plane, total = n * c * plane;
  const int splits = splits_for(c, count);
  by_float_storage(storage, [&](auto tag) {
    using T = decltype(tag);
    bn_grad_partial<T><<<stat_grid(c, splits), kStatThreads, 0, stream>>>(static_cast<const T *>(dy), static_cast<const T *>(x), mean,
                                                                          invstd, n, c, plane, sc.partial);
    bn_grad_final<<<grid_for(c), kThreads, 0, stream>>>(scale, invstd, dscale, dbias, c, count, splits, sc);
    if (!dx) return;
    by_index_width(total, [&](auto itag) {
      using I = decltype(itag);
      bn_grad_input<T, I><<<grid_for(total), kThreads, 0, stream>>>(static_cast<const T *>(dy), static_cast<const T *>(x), mean, invstd,
                                                                    static_cast<T *>(dx), sc.stat, static_cast<I>(total),
                                                                    static_cast<I>(c), static_cast<I>(plane),
                                                                    static_cast<float>(count));
    });
  });
  check_launch("batch_norm_grad");
}

}  // namespace memplan::runtime::cuda
