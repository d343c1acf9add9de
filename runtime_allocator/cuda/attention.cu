// FusedAttention's forward on CUDA: FlashAttention-2 (Dao 2023, algorithm 1) in float32. One block per (batch,
// query head, 64 query rows) walks the key/value tiles with an online softmax (running max and sum per row), so no
// score matrix leaves shared memory; O and LSE = max + log(sum) are written once at the end.
#include <cmath>

#include "runtime_allocator/cuda/attention.hpp"
#include "runtime_allocator/cuda/attention_tile.cuh"
#include "runtime_allocator/cuda/cuda_context.hpp"

namespace memplan::runtime::cuda {

using namespace attention_tile;

namespace {

// One key tile of the online softmax for this thread's rows (i0 + r) and keys (j0 + c * kCS): s holds the masked
// scores in log2 units and leaves as the probabilities times the dropout factors (relative to the running max);
// m, l (running max and sum) and the output accumulators o are rescaled to the new max.
template <int kD, int kR, int kCS>
__device__ __forceinline__ void online_softmax(float (&s)[kR][4], float (&m)[kR], float (&l)[kR], float (&o)[kR][kD / 16],
                                               const AttentionParams& p, int b, int h, int i0, int j0) {
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const float mx = row_max(fmaxf(fmaxf(s[r][0], s[r][1]), fmaxf(s[r][2], s[r][3])));
    const float m_new = fmaxf(m[r], mx);
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a row masked so far keeps l = 0, O = 0
    const float alpha = exp2f(m[r] - m_use);
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const float e = exp2f(s[r][c] - m_use);
      sum += e;
      s[r][c] = e * dropout_factor(p, b, h, i0 + r, j0 + c * kCS);  // LSE is before dropout
    }
    l[r] = l[r] * alpha + row_sum(sum);
    m[r] = m_new;
#pragma unroll
    for (int e = 0; e < kD / 16; ++e) o[r][e] *= alpha;
  }
}

// O = o / l for this thread's rows of the query tile at q0, and LSE = m + log(l) (-inf for a row with every key masked).
template <int kD, int kR>
__device__ __forceinline__ void finish_rows(const AttentionParams& p, int b, int h, int q0, bool vec4, const float (&o)[kR][kD / 16],
                                            const float (&m)[kR], const float (&l)[kR]) {
  float inv[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) inv[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
  store_rows<kD, kR>(p.o, b, h, q0, p.q_len, p.v_head_dim, vec4, o, inv);
  if (p.lse && threadIdx.x % 16 == 0) {
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const int i = q0 + static_cast<int>(threadIdx.x / 16) * kR + r;
      if (i < p.q_len)
        p.lse[(static_cast<std::int64_t>(b) * p.q_heads + h) * p.q_len + i] = l[r] > 0.0f ? (m[r] + log2f(l[r])) * kLn2 : -INFINITY;
    }
  }
}

// Q, K^T, V and P tiles.
template <int kD>
constexpr int forward_smem_bytes() {
  return static_cast<int>(sizeof(float)) * (2 * rows_floats<kD>() + cols_floats<kD>() + kScoreFloats);
}

// Both forward kernels: the running output, maximum and sum of kR rows before the first key tile.
template <int kD, int kR>
__device__ __forceinline__ void start_rows(float (&o)[kR][kD / 16], float (&m)[kR], float (&l)[kR]) {
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int e = 0; e < kD / 16; ++e) o[r][e] = 0.0f;
  }
}

// The key tiles the query tile at q0 reads: all, or with causal masking those up to its last row's position (the
// keys past it are masked for all its rows).
__device__ __forceinline__ int forward_kv_tiles(const AttentionParams& p, int q0) {
  const int all = (p.kv_len + kTile - 1) / kTile;
  return p.causal ? min(all, (min(q0 + kTile, p.q_len) - 1) / kTile + 1) : all;
}

