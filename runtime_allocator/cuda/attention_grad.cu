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

// The last key tile that reaches query tile qt (causal: no key after the tile's last row).
__device__ __forceinline__ int last_key_tile(const AttentionParams& p, int qt) {
  const int kv_tiles = (p.kv_len + kTile - 1) / kTile;
  return p.causal ? min(kv_tiles - 1, (min((qt + 1) * kTile, p.q_len) - 1) / kTile) : kv_tiles - 1;
}

// dQ[i] += scale sum_j dS[i][j] K[j] for query tile qt from key tile `tile` (dS in sds, K rows in sk), after the
// key tiles above it (see attention_dkdv_kernel); the last key tile writes instead of adding.
template <int kD>
__device__ __forceinline__ void add_dq(const AttentionParams& p, const float* sds, const float* sk, int* turn, int b, int h, int qt,
                                       int tile) {
  float dq[4][kD / 16];
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int e = 0; e < kD / 16; ++e) dq[r][e] = 0.0f;
  if ((threadIdx.x / 16) * 4 < p.q_len - qt * kTile) tile_accumulate<kD, false>(dq, sds, sk, extent4(p.kv_len - tile * kTile, kTile));
  const int q_tiles = (p.q_len + kTile - 1) / kTile;
  int* my_turn = turn + (static_cast<std::int64_t>(b) * p.q_heads + h) * q_tiles + qt;
  const int last = last_key_tile(p, qt);
  if (threadIdx.x == 0)
    while (*static_cast<volatile int*>(my_turn) != last - tile) __nanosleep(64);
  __threadfence();
  __syncthreads();
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const std::int64_t base = head_base(p.dq, b, h);
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int i = qt * kTile + ty * 4 + r;
#pragma unroll
    for (int k = 0; k < kD / 64; ++k) {
      const int c = 64 * k + tx * 4;
      if (i >= p.q_len || c >= p.head_dim) continue;
      float4* at = reinterpret_cast<float4*>(static_cast<float*>(p.dq.data) + base + static_cast<std::int64_t>(i) * p.dq.row + c);
      float4 v = tile == last ? make_float4(0.0f, 0.0f, 0.0f, 0.0f) : __ldcg(at);
      v.x += p.scale * dq[r][4 * k];
      v.y += p.scale * dq[r][4 * k + 1];
      v.z += p.scale * dq[r][4 * k + 2];
      v.w += p.scale * dq[r][4 * k + 3];
      __stcg(at, v);
    }
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) atomicExch(my_turn, last - tile + 1);
}

// One block per (batch, kv head, 64 keys) walks the query tiles of every query head of its group for dK and dV.
// With kDq (float32 operands, kD 64) it also adds the tile's dQ = scale dS K to the query tile in global memory: the
// key tiles of one query tile add in descending key order (`turn`: a counter per (batch, query head, query tile),
// zeroed before the launch, says whose turn it is; blocks of higher keys are launched first, so a waiting block never
// waits on one that has not started), so the backward is deterministic with five tile products per tile pair, not
// seven. Descending, as the blocks walk the query tiles upwards: with a causal mask key tile t starts at query tile
// t, which the key tiles above it have already passed, so no block waits for a longer one.
template <int kD, bool kDq>
__global__ void __launch_bounds__(kThreads, kD <= 64 ? 2 : 1) attention_dkdv_kernel(AttentionParams p, int kv_tiles, int* turn) {
  extern __shared__ float4 smem4[];
  float* skt = reinterpret_cast<float*>(smem4);  // K^T [kD][68]
  float* svt = skt + cols_floats<kD>();           // V^T [kD][68]
  float* sq = svt + cols_floats<kD>();            // Q [64][kD + 4]
  float* sdo = sq + rows_floats<kD>();            // dO [64][kD + 4]
  float* sbuf = sdo + rows_floats<kD>();          // P', then dS [64 queries][68]
  float* sdelta = sbuf + kScoreFloats;            // [64]
  float* slse = sdelta + kTile;                   // [64], log2 units
  float* sk = slse + kTile;                       // kDq: K [64][kD + 4]
  const int bh = static_cast<int>(blockIdx.x / kv_tiles), rank = static_cast<int>(blockIdx.x % kv_tiles);
  const int tile = kDq ? kv_tiles - 1 - rank : rank;  // kDq: higher key tiles first
  const int b = bh / p.kv_heads, hk = bh % p.kv_heads, group = p.q_heads / p.kv_heads;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int k0 = tile * kTile;

  load_cols<kD>(skt, p.k, b, hk, k0, p.kv_len, p.head_dim, p.vec4);
  load_cols<kD>(svt, p.v, b, hk, k0, p.kv_len, p.v_head_dim, p.vec4);
  if (kDq) load_rows<kD>(sk, p.k, b, hk, k0, p.kv_len, p.head_dim, true);
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
      const bool active = ty * 4 < p.q_len - q0;  // rows past the sequence are zeros: their P and dS are 0
      if (active) {
        tile_scores<kD>(s, sq, skt, extent4(p.head_dim, kD));
        tile_scores<kD>(dp, sdo, svt, extent4(p.v_head_dim, kD));
      }
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
      if (kDq) add_dq<kD>(p, sbuf, sk, turn, b, h, qt, tile);
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

template <class Kernel, class... Extra>
void launch(Kernel kernel, long long blocks, int bytes, const AttentionParams& p, int tiles, cudaStream_t stream, const char* what,
            Extra... extra) {
  if (blocks == 0) return;
  if (blocks > 0x7fffffffLL) fail(ErrorKind::unsupported, std::string("FusedAttentionGrad: more than 2^31 blocks of ") + what);
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
        std::string("FusedAttentionGrad: shared memory of ") + what);
  kernel<<<static_cast<unsigned>(blocks), kThreads, bytes, stream>>>(p, tiles, extra...);
  check_launch(std::string("FusedAttentionGrad ") + what);
}

