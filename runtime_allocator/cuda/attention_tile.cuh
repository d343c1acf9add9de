// Device building blocks of the attention kernels: 64 x 64 tiles in shared memory, threads as a 16-wide grid each
// owning a kR x 4 block of a score tile (rows ty*kR.., columns tx*4..) and kR rows x kD/16 columns of an output tile
// (columns 64k + tx*4 + e): kR = 4 is 256 threads (16 x 16), kR = 8 is 128 (16 x 8). The score recomputation with
// masks, and the dropout replay.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime_allocator/cuda/attention_params.hpp"
#include "runtime_allocator/kernels/dropout_mask.hpp"

namespace memplan::runtime::cuda::attention_tile {

constexpr int kTile = 64;        // query rows and key rows per tile
constexpr int kThreads = 256;    // 16 x 16: kR = 4
// Threads of a block whose threads own kR rows of a tile each.
template <int kR>
__host__ __device__ constexpr int threads_for() { return 16 * kTile / kR; }
constexpr int kTStride = kTile + 4;  // row stride of a transposed tile [d][s] and of a score tile [i][j]
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Row stride of a row-major tile [s][d]: padded so the two query rows a warp reads fall in different banks.
template <int kD>
__host__ __device__ constexpr int row_stride() { return kD + 4; }
// Floats of a transposed tile (also holds a row-major one: 64 * (kD + 4) <= kD * 68 for kD >= 64).
template <int kD>
__host__ __device__ constexpr int cols_floats() { return kD * kTStride; }
template <int kD>
__host__ __device__ constexpr int rows_floats() { return kTile * row_stride<kD>(); }
constexpr int kScoreFloats = kTile * kTStride;

// Element offset of head (b, h) in operand t.
__device__ __forceinline__ std::int64_t head_base(const AttnOperand& t, int b, int h) {
  return static_cast<std::int64_t>(b) * t.batch + static_cast<std::int64_t>(h) * t.head;
}

// Element `at` of a 16-bit buffer as float32, and a float32 stored there rounded to nearest even.
__device__ __forceinline__ float load_half(const void* data, AttnStorage storage, std::int64_t at) {
  const unsigned short h = static_cast<const unsigned short*>(data)[at];
  return storage == kAttnBf16 ? __uint_as_float(static_cast<unsigned int>(h) << 16) : __half2float(__ushort_as_half(h));
}
__device__ __forceinline__ void store_half(void* data, AttnStorage storage, std::int64_t at, float v) {
  static_cast<unsigned short*>(data)[at] =
      storage == kAttnBf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v)) : __half_as_ushort(__float2half_rn(v));
}

// Elements [c, c + 4) of row r of one head (element offset `base` in t); zero past `len` rows or `dim` columns.
__device__ __forceinline__ float4 load4(const AttnOperand& t, std::int64_t base, int r, int c, int len, int dim, bool vec4) {
  float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (r >= len || c >= dim) return v;
  const std::int64_t at = base + static_cast<std::int64_t>(r) * t.row + c;
  if (t.storage != kAttnF32) {
    v.x = load_half(t.data, t.storage, at);
    if (c + 1 < dim) v.y = load_half(t.data, t.storage, at + 1);
    if (c + 2 < dim) v.z = load_half(t.data, t.storage, at + 2);
    if (c + 3 < dim) v.w = load_half(t.data, t.storage, at + 3);
    return v;
  }
  const float* p = static_cast<const float*>(t.data) + at;
  if (vec4) return __ldg(reinterpret_cast<const float4*>(p));
  v.x = p[0];
  if (c + 1 < dim) v.y = p[1];
  if (c + 2 < dim) v.z = p[2];
  if (c + 3 < dim) v.w = p[3];
  return v;
}

// Rows [r0, r0 + 64) of head (b, h) into dst[s][d] (row_stride<kD>). Thread t loads rows t / 4 + k * (threads / 4)
// (so with `dot` a group of 4 adjacent lanes owns one row).
template <int kD, int kR = 4>
__device__ __forceinline__ void load_rows(float* dst, const AttnOperand& t, int b, int h, int r0, int len, int dim, bool vec4) {
  const std::int64_t base = head_base(t, b, h);
#pragma unroll
  for (int r = threadIdx.x / 4; r < kTile; r += threads_for<kR>() / 4)
#pragma unroll
    for (int it = 0; it < kD / 16; ++it) {
      const int c = 4 * (threadIdx.x % 4 + 4 * it);
      *reinterpret_cast<float4*>(dst + r * row_stride<kD>() + c) = load4(t, base, r0 + r, c, len, dim, vec4);
    }
}

