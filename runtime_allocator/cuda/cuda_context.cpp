// The CUDA device context: error checks, streams, cuBLAS/cuDNN handles, owned buffers.
#include "runtime_allocator/cuda/cuda_context.hpp"

#include <utility>

namespace memplan::runtime::cuda {

void check(cudaError_t err, const std::string& what) {
  if (err != cudaSuccess)
    fail(ErrorKind::runtime, "CUDA error in " + what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

void check(cublasStatus_t st, const std::string& what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    fail(ErrorKind::runtime, "cuBLAS error in " + what + ": " + cublasGetStatusString(st));
}

#ifdef MEMPLAN_HAVE_CUDNN
void check(cudnnStatus_t st, const std::string& what) {
  if (st != CUDNN_STATUS_SUCCESS) fail(ErrorKind::runtime, "cuDNN error in " + what + ": " + cudnnGetErrorString(st));
}
#endif

void check_launch(const std::string& what) { check(cudaGetLastError(), "launch of " + what); }

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

Buffer::Buffer(std::uint64_t bytes, Kind kind, const std::string& what) : bytes_(bytes), kind_(kind) {
  if (bytes == 0) return;
  void* p = nullptr;
  if (kind == Kind::device) check(cudaMalloc(&p, bytes), "cudaMalloc of " + std::to_string(bytes) + " bytes for " + what);
  else check(cudaMallocHost(&p, bytes), "cudaMallocHost of " + std::to_string(bytes) + " bytes for " + what);
  ptr_ = static_cast<std::byte*>(p);
}

Buffer::Buffer(Buffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)), kind_(o.kind_) {}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    release();
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    kind_ = o.kind_;
  }
  return *this;
}

Buffer::~Buffer() { release(); }

void Buffer::release() noexcept {
  if (!ptr_) return;
  if (kind_ == Kind::device) (void)cudaFree(ptr_);
  else (void)cudaFreeHost(ptr_);
  ptr_ = nullptr;
}

Context::Context(int device, bool allow_tf32) : device_(device) {
  if (device_count() <= device) fail(ErrorKind::runtime, "no CUDA device " + std::to_string(device));
  check(cudaSetDevice(device), "cudaSetDevice");
  check(cudaGetDeviceProperties(&props_, device), "cudaGetDeviceProperties");
  check(cudaFree(nullptr), "creating the primary context");  // the driver API (NVRTC modules) uses it
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating the compute stream");
  check(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking), "creating the copy stream");
  check(cublasCreate(&cublas_), "cublasCreate");
  check(cublasSetStream(cublas_, stream_), "cublasSetStream");
  // Exact float32 by default: TF32 tensor-core math rounds inputs to 10 mantissa bits.
  check(cublasSetMathMode(cublas_, allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
#ifdef MEMPLAN_HAVE_CUDNN
  check(cudnnCreate(&cudnn_), "cudnnCreate");
  check(cudnnSetStream(cudnn_, stream_), "cudnnSetStream");
#endif
}

Context::~Context() {
  if (scratch_) (void)cudaFree(scratch_);
#ifdef MEMPLAN_HAVE_CUDNN
  if (cudnn_) (void)cudnnDestroy(cudnn_);
#endif
  if (cublas_) (void)cublasDestroy(cublas_);
  if (copy_stream_) (void)cudaStreamDestroy(copy_stream_);
  if (stream_) (void)cudaStreamDestroy(stream_);
}

void* Context::scratch(std::size_t bytes) {
  if (bytes <= scratch_bytes_) return scratch_;
  if (scratch_) check(cudaFree(scratch_), "freeing the kernels' scratch");
  scratch_ = nullptr;
  scratch_bytes_ = 0;
  check(cudaMalloc(&scratch_, bytes), "allocating " + std::to_string(bytes) + " bytes of kernels' scratch");
  scratch_bytes_ = bytes;
  return scratch_;
}

void Context::synchronize() const {
  check(cudaStreamSynchronize(copy_stream_), "synchronizing the copy stream");
  check(cudaStreamSynchronize(stream_), "synchronizing the compute stream");
}

}  // namespace memplan::runtime::cuda
