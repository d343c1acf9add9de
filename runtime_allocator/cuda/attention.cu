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

// Q, K^T, V and P tiles.
template <int kD>
constexpr int forward_smem_bytes() {
  return static_cast<int>(sizeof(float)) * (2 * rows_floats<kD>() + cols_floats<kD>() + kScoreFloats);
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
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int e = 0; e < kD / 16; ++e) o[r][e] = 0.0f;
  }
  int kv_tiles = (p.kv_len + kTile - 1) / kTile;
  if (p.causal) {  // keys past the tile's last query row are masked for all its rows
    const int last = min(q0 + kTile, p.q_len) - 1;
    kv_tiles = min(kv_tiles, last / kTile + 1);
  }
  for (int t = 0; t < kv_tiles; ++t) {
    const int k0 = t * kTile;
    __syncthreads();  // the previous tile's P V is done with skv, sv and sp
    load_cols<kD, kR>(skt, p.k, b, hk, k0, p.kv_len, p.head_dim, p.vec4);
    load_rows<kD, kR>(sv, p.v, b, hk, k0, p.kv_len, p.v_head_dim, p.vec4);
    __syncthreads();
    float s[kR][4] = {};
    if (active) tile_scores<kD, kR>(s, sq, skt, extent4(p.head_dim, kD));
    masked_scores<kR>(s, p, b, h, q0 + ty * kR, k0 + tx * 4);
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
        s[r][c] = e * dropout_factor(p, b, h, q0 + ty * kR + r, k0 + tx * 4 + c);  // LSE is before dropout
      }
      l[r] = l[r] * alpha + row_sum(sum);
      m[r] = m_new;
#pragma unroll
      for (int e = 0; e < kD / 16; ++e) o[r][e] *= alpha;
    }
    store_scores<kR>(sp, s);
    __syncthreads();  // P complete
    if (active) tile_accumulate<kD, false, kR>(o, sp, sv, extent4(p.kv_len - k0, kTile));
  }
  float inv[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) inv[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
  store_rows<kD, kR>(p.o, b, h, q0, p.q_len, p.v_head_dim, p.vec4, o, inv);
  if (p.lse && tx == 0) {
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const int i = q0 + ty * kR + r;
      if (i < p.q_len)
        p.lse[(static_cast<std::int64_t>(b) * p.q_heads + h) * p.q_len + i] = l[r] > 0.0f ? (m[r] + log2f(l[r])) * kLn2 : -INFINITY;
    }
  }
}

template <int kD, int kR>
void launch_forward(const AttentionParams& p, cudaStream_t stream) {
  const int q_tiles = (p.q_len + kTile - 1) / kTile;
  const long long blocks = static_cast<long long>(q_tiles) * p.batch * p.q_heads;
  if (blocks == 0) return;
  if (blocks > 0x7fffffffLL) fail(ErrorKind::unsupported, "FusedAttention: more than 2^31 query tiles");
  constexpr int bytes = forward_smem_bytes<kD>();
  check(cudaFuncSetAttribute(attention_forward_kernel<kD, kR>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
        "FusedAttention: shared memory of the forward kernel");
  attention_forward_kernel<kD, kR><<<static_cast<unsigned>(blocks), threads_for<kR>(), bytes, stream>>>(p, q_tiles);
  check_launch("FusedAttention forward");
}

}  // namespace

void attention_forward(const AttentionParams& p, cudaStream_t stream) {
  const int d = p.head_dim > p.v_head_dim ? p.head_dim : p.v_head_dim;
  if (d <= 64) return launch_forward<64, 8>(p, stream);
  if (d <= kAttentionMaxHeadDim) return launch_forward<128, 4>(p, stream);
  fail(ErrorKind::unsupported, "FusedAttention: head dim " + std::to_string(d) + " above " + std::to_string(kAttentionMaxHeadDim));
}

}  // namespace memplan::runtime::cuda