template <int kD>
void launch_backward(const AttentionParams& p, cudaStream_t stream) {
  constexpr int bytes = grad_smem_bytes<kD>();
  if (p.dk.data || p.dv.data || p.dbias) {
    const int kv_tiles = (p.kv_len + kTile - 1) / kTile;
    launch(attention_dkdv_kernel<kD, false>, static_cast<long long>(kv_tiles) * p.batch * p.kv_heads, bytes, p, kv_tiles, stream,
           "dK/dV", static_cast<int*>(nullptr));
  }
  if (p.dq.data) {
    const int q_tiles = (p.q_len + kTile - 1) / kTile;
    launch(attention_dq_kernel<kD>, static_cast<long long>(q_tiles) * p.batch * p.q_heads, bytes, p, q_tiles, stream, "dQ");
  }
}

}  // namespace

namespace {

constexpr int fused_grad_smem_bytes() { return grad_smem_bytes<64>() + static_cast<int>(sizeof(float)) * rows_floats<64>(); }

// The one-kernel backward takes float32 operands (vec4) of head dims <= 64 with a dQ to sum into (the first key tile
// in each query tile's order writes every row of it, so both lengths must be positive).
bool fused_grad_ok(const AttentionParams& p) {
  return p.vec4 && p.dq.data && p.head_dim <= 64 && p.v_head_dim <= 64 && p.q_len > 0 && p.kv_len > 0;
}

std::size_t turn_count(const AttentionParams& p) {
  return static_cast<std::size_t>(p.batch) * p.q_heads * ((p.q_len + kTile - 1) / kTile);
}

}  // namespace

std::size_t attention_backward_scratch_bytes(const AttentionParams& p) {
  return fused_grad_ok(p) ? turn_count(p) * sizeof(int) : 0;
}

void attention_backward(const AttentionParams& p, cudaStream_t stream, void* scratch) {
  if (p.dbias)
    check(cudaMemsetAsync(p.dbias, 0, static_cast<std::size_t>(p.dbias_elements) * sizeof(float), stream),
          "FusedAttentionGrad: zero dBias");
  if (fused_grad_ok(p)) {
    int* turn = static_cast<int*>(scratch);
    if (!turn) fail(ErrorKind::runtime, "FusedAttentionGrad: no scratch for the dQ turn counters");
    check(cudaMemsetAsync(turn, 0, turn_count(p) * sizeof(int), stream), "FusedAttentionGrad: zero the dQ turns");
    const int kv_tiles = (p.kv_len + kTile - 1) / kTile;
    return launch(attention_dkdv_kernel<64, true>, static_cast<long long>(kv_tiles) * p.batch * p.kv_heads, fused_grad_smem_bytes(),
                  p, kv_tiles, stream, "dQ/dK/dV", turn);
  }
  const int d = p.head_dim > p.v_head_dim ? p.head_dim : p.v_head_dim;
  if (d <= 64) return launch_backward<64>(p, stream);
  if (d <= kAttentionMaxHeadDim) return launch_backward<128>(p, stream);
  fail(ErrorKind::unsupported,
       "FusedAttentionGrad: head dim " + std::to_string(d) + " above " + std::to_string(kAttentionMaxHeadDim));
}

}  // namespace memplan::runtime::cuda
