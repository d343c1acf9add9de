// Internal to the CPU kernels: the op table, numpy broadcasting loops and attribute helpers.
#pragma once

#include <array>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "analysis/tensor_index.hpp"
#include "runtime_allocator/backend.hpp"
#include "runtime_allocator/kernels/conv_window.hpp"

namespace memplan::runtime::cpu {

using analysis::DType;
using analysis::Op;
using Refs = std::vector<TensorRef>;
using KernelFn = void (*)(const Op& op, const Refs& in, const Refs& out);
inline constexpr DTypeMask kLowFloat = dtype_bit(DType::bf16) | dtype_bit(DType::f16);

struct Kernel {
  KernelFn fn = nullptr;
  bool alias_safe = false;  // correct when an output shares the bytes of a same-shaped input
  KernelConstraints accepts{};  // float32 input 0 of any rank unless said otherwise
  bool native_low_precision = false;  // reads and writes bf16/f16 itself (Cast); others run widened
};
// The CPU kernels by op registry id. Keys given to `operator[]` name the op as the op type for the
// default ONNX domain, "memplan::<type>" for memplan's own ops; an op the registry does not know fails
// there (ErrorKind::unsupported naming it).
class KernelTable {
 public:
  Kernel& operator[](std::string_view key) { return table_[kernel_op_id(key)]; }
  const Kernel* find(analysis::OpTypeId id) const {
    auto it = table_.find(id);
    return it == table_.end() ? nullptr : &it->second;
  }
  std::vector<analysis::OpTypeId> ids() const {
    std::vector<analysis::OpTypeId> v;
    for (const auto& [id, k] : table_) v.push_back(id);
    return v;
  }

