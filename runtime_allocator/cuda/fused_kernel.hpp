// Fused elementwise kernels: CUDA source generated from a FusedExpr, compiled once by NVRTC, launched.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "analysis/fused_expr.hpp"

namespace memplan::runtime::cuda {

// How each operand is read: element i of the output reads operand element offset(i) under numpy
// broadcasting. `full` operands have the output's shape, `scalar` ones a single element.
struct OperandLayout {
  enum class Kind : std::uint8_t { full, scalar, strided };
  Kind kind = Kind::full;
  std::vector<std::int64_t> strides;  // per output dim, in elements (0 where broadcast); for strided
};

struct FusedSignature {
  analysis::FusedExpr expr;
  std::vector<std::int64_t> out_dims;
  std::vector<OperandLayout> operands;  // one per expr.num_inputs
  // When set, the statements of the element function (operands x0..xN-1, ends in `return`) in place of expr's nodes:
  // gradients and optimizer steps that are no FusedExpr reuse the same generator.
  std::string body;
  // Storage dtypes: f32, bf16 or f16, and bool for operands (read as 0 or 1; ErrorKind::unsupported otherwise);
  // empty operand_dtypes means all f32. The
  // arithmetic is float32 either way: 16-bit operands are widened as they load, the result rounded to nearest even
  // as it is stored.
  std::vector<analysis::DType> operand_dtypes;
  analysis::DType out_dtype = analysis::DType::f32;
};

// True for the dtypes the generated kernels load and store: f32, bf16, f16.
bool fused_storage_dtype(analysis::DType d) noexcept;

// Derives the operand layouts from the operand shapes and the output shape (numpy broadcasting).
FusedSignature make_signature(const analysis::FusedExpr& expr, const std::vector<std::vector<std::int64_t>>& operand_dims,
                              const std::vector<std::int64_t>& out_dims);

// A CUDA float literal that reads back as exactly the float32 value of v (NaN and infinities too).
std::string float_literal(double v);

// A signature whose element function is `body` over `operand_dims.size()` operands (every one read).
FusedSignature make_body_signature(std::string body, const std::vector<std::vector<std::int64_t>>& operand_dims,
                                   const std::vector<std::int64_t>& out_dims);

// The CUDA source of the kernel `memplan_fused` for a signature (deterministic text). With every dtype f32 the
// text is that of a float32-only generator; 16-bit operands and results convert through the bit-exact helpers the
// source defines itself (no header, so NVRTC needs no include path).
std::string fused_kernel_source(const FusedSignature& sig);

// Compiles `source` with NVRTC for `arch` ("--gpu-architecture=sm_90") and returns the CUBIN; ErrorKind::runtime
// with NVRTC's log when it does not compile. Needs no device (host tests compile generated sources with it).
std::string nvrtc_compile(const std::string& source, const std::string& arch);

// Compiles kernels with NVRTC for the current device and keeps them, keyed by source text, for the life
// of the cache (one per process in practice: the executor and the benchmark each own one).
class FusedKernelCache {
 public:
  FusedKernelCache();
  FusedKernelCache(const FusedKernelCache&) = delete;
  FusedKernelCache& operator=(const FusedKernelCache&) = delete;
  ~FusedKernelCache();

  // Launches out[i] = expr(operands...) for every i < product(out_dims) on `stream`; operand k and out hold elements
  // of sig's dtypes.
  void launch(const FusedSignature& sig, const std::vector<const void*>& operands, void* out, cudaStream_t stream);
  void launch(const FusedSignature& sig, const std::vector<const float*>& operands, float* out, cudaStream_t stream) {
    launch(sig, std::vector<const void*>(operands.begin(), operands.end()), static_cast<void*>(out), stream);
  }
  std::size_t compiled_count() const noexcept { return modules_.size(); }
  double compile_seconds() const noexcept { return compile_seconds_; }

 private:
  cudaKernel_t get(const std::string& source);
  // Runtime-API libraries (no link to the driver library, so binaries load on machines without one).
  std::map<std::string, std::pair<cudaLibrary_t, cudaKernel_t>> modules_;
  std::unordered_map<std::string, cudaKernel_t> by_signature_;  // signature bytes -> kernel: no source text per launch
  std::string arch_;
  double compile_seconds_ = 0.0;
};

}  // namespace memplan::runtime::cuda
