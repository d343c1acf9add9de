// Hand-written CUDA kernels of the losses: cross-entropy over a class axis (float32, bfloat16 or float16 logits,
// float32 compute) and the sum loss. Semantics follow the CPU kernels (runtime_allocator/kernels/kernels_loss.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime_allocator/kernels/class_rows.hpp"

namespace memplan::runtime::cuda {

enum class LogitsType { f32, bf16, f16 };

// Cross-entropy of logits y (dtype f32, bf16 or f16) over rows `r` against int64 labels (negative or
// `ignore_index`: ignored; at or above the class count: ignored too): lse[row] = log sum exp over the row,
// loss[0] = mean over labelled rows of lse - y[label] (NaN when none). Deterministic: fixed reduction orders.
void cross_entropy(const void* y, LogitsType dtype, const std::int64_t* labels, float* loss, float* lse,
                   const ClassRows& r, std::int64_t ignore_index, cudaStream_t stream);
// dy (y's dtype) = (exp(y - lse) - onehot(label)) * dloss / labelled rows, 0 on ignored rows; dloss null: 1.
// dy may alias y.
void cross_entropy_grad(const void* y, LogitsType dtype, const float* lse, const std::int64_t* labels, const float* dloss,
                        void* dy, const ClassRows& r, std::int64_t ignore_index, cudaStream_t stream);
// loss[0] = the sum of y's n float32 elements, in a fixed order.
void sum_loss(const float* y, float* loss, std::int64_t n, cudaStream_t stream);
// dy[0, n) = *dloss, or 1 when dloss is null.
void fill_loss_grad(const float* dloss, float* dy, std::int64_t n, cudaStream_t stream);

// LinearCrossEntropy's row step over one chunk of `rows` float32 logit rows of `classes` (bias, when given, added
// first): row_loss[r] = lse - logit[label] and row_keep[r] = 1 for a labelled row (0, 0 otherwise); the logits
// are overwritten by d loss / d logits before the mean's scale (softmax - onehot; zero on ignored rows).
void linear_ce_rows(float* logits, const float* bias, const std::int64_t* labels, std::int64_t rows, std::int64_t classes,
                    std::int64_t ignore_index, float* row_loss, float* row_keep, cudaStream_t stream);
// acc[0] += sum of row_loss, acc[1] += sum of row_keep over `rows` (one block, a fixed order).
void linear_ce_accumulate(const float* row_loss, const float* row_keep, std::int64_t rows, float* acc, cudaStream_t stream);
// db[c] += sum over rows of g[r, c] (a thread per column, rows in order).
void linear_ce_bias_grad(const float* g, std::int64_t rows, std::int64_t classes, float* db, cudaStream_t stream);
// loss = acc[0] / acc[1]; every element of dx, dw, db (those given) times 1 / acc[1].
void linear_ce_finish(const float* acc, float* loss, float* dx, std::int64_t nx, float* dw, std::int64_t nw, float* db,
                      std::int64_t nb, cudaStream_t stream);

}  // namespace memplan::runtime::cuda
