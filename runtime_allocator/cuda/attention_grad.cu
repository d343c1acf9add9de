// FusedAttentionGrad on CUDA: FlashAttention-2's backward (Dao 2023, algorithm 2) in float32, made deterministic by
// splitting it in two kernels. One block per (batch, kv head, 64 keys) walks the query tiles of every query head of
// its group, recomputing P = exp(S - LSE) and accumulating dV = P'^T dO and dK = scale dS^T Q in registers (and
// dBias with atomic adds); one block per (batch, query head, 64 queries) walks the key tiles for dQ = scale dS K.
// D_i = rowsum(dO_i * O_i) is recomputed by each block as it loads its dO tile (no workspace).
#include <cmath>

#include "runtime_allocator/cuda/attention.hpp"
#include "runtime_allocator/cuda/attention_tile.cuh"
#include "runtime_allocator/cuda/cuda_context.hpp"

namespace memplan::runtime::cuda {

using namespace attention_tile;

namespace {

template <int kD>
constexpr int grad_smem_bytes() {
  return static_cast<int>(sizeof(float)) * (2 * rows_floats<kD>() + 2 * cols_floats<kD>() + kScoreFloats + 2 * kTile);
}

// P (dropout applied: pd) and dS = P * (dP' - D) of this thread's score block from the raw products s = Q K^T and
// dp = dO V^T; lse2 and delta per row (lse in log2 units).
__device__ __forceinline__ void probabilities(float (&s)[4][4], float (&dp)[4][4], float (&pd)[4][4], const AttentionParams& p,
                                              int b, int h, int i0, int j0, const float (&lse2)[4], const float (&delta)[4]) {
  masked_scores(s, p, b, h, i0, j0);
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const float prob = s[r][c] == -INFINITY || lse2[r] == -INFINITY ? 0.0f : exp2f(s[r][c] - lse2[r]);
      const float z = dropout_factor(p, b, h, i0 + r, j0 + c);
      pd[r][c] = prob * z;
      dp[r][c] = prob * (z * dp[r][c] - delta[r]);
    }
}

template <int kD>
__global__ void __launch_bounds__(kThreads, kD <= 64 ? 2 : 1) attention_dkdv_kernel(AttentionParams p, int kv_tiles) {
  extern __shared__ float4 smem4[];
  float* skt = reinterpret_cast<float*>(smem4);  // K^T [kD][68]
  float* svt = skt + cols_floats<kD>();           // V^T [kD][68]
  float* sq = svt + cols_floats<kD>();            // Q [64][kD + 4]
  float* sdo = sq + rows_floats<kD>();            // dO [64][kD + 4]
  float* sbuf = sdo + rows_floats<kD>();          // P', then dS [64 queries][68]
  float* sdelta = sbuf + kScoreFloats;            // [64]
  float* slse = sdelta + kTile;                   // [64], log2 units
  const int tile = static_cast<int>(blockIdx.x % kv_tiles), bh = static_cast<int>(blockIdx.x / kv_tiles);
  const int b = bh / p.kv_heads, hk = bh % p.kv_heads, group = p.q_heads / p.kv_heads;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int k0 = tile * kTile;

  load_cols<kD>(skt, p.k, b, hk, k0, p.kv_len, p.head_dim, p.vec4);
  load_cols<kD>(svt, p.v, b, hk, k0, p.kv_len, p.v_head_dim, p.vec4);
  float dk[4][kD / 16], dv[4][kD / 16];
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int e = 0; e < kD / 16; ++e) dk[r][e] = dv[r][e] = 0.0f;
  const int q_tiles = (p.q_len + kTile - 1) / kTile;
  const int first = p.causal ? k0 / kTile : 0;  // causal: queries before k0 see none of these keys
  for (int g = 0; g < group; ++g) {
    const int h = hk * group + g;
    for (int qt = first; qt < q_tiles; ++qt) {
      const int q0 = qt * kTile;
      __syncthreads();  // the previous tile's products are done with sq, sdo and sbuf
      load_rows<kD>(sq, p.q, b, h, q0, p.q_len, p.head_dim, p.vec4);
      load_rows_dot<kD>(sdo, sdelta, p.d_o, p.o, b, h, q0, p.q_len, p.v_head_dim, p.vec4);
      if (threadIdx.x < kTile) {
        const int i = q0 + threadIdx.x;
        slse[threadIdx.x] = i < p.q_len ? p.lse[(static_cast<std::int64_t>(b) * p.q_heads + h) * p.q_len + i] * kLog2e : -INFINITY;
      }
      __syncthreads();
      float s[4][4] = {}, dp[4][4] = {}, pd[4][4], lse2[4], delta[4];
      tile_scores<kD>(s, sq, skt, extent4(p.head_dim, kD));
      tile_scores<kD>(dp, sdo, svt, extent4(p.v_head_dim, kD));
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        lse2[r] = slse[ty * 4 + r];
        delta[r] = sdelta[ty * 4 + r];
      }
      probabilities(s, dp, pd, p, b, h, q0 + ty * 4, k0 + tx * 4, lse2, delta);
      store_scores(sbuf, pd);
      __syncthreads();
      tile_accumulate<kD, true>(dv, sbuf, sdo, extent4(p.q_len - q0, kTile));  // dV[j] += sum_i P'[i][j] dO[i]
      __syncthreads();
      store_scores(sbuf, dp);
      if (p.dbias) {
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int i = q0 + ty * 4 + r, j = k0 + tx * 4 + c;
            if (i < p.q_len && j < p.kv_len && dp[r][c] != 0.0f) atomicAdd(p.dbias + bias_offset(p, b, h, i, j), dp[r][c]);
          }
      }
      __syncthreads();
      tile_accumulate<kD, true>(dk, sbuf, sq, extent4(p.q_len - q0, kTile));  // dK[j] += sum_i dS[i][j] Q[i]
    }
  }
  const float scale[4] = {p.scale, p.scale, p.scale, p.scale}, one[4] = {1.0f, 1.0f, 1.0f, 1.0f};
  if (p.dk.data) store_rows<kD>(p.dk, b, hk, k0, p.kv_len, p.head_dim, p.vec4, dk, scale);
  if (p.dv.data) store_rows<kD>(p.dv, b, hk, k0, p.kv_len, p.v_head_dim, p.vec4, dv, one);
}

