// Tests of cuda_reduction_staging_bytes: PyTorch's CUDA reduction staging buffer, the same launch arithmetic as
// python/memplan_torch/cuda_kernels.py (whose 1024 x 8000 bias-gradient case was measured on an H200: 62.5 MiB).
#include <doctest/doctest.h>

#include "planner/pytorch/cuda_reduce.hpp"

using memplan::planner::cuda_reduction_staging_bytes;

TEST_CASE("a bias gradient's sum over many rows stages its partial sums, a row reduction does not") {
  // [1024, 8000] summed over rows: 8000 outputs, each split over 2048 blocks of 4-byte partial sums, plus the
  // semaphores (the figures python/memplan_torch/cuda_kernels.py gives for the same shape)
  CHECK(cuda_reduction_staging_bytes({1024, 8000}, {true, false}, 4) == 65536000 + 252);
  CHECK(cuda_reduction_staging_bytes({1024, 8000}, {true, false}, 2) == 65536000 + 252);  // bf16: fp32 accumulator
  CHECK(cuda_reduction_staging_bytes({8, 1024, 768}, {true, true, false}, 4) == 50331648 + 24);
  // the same elements reduced along the fastest dim (a softmax's sum): one block row per output, no staging
  CHECK(cuda_reduction_staging_bytes({1024, 768}, {false, true}, 4) == 0);
  // few rows: the work per output is too small to split
  CHECK(cuda_reduction_staging_bytes({4, 256, 30522}, {true, true, false}, 2) == 0);
  CHECK(cuda_reduction_staging_bytes({64}, {true}, 4) == 0);
  // a full reduction of a large vector: a small buffer
  CHECK(cuda_reduction_staging_bytes({1 << 20}, {true}, 4) == 512 + 4);
  // nothing reduced, or shapes that do not match their mask
  CHECK(cuda_reduction_staging_bytes({1024, 8000}, {false, false}, 4) == 0);
  CHECK(cuda_reduction_staging_bytes({1024, 8000}, {true}, 4) == 0);
}
