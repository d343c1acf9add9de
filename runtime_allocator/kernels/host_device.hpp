// MEMPLAN_HOST_DEVICE: __host__ __device__ where nvcc compiles the file, nothing elsewhere, for helpers that
// the CPU kernels and the CUDA kernels share.
#pragma once

#if defined(__CUDACC__)
#define MEMPLAN_HOST_DEVICE __host__ __device__
#else
#define MEMPLAN_HOST_DEVICE
#endif