template <int kD>
__global__ void __launch_bounds__(kThreads, kD <= 64 ? 2 : 1) attention_dq_kernel(AttentionParams p, int q_tiles) {
  extern __shared__ float4 smem4[];
  float* sq = reinterpret_cast<float*>(smem4);  // Q [64][kD + 4]
  float* sdo = sq + rows_floats<kD>();           // dO [64][kD + 4]
  float* sk = sdo + rows_floats<kD>();           // K^T [kD][68], then K [64][kD + 4]
  float* svt = sk + cols_floats<kD>();           // V^T [kD][68]
  float* sds = svt + cols_floats<kD>();          // dS [64][68]
  float* sdelta = sds + kScoreFloats;            // [64]
  const int tile = static_cast<int>(blockIdx.x % q_tiles), bh = static_cast<int>(blockIdx.x / q_tiles);
  const int b = bh / p.q_heads, h = bh % p.q_heads, hk = h / (p.q_heads / p.kv_heads);
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int q0 = tile * kTile;

  load_rows<kD>(sq, p.q, b, h, q0, p.q_len, p.head_dim, p.vec4);
  load_rows_dot<kD>(sdo, sdelta, p.d_o, p.o, b, h, q0, p.q_len, p.v_head_dim, p.vec4);
  float lse2[4], delta[4], dq[4][kD / 16];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int i = q0 + ty * 4 + r;
    lse2[r] = i < p.q_len ? p.lse[(static_cast<std::int64_t>(b) * p.q_heads + h) * p.q_len + i] * kLog2e : -INFINITY;
#pragma unroll
    for (int e = 0; e < kD / 16; ++e) dq[r][e] = 0.0f;
  }
  int kv_tiles = (p.kv_len + kTile - 1) / kTile;
  if (p.causal) kv_tiles = min(kv_tiles, (min(q0 + kTile, p.q_len) - 1) / kTile + 1);
  __syncthreads();  // sdelta