// load_rows of dO, also writing delta[s] = sum_d dO[s][d] * O[s][d] (FlashAttention-2's D_i; 0 past len).
template <int kD>
__device__ __forceinline__ void load_rows_dot(float* dst, float* delta, const AttnOperand& d_o, const AttnOperand& o, int b, int h,
                                              int r0, int len, int dim, bool vec4) {
  const std::int64_t base = head_base(d_o, b, h);
  const std::int64_t obase = head_base(o, b, h);
  const int r = threadIdx.x / 4;
  float dot = 0.0f;
#pragma unroll
  for (int it = 0; it < kD / 16; ++it) {
    const int c = 4 * (threadIdx.x % 4 + 4 * it);
    const float4 g = load4(d_o, base, r0 + r, c, len, dim, vec4), y = load4(o, obase, r0 + r, c, len, dim, vec4);
    *reinterpret_cast<float4*>(dst + r * row_stride<kD>() + c) = g;
    dot += g.x * y.x + g.y * y.y + g.z * y.z + g.w * y.w;
  }
  dot += __shfl_xor_sync(0xffffffffu, dot, 1);
  dot += __shfl_xor_sync(0xffffffffu, dot, 2);
  if (threadIdx.x % 4 == 0) delta[r] = dot;
}

// Rows [r0, r0 + 64) of head (b, h) transposed into dst[d][s] (stride kTStride): lanes take consecutive rows.
template <int kD, int kR = 4>
__device__ __forceinline__ void load_cols(float* dst, const AttnOperand& t, int b, int h, int r0, int len, int dim, bool vec4) {
  const std::int64_t base = head_base(t, b, h);
  const int s = threadIdx.x % kTile;
  constexpr int kGroups = threads_for<kR>() / kTile;  // threads per row
#pragma unroll
  for (int it = 0; it < kD / (4 * kGroups); ++it) {
    const int c = 4 * (threadIdx.x / kTile + kGroups * it);
    const float4 v = load4(t, base, r0 + s, c, len, dim, vec4);
    dst[(c + 0) * kTStride + s] = v.x;
    dst[(c + 1) * kTStride + s] = v.y;
    dst[(c + 2) * kTStride + s] = v.z;
    dst[(c + 3) * kTStride + s] = v.w;
  }
}

__device__ __forceinline__ void unpack(float (&out)[4], const float4& v) {
  out[0] = v.x;
  out[1] = v.y;
  out[2] = v.z;
  out[3] = v.w;
}

// `n` rounded up to a multiple of 4, at most `cap`: how far a loop over a tile's rows or columns must go when
// only the first n hold data (the rest were loaded as zeros and add nothing).
__device__ __forceinline__ int extent4(int n, int cap) { return n >= cap ? cap : (n <= 0 ? 0 : (n + 3) & ~3); }

// acc[r][c] += sum_d A[ty*kR + r][d] * Bt[d][tx*4 + c] over d < dims (a multiple of 4, at most kD; the columns
// past the head dim are zeros): A row-major (row_stride<kD>), Bt transposed (kTStride).
template <int kD, int kR = 4>
__device__ __forceinline__ void tile_scores(float (&acc)[kR][4], const float* a, const float* bt, int dims) {
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll 2
  for (int d = 0; d < dims; d += 4) {
    float av[kR][4];
#pragma unroll
    for (int r = 0; r < kR; ++r) unpack(av[r], *reinterpret_cast<const float4*>(a + (ty * kR + r) * row_stride<kD>() + d));
#pragma unroll
    for (int dd = 0; dd < 4; ++dd) {
      float bv[4];
      unpack(bv, *reinterpret_cast<const float4*>(bt + (d + dd) * kTStride + tx * 4));
#pragma unroll
      for (int r = 0; r < kR; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[r][c] = fmaf(av[r][dd], bv[c], acc[r][c]);
    }
  }
}

// acc[r][4k + e] += sum_s A(ty*kR + r, s) * B[s][64k + tx*4 + e] over the first `rows` rows s of B (row-major,
// row_stride<kD>; a multiple of 4, at most 64: rows past the sequence are zeros). A is a score tile (kTStride):
// A(x, s) = A[x][s], or with kTransA A(x, s) = A[s][x].
template <int kD, bool kTransA, int kR = 4>
__device__ __forceinline__ void tile_accumulate(float (&acc)[kR][kD / 16], const float* a, const float* b, int rows) {
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll 2
  for (int s = 0; s < rows; s += 4) {
    float av[kR][4];  // av[r][ss] = A(ty*kR + r, s + ss)
    if (kTransA) {
#pragma unroll
      for (int ss = 0; ss < 4; ++ss)
#pragma unroll
        for (int q = 0; q < kR / 4; ++q) {
          float col[4];
          unpack(col, *reinterpret_cast<const float4*>(a + (s + ss) * kTStride + ty * kR + 4 * q));
#pragma unroll
          for (int r = 0; r < 4; ++r) av[4 * q + r][ss] = col[r];
        }
    } else {
#pragma unroll
      for (int r = 0; r < kR; ++r) unpack(av[r], *reinterpret_cast<const float4*>(a + (ty * kR + r) * kTStride + s));
    }
#pragma unroll
    for (int ss = 0; ss < 4; ++ss)
#pragma unroll
      for (int k = 0; k < kD / 64; ++k) {
        float bv[4];
        unpack(bv, *reinterpret_cast<const float4*>(b + (s + ss) * row_stride<kD>() + 64 * k + tx * 4));
#pragma unroll
        for (int r = 0; r < kR; ++r)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[r][4 * k + e] = fmaf(av[r][ss], bv[e], acc[r][4 * k + e]);
      }
  }
}

// Writes this thread's block of a score tile (rows ty*kR.., columns tx*4..) into dst (kTStride).
template <int kR>
__device__ __forceinline__ void store_scores(float* dst, const float (&v)[kR][4]) {
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll
  for (int r = 0; r < kR; ++r)
    *reinterpret_cast<float4*>(dst + (ty * kR + r) * kTStride + tx * 4) = make_float4(v[r][0], v[r][1], v[r][2], v[r][3]);
}

// Offset of element (b, h, i, j) of the broadcast bias.
__device__ __forceinline__ std::int64_t bias_offset(const AttentionParams& p, int b, int h, int i, int j) {
  return b * p.bias_strides[0] + h * p.bias_strides[1] + i * p.bias_strides[2] + j * p.bias_strides[3];
}

// s[r][c] = (scale * qk + bias) * log2(e) for query i0 + r and key j0 + c * kCS, -inf where masked (past the
// lengths, causal j > i, mask false).
template <int kR, int kCS = 1>
__device__ __forceinline__ void masked_scores(float (&s)[kR][4], const AttentionParams& p, int b, int h, int i0, int j0) {
#pragma unroll
  for (int r = 0; r < kR; ++r)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int i = i0 + r, j = j0 + c * kCS;
      bool ok = i < p.q_len && j < p.kv_len && !(p.causal && j > i);
      float x = s[r][c] * p.scale;
      if (ok && p.bias) {
        const std::int64_t at = bias_offset(p, b, h, i, j);
        if (p.bias_is_mask) ok = static_cast<const unsigned char*>(p.bias)[at] != 0;
        else x += p.bias_storage == kAttnF32 ? static_cast<const float*>(p.bias)[at] : load_half(p.bias, p.bias_storage, at);
      }
      s[r][c] = ok ? x * kLog2e : -INFINITY;
    }
}