// kR query rows per thread: 8 (128 threads, 32 scores each: fewer shared loads per FMA) for head dims <= 64, 4 (256
// threads) for 128, where 8 rows of output would not fit in registers.
template <int kD, int kR>
__global__ void __launch_bounds__(threads_for<kR>(), kR == 8 ? 3 : 2) attention_forward_kernel(AttentionParams p, int q_tiles) {
  extern __shared__ float4 smem4[];
  float* sq = reinterpret_cast<float*>(smem4);  // Q [64][kD + 4]
  float* skt = sq + rows_floats<kD>();           // K^T [kD][68]
  float* sv = skt + cols_floats<kD>();           // V [64][kD + 4]
  float* sp = sv + rows_floats<kD>();            // P [64][68]
  const int tile = static_cast<int>(blockIdx.x % q_tiles), bh = static_cast<int>(blockIdx.x / q_tiles);
  const int b = bh / p.q_heads, h = bh % p.q_heads, hk = h / (p.q_heads / p.kv_heads);
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int q0 = tile * kTile;
  // Rows past the sequence (the last tile of a length that is not a multiple of 64) hold zeros: a thread whose rows
  // all lie there skips the products (whole warps where the tile is short).
  const bool active = ty * kR < p.q_len - q0;

  load_rows<kD, kR>(sq, p.q, b, h, q0, p.q_len, p.head_dim, p.vec4);
  float o[kR][kD / 16];
  float m[kR], l[kR];
  start_rows<kD, kR>(o, m, l);
  const int kv_tiles = forward_kv_tiles(p, q0);
  for (int t = 0; t < kv_tiles; ++t) {
    const int k0 = t * kTile;
    __syncthreads();  // the previous tile's P V is done with skv, sv and sp
    load_cols<kD, kR>(skt, p.k, b, hk, k0, p.kv_len, p.head_dim, p.vec4);
    load_rows<kD, kR>(sv, p.v, b, hk, k0, p.kv_len, p.v_head_dim, p.vec4);
    __syncthreads();
    float s[kR][4] = {};
    if (active) tile_scores<kD, kR>(s, sq, skt, extent4(p.head_dim, kD));
    masked_scores<kR>(s, p, b, h, q0 + ty * kR, k0 + tx * 4);
    online_softmax<kD, kR, 1>(s, m, l, o, p, b, h, q0 + ty * kR, k0 + tx * 4);
    store_scores<kR>(sp, s);
    __syncthreads();  // P complete
    if (active) tile_accumulate<kD, false, kR>(o, sp, sv, extent4(p.kv_len - k0, kTile));
  }
  finish_rows<kD, kR>(p, b, h, q0, p.vec4, o, m, l);
}

