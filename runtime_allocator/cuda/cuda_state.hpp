// Internal state shared by the CUDA executor and its op implementations (not installed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "analysis/graph.hpp"
#include "analysis/tensor_index.hpp"
#include "runtime_allocator/backend.hpp"
#include "runtime_allocator/cuda/cuda_context.hpp"
#include "runtime_allocator/cuda/fused_kernel.hpp"
#include "runtime_allocator/cuda/kernels.hpp"
#include "runtime_allocator/cuda/kernels_layers.hpp"

namespace memplan::runtime::cuda {

struct ExecState {
  const analysis::Graph& g;
  Context& ctx;
  FusedKernelCache& fused;
  std::vector<std::byte*> ptr;  // per tensor: device (or pinned host) address
  std::vector<std::byte*> scratch;             // per op: its workspace (the plan's scratch region), or nullptr
  std::vector<std::uint64_t> scratch_bytes;    // per op: bytes there
  std::vector<std::shared_ptr<void>> prepared;  // per op: state an op prepares on its first run (cuDNN
                                                // descriptors and algorithm), owned by this executor

  const analysis::Tensor& tensor(analysis::TensorId t) const { return g.tensors[t]; }
  std::vector<std::int64_t> dims(analysis::TensorId t) const { return g.tensors[t].shape(); }
  float* f32(analysis::TensorId t) const { return reinterpret_cast<float*>(ptr[t]); }
  analysis::OpId id_of(const analysis::Op& op) const { return static_cast<analysis::OpId>(&op - g.ops.data()); }
};

// Shape helpers shared by the op files (cuda_ops.cpp).
using analysis::broadcast_strides;  // the one copy of the index helpers: analysis/tensor_index.hpp
using analysis::contiguous_strides;
using analysis::dims_product;
int elem_bytes(const ExecState& s, analysis::TensorId t);
// ErrorKind::unsupported: "op 'name' (Type) on the CUDA backend: <what>".
[[noreturn]] void unsupported(const analysis::Op& op, const std::string& what);
// Copies `dims` elements of `eb` bytes from src (strides src_strides) to dst (strides dst_strides) on the
// compute stream; ErrorKind::unsupported naming `op` above rank 8.
void copy_region(ExecState& s, const analysis::Op& op, int eb, const std::vector<std::int64_t>& dims, const void* src,
                 const std::vector<std::int64_t>& src_strides, void* dst, const std::vector<std::int64_t>& dst_strides);
// `axis` in [-rank, rank) as an index; ErrorKind::shape naming the op otherwise.
std::size_t norm_axis(std::int64_t axis, std::size_t rank, const analysis::Op& op);
// v as a cuBLAS/cuDNN int; ErrorKind::unsupported naming the op when it does not fit (cuda_dnn.cpp).
int as_int(std::int64_t v, const analysis::Op& op);
// Reduces tensor `in` over the axes where `reduced` is true into `out` (the kept axes in order), times scale.
void reduce_axes(ExecState& s, const analysis::Op& op, analysis::TensorId in, analysis::TensorId out,
                 const std::vector<bool>& reduced, ReduceSpec::Kind kind, float scale);

// bf16 / f16 (cuda_half.cpp).
bool is_half(analysis::DType d) noexcept;  // bf16 or f16
// The expression of an elementwise ONNX op (Add, Relu, Cast, ...) whose tensors are float32, bf16 or f16 with at least
// one 16-bit one, as elementwise_expr gives it for float32 tensors; nullopt otherwise. The generated kernel loads and
// stores each tensor in its dtype and computes in float32 (a Cast between float dtypes is its identity).
std::optional<analysis::FusedExpr> half_elementwise_expr(const analysis::Graph& g, const analysis::Op& op);
// Empty when every tensor of an elementwise op is float32, bf16 or f16, else which one is not.
std::string elementwise_dtype_reason(const analysis::Graph& g, const analysis::Op& op);
// Empty when input 0 is float32, bf16 or f16 and every other tensor of op has its dtype (cuBLAS/cuDNN ops), else why.
std::string same_float_dtype_reason(const analysis::Graph& g, const analysis::Op& op);
// The FloatStorage of dtype d for the hand-written kernels; ErrorKind::unsupported naming op for a non-float dtype.
FloatStorage float_storage(const analysis::Op& op, analysis::DType d);
// Ops with 16-bit data beside float32 parameters (BatchNorm) or int64 indices (MaxPool): empty when input 0 is float32,
// bf16 or f16, the inputs `data_in` and outputs `data_out` (positions; absent ones pass) have its dtype, and the inputs
// `f32_in` and outputs `f32_out` are float32; else which one is not.
std::string mixed_dtype_reason(const analysis::Graph& g, const analysis::Op& op, std::initializer_list<int> data_in,
                               std::initializer_list<int> data_out, std::initializer_list<int> f32_in = {},
                               std::initializer_list<int> f32_out = {});
// CUDA_R_32F, CUDA_R_16BF, CUDA_R_16F; ErrorKind::unsupported for other dtypes.
cudaDataType_t blas_data_type(analysis::DType d);
// One cuBLAS call in its column-major terms: C = alpha op(A) op(B) + beta C, `count` products spaced by the strides
// (elements; 0: shared).
struct BlasGemm {
  bool ta = false, tb = false;
  std::int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0, count = 1;
  float alpha = 1.0f, beta = 0.0f;
};
// Runs g with A, B and C of dtype dt: float32 through cublasSgemm (the context's math mode: exact unless TF32 is
// allowed), bf16/f16 through cublasGemmEx with CUBLAS_COMPUTE_32F (float32 accumulation, tensor cores).
void blas_gemm(ExecState& s, const analysis::Op& op, analysis::DType dt, const BlasGemm& g, const void* a, const void* b, void* c);
// p advanced by `elements` of `elem_bytes` bytes.
inline const std::byte* advance(const void* p, std::int64_t elements, int elem_bytes) {
  return static_cast<const std::byte*>(p) + elements * elem_bytes;
}
inline std::byte* advance(void* p, std::int64_t elements, int elem_bytes) { return static_cast<std::byte*>(p) + elements * elem_bytes; }

// One CUDA kernel of the table keyed by the op registry's ids (cuda_ops.cpp). Ops that the fused
// elementwise path runs (planner::elementwise_expr) need no entry.
using CudaKernelFn = void (*)(ExecState& s, const analysis::Op& op);
// Beyond the constraints: empty when the kernel runs op as shaped in g, else why not (attributes, head dims).
using CudaReasonFn = std::string (*)(const analysis::Graph& g, const analysis::Op& op);
struct CudaKernel {
  CudaKernelFn fn = nullptr;
  bool alias_safe = false;  // reads element i before writing element i: an output may share an input's bytes
  bool cudnn = false;       // needs cuDNN (absent from the table when built without it)
  KernelConstraints accepts{};
  CudaReasonFn reason = nullptr;
};
// Null when the table has no kernel for op's type.
const CudaKernel* cuda_kernel(const analysis::Op& op);
// The table's ids, sorted.
std::vector<analysis::OpTypeId> registered_cuda_kernels();

// Runs one compute op (not SwapOut/SwapIn) on ctx.stream(): the fused elementwise path, else the table.
void run_op(ExecState& s, analysis::OpId op);
// Workspace bytes of the algorithm cuDNN ranks first for op (a convolution; at most 256 MiB), 0 for
// the others: what the executor allocates beside the arena when asked to ignore planned scratch.
std::uint64_t op_workspace_bytes(ExecState& s, analysis::OpId op);

// The ops implemented with cuBLAS and cuDNN (cuda_dnn.cpp); false when `op` is none of them.
bool run_dnn_op(ExecState& s, const analysis::Op& op);

// The training ops of domain memplan (cuda_training_ops.cpp); false when `op` is none of them.
bool run_training_op(ExecState& s, const analysis::Op& op);
// MatMulGradA (dA = dY B^T) or MatMulGradB (dB = A^T dY) through cuBLAS, summed over broadcast batches.
void run_matmul_grad(ExecState& s, const analysis::Op& op, bool grad_a);
// memplan MatMulT through cuBLAS with op flags: runtime_allocator/kernels/matmul_plan.hpp's calls (cuda_blas_grad.cpp).
void run_matmul_t(ExecState& s, const analysis::Op& op);
// ConvGradInput and ConvGradWeight through cuDNN (cuda_dnn.cpp); false when `op` is neither.
bool run_dnn_grad_op(ExecState& s, const analysis::Op& op);
// BatchNormTraining/Grad, AveragePoolGrad, SliceGrad, GatherGrad, SplitGrad, and DropoutGrad/WhereGrad with bool
// masks (cuda_training_layers.cpp); false when `op` is none of them.
bool run_layer_training_op(ExecState& s, const analysis::Op& op);
// The window of a pool (or its gradient) from the pool's input x to its output y, as the CPU kernels compute it
// (cpu::window: pads, auto_pad, ceil_mode output sizes, dilations, 1-D as 2-D; cuda_training_layers.cpp).
AvgPoolGeometry pool_window(const ExecState& s, const analysis::Op& op, analysis::TensorId x, analysis::TensorId y);
// memplan RMSNormalization and RMSNormGrad, InstanceNormalization, GroupNormalization and GroupNormGrad
// (cuda_norms.cpp); false for the others.
bool run_norm_op(ExecState& s, const analysis::Op& op);
// memplan CrossEntropyLoss, CrossEntropyLossGrad, SumLoss and SumLossGrad (cuda_loss.cpp); false for the others.
bool run_loss_op(ExecState& s, const analysis::Op& op);
// memplan::FusedAttention and FusedAttentionGrad (cuda_attention.cpp), and what they do not support.
void run_fused_attention(ExecState& s, const analysis::Op& op);
std::string attention_unsupported_reason(const analysis::Graph& g, const analysis::Op& op);
// ONNX ops of training graphs without a library kernel: Dropout (deterministic in training mode), Where, IsNaN,
// Tile, Shape, ConstantOfShape, ReduceProd, ReduceSumSquare (cuda_training_layers.cpp); false for the others.
bool run_extra_op(ExecState& s, const analysis::Op& op);

}  // namespace memplan::runtime::cuda