#pragma unroll
  for (int r = 0; r < 4; ++r) delta[r] = sdelta[ty * 4 + r];
  for (int t = 0; t < kv_tiles; ++t) {
    const int k0 = t * kTile;
    __syncthreads();  // the previous tile's dS K is done with sk and sds
    load_cols<kD>(sk, p.k, b, hk, k0, p.kv_len, p.head_dim, p.vec4);
    load_cols<kD>(svt, p.v, b, hk, k0, p.kv_len, p.v_head_dim, p.vec4);
    __syncthreads();
    float s[4][4] = {}, dp[4][4] = {}, pd[4][4];
    tile_scores<kD>(s, sq, sk, extent4(p.head_dim, kD));
    tile_scores<kD>(dp, sdo, svt, extent4(p.v_head_dim, kD));
    probabilities(s, dp, pd, p, b, h, q0 + ty * 4, k0 + tx * 4, lse2, delta);
    store_scores(sds, dp);
    __syncthreads();  // K^T read by every thread, dS complete
    load_rows<kD>(sk, p.k, b, hk, k0, p.kv_len, p.head_dim, p.vec4);
    __syncthreads();
    tile_accumulate<kD, false>(dq, sds, sk, extent4(p.kv_len - k0, kTile));  // dQ[i] += sum_j dS[i][j] K[j]
  }
  const float scale[4] = {p.scale, p.scale, p.scale, p.scale};
  store_rows<kD>(p.dq, b, h, q0, p.q_len, p.head_dim, p.vec4, dq, scale);
}

template <class Kernel>
void launch(Kernel kernel, long long blocks, int bytes, const AttentionParams& p, int tiles, cudaStream_t stream, const char* what) {
  if (blocks == 0) return;
  if (blocks > 0x7fffffffLL) fail(ErrorKind::unsupported, std::string("FusedAttentionGrad: more than 2^31 blocks of ") + what);
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
        std::string("FusedAttentionGrad: shared memory of ") + what);
  kernel<<<static_cast<unsigned>(blocks), kThreads, bytes, stream>>>(p, tiles);
  check_launch(std::string("FusedAttentionGrad ") + what);
}

template <int kD>
void launch_backward(const AttentionParams& p, cudaStream_t stream) {
  constexpr int bytes = grad_smem_bytes<kD>();
  if (p.dk.data || p.dv.data || p.dbias) {
    const int kv_tiles = (p.kv_len + kTile - 1) / kTile;
    launch(attention_dkdv_kernel<kD>, static_cast<long long>(kv_tiles) * p.batch * p.kv_heads, bytes, p, kv_tiles, stream,
           "dK/dV");
  }
  if (p.dq.data) {
    const int q_tiles = (p.q_len + kTile - 1) / kTile;
    launch(attention_dq_kernel<kD>, static_cast<long long>(q_tiles) * p.batch * p.q_heads, bytes, p, q_tiles, stream, "dQ");
  }
}

}  // namespace

void attention_backward(const AttentionParams& p, cudaStream_t stream) {
  if (p.dbias)
    check(cudaMemsetAsync(p.dbias, 0, static_cast<std::size_t>(p.dbias_elements) * sizeof(float), stream),
          "FusedAttentionGrad: zero dBias");
  const int d = p.head_dim > p.v_head_dim ? p.head_dim : p.v_head_dim;
  if (d <= 64) return launch_backward<64>(p, stream);
  if (d <= kAttentionMaxHeadDim) return launch_backward<128>(p, stream);
  fail(ErrorKind::unsupported,
       "FusedAttentionGrad: head dim " + std::to_string(d) + " above " + std::to_string(kAttentionMaxHeadDim));
}

}  // namespace memplan::runtime::cuda