// 1 / (1 - ratio) where the probability of (b, h, i, j) is kept, 0 where dropped; 1 without dropout.
__device__ __forceinline__ float dropout_factor(const AttentionParams& p, int b, int h, int i, int j) {
  if (!p.dropout) return 1.0f;
  const std::uint64_t index =
      ((static_cast<std::uint64_t>(b) * p.q_heads + h) * p.q_len + i) * static_cast<std::uint64_t>(p.kv_len) + j;
  return dropout_keep(p.dropout_key, index, p.dropout_threshold) ? p.dropout_scale : 0.0f;
}

// The max (or sum) over the 16 lanes holding one score row.
__device__ __forceinline__ float row_max(float v) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float row_sum(float v) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Writes this thread's rows (row0 + ty*kR + r) and columns (64k + tx*4 + e) of an output tile, times `mul[r]`.
template <int kD, int kR = 4>
__device__ __forceinline__ void store_rows(const AttnOperand& t, int b, int h, int row0, int len, int dim, bool vec4,
                                           const float (&acc)[kR][kD / 16], const float (&mul)[kR]) {
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const std::int64_t base = head_base(t, b, h);
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int s = row0 + ty * kR + r;
    if (s >= len) continue;
    const std::int64_t row_at = base + static_cast<std::int64_t>(s) * t.row;
#pragma unroll
    for (int k = 0; k < kD / 64; ++k) {
      const int c = 64 * k + tx * 4;
      if (c >= dim) continue;
      const float4 v = make_float4(acc[r][4 * k] * mul[r], acc[r][4 * k + 1] * mul[r], acc[r][4 * k + 2] * mul[r],
                                   acc[r][4 * k + 3] * mul[r]);
      if (t.storage != kAttnF32) {
        store_half(t.data, t.storage, row_at + c, v.x);
        if (c + 1 < dim) store_half(t.data, t.storage, row_at + c + 1, v.y);
        if (c + 2 < dim) store_half(t.data, t.storage, row_at + c + 2, v.z);
        if (c + 3 < dim) store_half(t.data, t.storage, row_at + c + 3, v.w);
      } else if (vec4) {
        *reinterpret_cast<float4*>(static_cast<float*>(t.data) + row_at + c) = v;
      } else {
        float* row = static_cast<float*>(t.data) + row_at;
        row[c] = v.x;
        if (c + 1 < dim) row[c + 1] = v.y;
        if (c + 2 < dim) row[c + 2] = v.z;
        if (c + 3 < dim) row[c + 3] = v.w;
      }
    }
  }
}

}  // namespace memplan::runtime::cuda::attention_tile
