// The CUDA device context: error checks, streams, library handles and owned device/pinned buffers.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#ifdef MEMPLAN_HAVE_CUDNN
#include <cudnn.h>
#endif

#include <cstdint>
#include <string>

#include "analysis/error.hpp"

namespace memplan::runtime::cuda {

// Throws ErrorKind::runtime naming `what` when a CUDA, cuBLAS or cuDNN call failed.
void check(cudaError_t err, const std::string& what);
void check(cublasStatus_t st, const std::string& what);
#ifdef MEMPLAN_HAVE_CUDNN
void check(cudnnStatus_t st, const std::string& what);
#endif
// Checks the last kernel launch.
void check_launch(const std::string& what);

// Number of CUDA devices usable by this process (0 when there is no driver or no GPU; never throws).
int device_count() noexcept;

// An owned device allocation (cudaMalloc) or pinned host allocation (cudaMallocHost).
class Buffer {
 public:
  enum class Kind { device, pinned_host };
  Buffer() = default;
  Buffer(std::uint64_t bytes, Kind kind, const std::string& what);
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();
  std::byte* data() const noexcept { return ptr_; }
  std::uint64_t size() const noexcept { return bytes_; }

 private:
  void release() noexcept;
  std::byte* ptr_ = nullptr;
  std::uint64_t bytes_ = 0;
  Kind kind_ = Kind::device;
};

// One device: a compute stream, a copy stream for swaps, cuBLAS (TF32 off unless asked) and cuDNN.
class Context {
 public:
  explicit Context(int device = 0, bool allow_tf32 = false);
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context();

  int device() const noexcept { return device_; }
  const cudaDeviceProp& props() const noexcept { return props_; }
  cudaStream_t stream() const noexcept { return stream_; }
  cudaStream_t copy_stream() const noexcept { return copy_stream_; }
  cublasHandle_t cublas() const noexcept { return cublas_; }
#ifdef MEMPLAN_HAVE_CUDNN
  cudnnHandle_t cudnn() const noexcept { return cudnn_; }
#endif
  void synchronize() const;
  // A device buffer of at least `bytes` for kernels' partial results (the column reductions' partial sums), grown on
  // demand (growing frees the old one, which synchronizes the device) and kept for the context's life: used by one
  // stream's consecutive kernels at a time, it is part of the process's fixed device memory, not of the plan.
  void* scratch(std::size_t bytes);

 private:
  int device_ = 0;
  cudaDeviceProp props_{};
  cudaStream_t stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
#ifdef MEMPLAN_HAVE_CUDNN
  cudnnHandle_t cudnn_ = nullptr;
#endif
  void* scratch_ = nullptr;
  std::size_t scratch_bytes_ = 0;
};

}  // namespace memplan::runtime::cuda
