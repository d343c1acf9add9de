// bf16 / f16 on the CUDA backend, shared by the op files: which float dtypes an op's tensors hold, the elementwise
// expression of an ONNX op over 16-bit tensors (computed in float32, stored in the tensors' dtypes), and the cuBLAS
// products of any of the three float dtypes (16-bit ones with float32 accumulation on tensor cores).
#include <algorithm>

#include "analysis/fused_expr.hpp"
#include "runtime_allocator/cuda/cuda_state.hpp"

namespace memplan::runtime::cuda {

using analysis::DType;
using analysis::Graph;
using analysis::kNoTensor;
using analysis::Op;
using analysis::TensorId;

bool is_half(DType d) noexcept { return d == DType::bf16 || d == DType::f16; }

std::optional<analysis::FusedExpr> half_elementwise_expr(const Graph& g, const Op& op) {
  if (!op.domain.empty() && op.domain != "ai.onnx") return std::nullopt;
  const analysis::OpInfo* info = analysis::op_registry().find(op);  // cheap filter: products, copies, norms are not
  if (!info || info->kind != analysis::OpKind::elementwise) return std::nullopt;
  bool any_half = false;
  for (const auto* list : {&op.inputs, &op.outputs})
    for (TensorId t : *list) {
      if (t == kNoTensor) continue;
      const DType d = g.tensors[t].dtype;
      if (!fused_storage_dtype(d) || !g.tensors[t].shape_known()) return std::nullopt;
      any_half = any_half || is_half(d);
    }
  if (!any_half) return std::nullopt;
  // The same op over float32 tensors of the same shapes and constants: its expression is the one to compute.
  return analysis::float32_expr(g, op);
}

std::string elementwise_dtype_reason(const Graph& g, const Op& op) {
  for (const auto* list : {&op.inputs, &op.outputs})
    for (TensorId t : *list)
      if (t != kNoTensor && !fused_storage_dtype(g.tensors[t].dtype))
        return std::string("dtype ") + analysis::dtype_name(g.tensors[t].dtype) + " of tensor '" + g.tensors[t].name +
               "' (elementwise kernels load float32, bfloat16 and float16)";
  return {};
}

std::string same_float_dtype_reason(const Graph& g, const Op& op) {
  if (op.inputs.empty() || op.inputs[0] == kNoTensor) return {};
  const DType d = g.tensors[op.inputs[0]].dtype;
  if (d != DType::f32 && !is_half(d)) return std::string("dtype ") + analysis::dtype_name(d) + " of input 0";
  for (const auto* list : {&op.inputs, &op.outputs})
    for (TensorId t : *list)
      if (t != kNoTensor && g.tensors[t].dtype != d && g.tensors[t].dtype != DType::undefined)
        return std::string("tensor '") + g.tensors[t].name + "' of dtype " + analysis::dtype_name(g.tensors[t].dtype) +
               " beside input 0 of dtype " + analysis::dtype_name(d) + " (one float dtype for every operand)";
  return {};
}

FloatStorage float_storage(const Op& op, DType d) {
  switch (d) {
    case DType::f32: return FloatStorage::f32;
    case DType::bf16: return FloatStorage::bf16;
    case DType::f16: return FloatStorage::f16;
    default: unsupported(op, std::string("data of dtype ") + analysis::dtype_name(d) + " (float32, bfloat16 or float16)");
  }
}

std::string mixed_dtype_reason(const Graph& g, const Op& op, std::initializer_list<int> data_in, std::initializer_list<int> data_out,
                               std::initializer_list<int> f32_in, std::initializer_list<int> f32_out) {
  if (op.inputs.empty() || op.inputs[0] == kNoTensor) return "input 0 is required";
  const DType d = g.tensors[op.inputs[0]].dtype;
  if (d != DType::f32 && !is_half(d)) return std::string("dtype ") + analysis::dtype_name(d) + " of input 0";
  // The first tensor of `positions` (inputs or outputs) whose dtype is not `want`, as "input 3 of dtype ...".
  auto first_other = [&](const std::vector<TensorId>& list, std::initializer_list<int> positions, DType want, const char* what) {
    for (int i : positions) {
      const auto k = static_cast<std::size_t>(i);
      const TensorId t = k < list.size() ? list[k] : kNoTensor;
      if (t != kNoTensor && g.tensors[t].dtype != want)
        return std::string(what) + " " + std::to_string(i) + " of dtype " + analysis::dtype_name(g.tensors[t].dtype) + " (" +
               analysis::dtype_name(want) + " expected)";
    }
    return std::string();
  };
  for (const std::string& why : {first_other(op.inputs, data_in, d, "input"), first_other(op.outputs, data_out, d, "output"),
                                 first_other(op.inputs, f32_in, DType::f32, "input"),
                                 first_other(op.outputs, f32_out, DType::f32, "output")})
    if (!why.empty()) return why;
  return {};
}

cudaDataType_t blas_data_type(DType d) {
  switch (d) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default: fail(ErrorKind::unsupported, std::string("cuBLAS data of dtype ") + analysis::dtype_name(d));
  }
}

void blas_gemm(ExecState& s, const Op& op, DType dt, const BlasGemm& g, const void* a, const void* b, void* c) {
  const auto opa = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const std::string what = op.type + " '" + op.name + "'";
  const int m = as_int(g.m, op), n = as_int(g.n, op), k = as_int(g.k, op), lda = as_int(g.lda, op), ldb = as_int(g.ldb, op),
            ldc = as_int(g.ldc, op);
  if (dt == DType::f32) {  // the context's math mode: exact float32 unless TF32 was asked for
    const auto *fa = static_cast<const float*>(a), *fb = static_cast<const float*>(b);
    auto* fc = static_cast<float*>(c);
    if (g.count == 1)
      check(cublasSgemm(s.ctx.cublas(), opa, opb, m, n, k, &g.alpha, fa, lda, fb, ldb, &g.beta, fc, ldc), what);
    else
      check(cublasSgemmStridedBatched(s.ctx.cublas(), opa, opb, m, n, k, &g.alpha, fa, lda, g.stride_a, fb, ldb, g.stride_b,
                                      &g.beta, fc, ldc, g.stride_c, as_int(g.count, op)),
            what);
    return;
  }
  const cudaDataType_t t = blas_data_type(dt);  // 16-bit storage, float32 accumulation (tensor cores)
  if (g.count == 1)
    check(cublasGemmEx(s.ctx.cublas(), opa, opb, m, n, k, &g.alpha, a, t, lda, b, t, ldb, &g.beta, c, t, ldc, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT),
          what);
  else
    check(cublasGemmStridedBatchedEx(s.ctx.cublas(), opa, opb, m, n, k, &g.alpha, a, t, lda, g.stride_a, b, t, ldb, g.stride_b,
                                     &g.beta, c, t, ldc, g.stride_c, as_int(g.count, op), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          what);
}

}  // namespace memplan::runtime::cuda