// 16 bytes from global to shared memory without passing through registers (sm_80 cp.async), zeros where !valid
// (gmem must still be a valid address).
__device__ __forceinline__ void copy_async16(float* smem, const float* gmem, bool valid) {
  const auto dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void commit_async() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most one committed group of this thread is still in flight.
__device__ __forceinline__ void wait_async_but_one() { asm volatile("cp.async.wait_group 1;\n" ::); }

// Rows [r0, r0 + 64) of head (b, h) (float32, 16-byte aligned rows, dim % 4 == 0) into dst[s][d] (row_stride<kD>),
// copied asynchronously by kN threads; zeros past `len` rows or `dim` columns.
template <int kD, int kN>
__device__ __forceinline__ void rows_async(float* dst, const AttnOperand& t, int b, int h, int r0, int len, int dim) {
  const float* base = static_cast<const float*>(t.data) + head_base(t, b, h);
#pragma unroll
  for (int x = threadIdx.x; x < kTile * kD / 4; x += kN) {
    const int r = x / (kD / 4), c = 4 * (x % (kD / 4));
    const bool ok = r0 + r < len && c < dim;
    copy_async16(dst + r * row_stride<kD>() + c, ok ? base + static_cast<std::int64_t>(r0 + r) * t.row + c : base, ok);
  }
}

// acc[r][c] += sum_d Q[ty*kR + r][d] K[tx + 16c][d] with both tiles row-major (row_stride<kD>): the columns of a
// thread are 16 apart, so each quarter warp's float4 loads of K rows fall in distinct banks.
template <int kD, int kR>
__device__ __forceinline__ void scores_from_rows(float (&acc)[kR][4], const float* q, const float* k, int dims) {
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll 2
  for (int d = 0; d < dims; d += 4) {
    float av[kR][4], bv[4][4];
#pragma unroll
    for (int r = 0; r < kR; ++r) unpack(av[r], *reinterpret_cast<const float4*>(q + (ty * kR + r) * row_stride<kD>() + d));
#pragma unroll
    for (int c = 0; c < 4; ++c) unpack(bv[c], *reinterpret_cast<const float4*>(k + (tx + 16 * c) * row_stride<kD>() + d));
#pragma unroll
    for (int dd = 0; dd < 4; ++dd)
#pragma unroll
      for (int r = 0; r < kR; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[r][c] = fmaf(av[r][dd], bv[c][dd], acc[r][c]);
  }
}

// The forward of float32 operands (vec4) with head dims <= 64, 8 query rows per thread: K and V tiles stay
// row-major and the next pair is copied asynchronously (two buffers) while this one is used, so the key loop does not
// wait on global memory.
constexpr int kAsyncR = 8, kAsyncThreads = threads_for<kAsyncR>();
constexpr int async_smem_bytes() { return static_cast<int>(sizeof(float)) * (5 * rows_floats<64>() + kScoreFloats); }

__global__ void __launch_bounds__(kAsyncThreads, 2) attention_forward_async_kernel(AttentionParams p, int q_tiles) {
  constexpr int kD = 64, kR = kAsyncR;
  extern __shared__ float4 smem4[];
  float* sq = reinterpret_cast<float*>(smem4);  // Q [64][kD + 4]
  float* skv = sq + rows_floats<kD>();           // buffer x: K at skv + 2x rows, V at skv + (2x + 1) rows
  float* sp = skv + 4 * rows_floats<kD>();       // P [64][68]
  const int tile = static_cast<int>(blockIdx.x % q_tiles), bh = static_cast<int>(blockIdx.x / q_tiles);
  const int b = bh / p.q_heads, h = bh % p.q_heads, hk = h / (p.q_heads / p.kv_heads);
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int q0 = tile * kTile;
  const bool active = ty * kR < p.q_len - q0;  // rows past the sequence are zeros: skip their products

  const int kv_tiles = forward_kv_tiles(p, q0);
  rows_async<kD, kAsyncThreads>(sq, p.q, b, h, q0, p.q_len, p.head_dim);
  if (kv_tiles > 0) {
    rows_async<kD, kAsyncThreads>(skv, p.k, b, hk, 0, p.kv_len, p.head_dim);
    rows_async<kD, kAsyncThreads>(skv + rows_floats<kD>(), p.v, b, hk, 0, p.kv_len, p.v_head_dim);
  }
  commit_async();
  float o[kR][kD / 16];
  float m[kR], l[kR];
  start_rows<kD, kR>(o, m, l);
  for (int t = 0; t < kv_tiles; ++t) {
    const int k0 = t * kTile;
    const float* sk = skv + 2 * (t & 1) * rows_floats<kD>();
    const float* sv = sk + rows_floats<kD>();
    if (t + 1 < kv_tiles) {  // the next pair into the other buffer (its readers passed the barrier ending t - 1)
      float* nk = skv + 2 * ((t + 1) & 1) * rows_floats<kD>();
      rows_async<kD, kAsyncThreads>(nk, p.k, b, hk, k0 + kTile, p.kv_len, p.head_dim);
      rows_async<kD, kAsyncThreads>(nk + rows_floats<kD>(), p.v, b, hk, k0 + kTile, p.kv_len, p.v_head_dim);
    }
    commit_async();
    wait_async_but_one();  // this tile's pair (and Q) landed
    __syncthreads();
    float s[kR][4] = {};
    if (active) scores_from_rows<kD, kR>(s, sq, sk, extent4(p.head_dim, kD));
    masked_scores<kR, 16>(s, p, b, h, q0 + ty * kR, k0 + tx);
    online_softmax<kD, kR, 16>(s, m, l, o, p, b, h, q0 + ty * kR, k0 + tx);
#pragma unroll
    for (int r = 0; r < kR; ++r)
#pragma unroll
      for (int c = 0; c < 4; ++c) sp[(ty * kR + r) * kTStride + tx + 16 * c] = s[r][c];
    __syncthreads();  // P complete
    if (active) tile_accumulate<kD, false, kR>(o, sp, sv, extent4(p.kv_len - k0, kTile));
    __syncthreads();  // done with this pair and P before the next prefetch overwrites them
  }
  finish_rows<kD, kR>(p, b, h, q0, true, o, m, l);
}

// One block per (query tile, batch, head) with `bytes` of dynamic shared memory.
template <typename Kernel>
void launch_forward(Kernel kernel, int threads, int bytes, const AttentionParams& p, cudaStream_t stream) {
  const int q_tiles = (p.q_len + kTile - 1) / kTile;
  const long long blocks = static_cast<long long>(q_tiles) * p.batch * p.q_heads;
  if (blocks == 0) return;
  if (blocks > 0x7fffffffLL) fail(ErrorKind::unsupported, "FusedAttention: more than 2^31 query tiles");
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), "FusedAttention: shared memory of the forward kernel");
  kernel<<<static_cast<unsigned>(blocks), threads, bytes, stream>>>(p, q_tiles);
  check_launch("FusedAttention forward");
}

}  // namespace

void attention_forward(const AttentionParams& p, cudaStream_t stream) {
  const int d = p.head_dim > p.v_head_dim ? p.head_dim : p.v_head_dim;
  if (d <= 64 && p.vec4) return launch_forward(attention_forward_async_kernel, kAsyncThreads, async_smem_bytes(), p, stream);
  if (d <= 64) return launch_forward(attention_forward_kernel<64, 8>, threads_for<8>(), forward_smem_bytes<64>(), p, stream);
  if (d <= kAttentionMaxHeadDim) return launch_forward(attention_forward_kernel<128, 4>, threads_for<4>(), forward_smem_bytes<128>(), p, stream);
  fail(ErrorKind::unsupported, "FusedAttention: head dim " + std::to_string(d) + " above " + std::to_string(kAttentionMaxHeadDim));
}

}  // namespace memplan::runtime::cuda