 private:
  std::map<analysis::OpTypeId, Kernel> table_;
};

// The ids of the CPU table, sorted (registered_kernels("cpu")).
std::vector<analysis::OpTypeId> registered_cpu_kernels();
// What the CPU kernel of op type `id` accepts (16-bit floats included where it runs them widened); empty: no kernel.
std::optional<KernelConstraints> cpu_kernel_constraints(analysis::OpTypeId id);

void add_elementwise_kernels(KernelTable& t);
void add_linalg_kernels(KernelTable& t);
void add_conv_kernels(KernelTable& t);
void add_conv_nd_kernels(KernelTable& t);  // Conv, ConvTranspose, ConvGradInput/Weight over 1-3 spatial axes
void add_pool_kernels(KernelTable& t);     // MaxPool, AveragePool, LpPool, GlobalLpPool and pool gradients
void add_reduce_kernels(KernelTable& t);
void add_norm_kernels(KernelTable& t);  // memplan RMSNormalization and RMSNormGrad
void add_shape_kernels(KernelTable& t);
void add_indexing_kernels(KernelTable& t);  // Pad, GatherElements, Range, RandomUniformLike
void add_scatter_kernels(KernelTable& t);   // GatherND, ScatterND, ScatterElements (kernels_scatter.cpp)
void add_resize_kernels(KernelTable& t);    // Resize, Upsample, ResizeGrad (kernels_resize.cpp)
void add_select_kernels(KernelTable& t);    // ArgMax, ArgMin, TopK, Hardmax, MeanVarianceNormalization (kernels_select.cpp)
void add_integer_kernels(KernelTable& t);   // Mod, IsInf, Bitwise*, BitShift, Size (kernels_integer.cpp)
void add_training_kernels(KernelTable& t);
void add_gradient_elementwise_kernels(KernelTable& t);
void add_gradient_layer_kernels(KernelTable& t);
void add_gradient_shape_kernels(KernelTable& t);
void add_loss_scaling_kernels(KernelTable& t);  // AmpUnscale, AmpUpdateScale (fp16 loss scaling)
void add_attention_kernels(KernelTable& t);  // FusedAttention and its gradient
void add_loss_kernels(KernelTable& t);  // CrossEntropyLoss, SumLoss and their gradients
void add_activation_kernels(KernelTable& t);  // ops evaluated through their fused expressions (kernels_activations.cpp)
void add_random_kernels(KernelTable& t);  // RandomNormal(Like), RandomUniform, Bernoulli (kernels_random.cpp)
// Evaluates analysis::build_activation's expression of `op` over float32 inputs (numpy broadcasting).
void run_activation_expression(const Op& op, const Refs& in, const Refs& out);
void add_onnx_legacy_kernels(KernelTable& t);  // Sum, Mean, LRN
void add_group_norm_kernels(KernelTable& t);   // InstanceNormalization, GroupNormalization, GroupNormGrad

// bf16 and f16 (kernels_low_precision.cpp): an op with a bf16/f16 input or output runs its f32 kernel on f32
// copies of those inputs and outputs; each output is then rounded to nearest even into its own dtype. So a
// kernel computes in f32 as PyTorch's bf16 kernels do internally (opmath), rounding once per op output.
bool is_low_precision(const TensorRef& t);
void widen(const TensorRef& from, float* to);     // bf16/f16 -> f32
void narrow(const float* from, const TensorRef& to);  // f32 -> bf16/f16, round to nearest even
void run_widened(KernelFn fn, const Op& op, const Refs& in, const Refs& out);

[[noreturn]] void unsupported(const Op& op, const std::string& what);
std::int64_t normalize_axis(const Op& op, std::int64_t axis, std::size_t rank);
// The input must be present (ErrorKind::unsupported naming the op and input otherwise).
const TensorRef& required(const Op& op, const Refs& in, std::size_t i);
// Values of a small int64/int32 tensor (shape arguments: axes, starts, split sizes).
std::vector<std::int64_t> int_values(const Op& op, const TensorRef& t);
// A float scalar input (Clip's min and max), `fallback` when absent.
float scalar_value(const Op& op, const Refs& in, std::size_t i, float fallback);
// Copies `bytes` unless source and destination already coincide (a view bound over its input).
void copy_if_moved(std::byte* dst, const std::byte* src, std::uint64_t bytes);

// The window of a Conv, pool or gradient from its pads or auto_pad attributes (conv_window.hpp): x is the op's
// input (or, for a gradient, its output dX) and y the output (or dY).
Window window(const Op& op, const TensorRef& x, const TensorRef& y, std::vector<std::int64_t> kernel);

// C[M,N] (row-major) += A * B with A[i,k] = a[i*a_row + k*a_col] and B[k,j] = b[k*b_row + j*b_col];
// k is summed in order, so results are deterministic.
void gemm_acc(std::int64_t M, std::int64_t N, std::int64_t K, const float* a, std::int64_t a_row, std::int64_t a_col,
              const float* b, std::int64_t b_row, std::int64_t b_col, float* c);

// Strides, broadcasting and dims products: the one copy in analysis/tensor_index.hpp.
using analysis::broadcast_strides;
using analysis::contiguous_strides;
using analysis::dims_product;

inline constexpr std::size_t kMaxOperands = 16;
using Offsets = std::array<std::int64_t, kMaxOperands>;

// Calls f(i, offsets) for every element i of `out` in order; offsets[k] indexes operand k, read with
// `strides[k]` (one element stride per output dim).
template <class F>
void strided_loop(const std::vector<std::int64_t>& out, const std::vector<std::vector<std::int64_t>>& strides, F&& f) {
  const std::size_t r = out.size(), n = strides.size();
  const std::int64_t total = dims_product(out);
  if (total == 0) return;
  const std::int64_t inner = r ? out[r - 1] : 1;
  Offsets base{}, step{}, p{};
  for (std::size_t k = 0; k < n; ++k) step[k] = r ? strides[k][r - 1] : 0;
  std::vector<std::int64_t> idx(r, 0);
  for (std::int64_t o = 0; o < total; o += inner) {
    p = base;
    for (std::int64_t j = 0; j < inner; ++j) {
      f(o + j, p);
      for (std::size_t k = 0; k < n; ++k) p[k] += step[k];
    }
    for (std::size_t d = r > 0 ? r - 1 : 0; d-- > 0;) {
      ++idx[d];
      for (std::size_t k = 0; k < n; ++k) base[k] += strides[k][d];
      if (idx[d] < out[d]) break;
      for (std::size_t k = 0; k < n; ++k) base[k] -= strides[k][d] * out[d];
      idx[d] = 0;
    }
  }
}

template <class F>
void broadcast_loop(const std::vector<std::int64_t>& out, const std::vector<const std::vector<std::int64_t>*>& ins, F&& f) {
  std::vector<std::vector<std::int64_t>> strides;
  for (const auto* s : ins) strides.push_back(broadcast_strides(*s, out));
  strided_loop(out, strides, f);
}

// Calls f(T{}) with T the C++ type of `dtype` (float, double, int64, int32, bool, uint8).
template <class F>
void visit_dtype(const Op& op, DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::i64: return f(std::int64_t{});
    case DType::i32: return f(std::int32_t{});
    case DType::boolean: return f(bool{});
    case DType::u8: return f(std::uint8_t{});
    default: unsupported(op, std::string("dtype ") + analysis::dtype_name(dtype));
  }
}

}  // namespace memplan::runtime::cpu
