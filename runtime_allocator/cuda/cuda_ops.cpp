// The CUDA executor's forward ops other than cuBLAS/cuDNN ones: elementwise (NVRTC), data movement, softmax, layer
// norm, reductions; the dispatch of every op.
#include <algorithm>
#include <map>
#include <numeric>

#include "analysis/fused_expr.hpp"
#include "runtime_allocator/cuda/cuda_state.hpp"
#include "runtime_allocator/cuda/kernels.hpp"
#include "runtime_allocator/cuda/kernels_misc.hpp"
#include "runtime_allocator/cuda/kernels_pad_random.hpp"
#include "runtime_allocator/cuda/kernels_random.hpp"
#include "runtime_allocator/cuda/kernels_resize.hpp"
#include "runtime_allocator/cuda/kernels_scatter.hpp"
#include "runtime_allocator/cuda/kernels_select.hpp"

namespace memplan::runtime::cuda {

using analysis::DType;
using analysis::kNoTensor;
using analysis::Op;
using analysis::OpId;
using analysis::TensorId;

std::size_t norm_axis(std::int64_t axis, std::size_t rank, const Op& op) {
  const auto r = static_cast<std::int64_t>(rank);
  if (axis < -r || axis >= std::max<std::int64_t>(r, 1)) fail(ErrorKind::shape, "op '" + op.name + "': axis out of range");
  return static_cast<std::size_t>(axis < 0 ? axis + r : axis);
}

[[noreturn]] void unsupported(const Op& op, const std::string& what) {
  fail(ErrorKind::unsupported, "op '" + op.name + "' (" + op.type + ") on the CUDA backend: " + what);
}

int elem_bytes(const ExecState& s, TensorId t) { return static_cast<int>(analysis::element_bytes(s.tensor(t).dtype)); }

void copy_region(ExecState& s, const Op& op, int eb, const std::vector<std::int64_t>& dims, const void* src,
                 const std::vector<std::int64_t>& src_strides, void* dst, const std::vector<std::int64_t>& dst_strides) {
  if (dims.size() > static_cast<std::size_t>(kMaxRank))
    fail(ErrorKind::unsupported, "op '" + op.name + "' (" + op.type + "): a copy of rank above 8");
  StridedCopy c;
  c.rank = static_cast<int>(dims.size());
  c.elem_bytes = eb;
  for (std::size_t k = 0; k < dims.size(); ++k) {
    c.dims[k] = dims[k];
    c.src_strides[k] = src_strides[k];
    c.dst_strides[k] = dst_strides[k];
  }
  c.src = src;
  c.dst = dst;
  strided_copy(c, s.ctx.stream());
}

namespace {

void need_f32(const ExecState& s, const Op& op) {
  for (TensorId t : op.inputs)
    if (t != kNoTensor && s.tensor(t).dtype != analysis::DType::f32)
      fail(ErrorKind::unsupported, "op '" + op.name + "' (" + op.type + "): the CUDA backend computes float32 only");
}

std::vector<std::int64_t> const_ints(const ExecState& s, const Op& op, std::size_t input, const char* attr) {
  if (op.attr(attr)) return op.attr_ints(attr);
  const TensorId t = op.input(input);
  if (t == kNoTensor) return {};
  if (!s.tensor(t).data) fail(ErrorKind::unsupported, "op '" + op.name + "': input " + std::to_string(input) + " must be a constant");
  return s.tensor(t).data->as_int64();
}

// Each operand and the result load and store in their own dtype (float32, bf16 or f16); the arithmetic is float32.
void run_elementwise(ExecState& s, const Op& op, const analysis::FusedExpr& e) {
  std::vector<std::vector<std::int64_t>> dims;
  std::vector<const void*> ptrs;
  std::vector<DType> dtypes;
  for (std::uint32_t k = 0; k < e.num_inputs; ++k) {
    const TensorId t = op.input(k);
    dims.push_back(t == kNoTensor ? std::vector<std::int64_t>{1} : s.dims(t));
    ptrs.push_back(t == kNoTensor ? nullptr : s.ptr[t]);
    dtypes.push_back(t == kNoTensor ? DType::f32 : s.tensor(t).dtype);
  }
  auto sig = make_signature(e, dims, s.dims(op.outputs[0]));
  sig.operand_dtypes = std::move(dtypes);
  sig.out_dtype = s.tensor(op.outputs[0]).dtype;
  s.fused.launch(sig, ptrs, s.ptr[op.outputs[0]], s.ctx.stream());
}

void run_view(ExecState& s, const Op& op) {
  const TensorId in = op.inputs[0], out = op.outputs[0];
  if (s.ptr[in] != s.ptr[out])
    check(cudaMemcpyAsync(s.ptr[out], s.ptr[in], s.tensor(out).bytes(), cudaMemcpyDeviceToDevice, s.ctx.stream()),
          "copy for op '" + op.name + "'");
}

void run_transpose(ExecState& s, const Op& op) {
  const auto in = s.dims(op.inputs[0]);
  std::vector<std::int64_t> perm = op.attr_ints("perm");
  if (perm.empty())
    for (std::size_t i = in.size(); i-- > 0;) perm.push_back(static_cast<std::int64_t>(i));
  const auto in_strides = contiguous_strides(in);
  std::vector<std::int64_t> dims, src;
  for (auto p : perm) {
    dims.push_back(in[static_cast<std::size_t>(p)]);
    src.push_back(in_strides[static_cast<std::size_t>(p)]);
  }
  copy_region(s, op, elem_bytes(s, op.inputs[0]), dims, s.ptr[op.inputs[0]], src, s.ptr[op.outputs[0]], contiguous_strides(dims));
}

// Split and Concat: one strided copy per part along `axis`.
void run_split_concat(ExecState& s, const Op& op, bool split) {
  const TensorId whole = split ? op.inputs[0] : op.outputs[0];
  const auto wd = s.dims(whole);
  const std::size_t axis = norm_axis(op.attr_int("axis", 0), wd.size(), op);
  const auto ws = contiguous_strides(wd);
  const int eb = elem_bytes(s, whole);
  std::int64_t at = 0;
  for (TensorId part : split ? op.outputs : op.inputs) {
    if (part == kNoTensor) continue;
    const auto pd = s.dims(part);
    std::byte* base = s.ptr[whole] + at * ws[axis] * eb;
    if (split) copy_region(s, op, eb, pd, base, ws, s.ptr[part], contiguous_strides(pd));
    else copy_region(s, op, eb, pd, s.ptr[part], contiguous_strides(pd), base, ws);
    at += pd[axis];
  }
}

void run_slice(ExecState& s, const Op& op) {
  const auto in = s.dims(op.inputs[0]);
  const auto starts = const_ints(s, op, 1, "starts"), ends = const_ints(s, op, 2, "ends");
  auto axes = const_ints(s, op, 3, "axes"), steps = const_ints(s, op, 4, "steps");
  if (axes.empty())
    for (std::size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<std::int64_t>(i));
  const auto ins = contiguous_strides(in);
  std::vector<std::int64_t> src = ins;
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < axes.size(); ++i) {
    const std::size_t a = norm_axis(axes[i], in.size(), op);
    const std::int64_t step = steps.empty() ? 1 : steps[i], d = in[a];
    std::int64_t b = starts[i] < 0 ? starts[i] + d : starts[i];
    b = step > 0 ? std::clamp<std::int64_t>(b, 0, d) : std::clamp<std::int64_t>(b, 0, d - 1);
    offset += b * ins[a];
    src[a] = ins[a] * step;
  }
  const auto out = s.dims(op.outputs[0]);
  const int eb = elem_bytes(s, op.inputs[0]);
  copy_region(s, op, eb, out, s.ptr[op.inputs[0]] + offset * eb, src, s.ptr[op.outputs[0]], contiguous_strides(out));
}

void run_expand(ExecState& s, const Op& op) {
  const auto in = s.dims(op.inputs[0]), out = s.dims(op.outputs[0]);
  copy_region(s, op, elem_bytes(s, op.inputs[0]), out, s.ptr[op.inputs[0]], broadcast_strides(in, out), s.ptr[op.outputs[0]],
              contiguous_strides(out));
}

void run_gather(ExecState& s, const Op& op) {
  const auto data = s.dims(op.inputs[0]);
  if (s.tensor(op.inputs[1]).dtype != analysis::DType::i64) fail(ErrorKind::unsupported, "op '" + op.name + "': int64 indices only");
  const std::size_t axis = norm_axis(op.attr_int("axis", 0), data.size(), op);
  const std::int64_t count = static_cast<std::int64_t>(s.tensor(op.inputs[1]).element_count());
  gather(s.ptr[op.inputs[0]], reinterpret_cast<const std::int64_t*>(s.ptr[op.inputs[1]]), s.ptr[op.outputs[0]],
         dims_product(data, 0, axis), data[axis], dims_product(data, axis + 1), count, elem_bytes(s, op.inputs[0]), s.ctx.stream());
}

void run_softmax(ExecState& s, const Op& op, bool log) {
  need_f32(s, op);
  const auto d = s.dims(op.inputs[0]);
  const bool legacy = s.g.opset > 0 && s.g.opset < 13;  // before opset 13 the input is flattened at axis
  const std::size_t axis = norm_axis(op.attr_int("axis", legacy ? 1 : -1), d.size(), op);
  const std::int64_t n = legacy ? dims_product(d, axis) : d[axis], inner = legacy ? 1 : dims_product(d, axis + 1);
  softmax(s.f32(op.inputs[0]), s.f32(op.outputs[0]), dims_product(d, 0, axis), n, inner, log, s.ctx.stream());
}

void run_layer_norm(ExecState& s, const Op& op) {
  need_f32(s, op);
  const auto d = s.dims(op.inputs[0]);
  const std::size_t axis = norm_axis(op.attr_int("axis", -1), d.size(), op);
  const std::int64_t n = dims_product(d, axis);
  for (std::size_t i = 1; i < 3; ++i)
    if (op.input(i) != kNoTensor && static_cast<std::int64_t>(s.tensor(op.input(i)).element_count()) != n)
      fail(ErrorKind::unsupported, "op '" + op.name + "': broadcast LayerNormalization scale/bias");
  auto optional = [&](TensorId t) { return t == kNoTensor ? nullptr : s.f32(t); };
  layer_norm(s.f32(op.inputs[0]), optional(op.input(1)), optional(op.input(2)), s.f32(op.outputs[0]), optional(op.output(1)),
             optional(op.output(2)), dims_product(d, 0, axis), n, static_cast<float>(op.attr_float("epsilon", 1e-5)), s.ctx.stream());
}

void run_reduce(ExecState& s, const Op& op, ReduceSpec::Kind kind, bool global_pool) {
  // float32, bf16 or f16 (float32 sums; reduce_axes checks the dtypes)
  const auto d = s.dims(op.inputs[0]);
  std::vector<bool> reduced(d.size(), false);
  if (global_pool) {
    for (std::size_t k = 2; k < d.size(); ++k) reduced[k] = true;
  } else {
    const auto axes = const_ints(s, op, 1, "axes");
    if (axes.empty() && op.attr_int("noop_with_empty_axes", 0)) return run_view(s, op);
    for (auto a : axes) reduced[norm_axis(a, d.size(), op)] = true;
    if (axes.empty()) reduced.assign(d.size(), true);
  }
  reduce_axes(s, op, op.inputs[0], op.outputs[0], reduced, kind, 1.0f);
}

}  // namespace

void reduce_axes(ExecState& s, const Op& op, TensorId in, TensorId out, const std::vector<bool>& reduced, ReduceSpec::Kind kind,
                 float scale) {
  const auto d = s.dims(in);
  if (d.size() > static_cast<std::size_t>(kMaxRank)) fail(ErrorKind::unsupported, "op '" + op.name + "': rank above 8");
  const auto st = contiguous_strides(d);
  const DType dt = s.tensor(in).dtype;
  if (s.tensor(out).dtype != dt || (dt != DType::f32 && !is_half(dt)))
    unsupported(op, std::string("a reduction from ") + analysis::dtype_name(dt) + " to " + analysis::dtype_name(s.tensor(out).dtype));
  ReduceSpec spec;
  spec.kind = kind;
  spec.scale = scale;
  spec.storage = dt == DType::bf16 ? ReduceSpec::bf16 : dt == DType::f16 ? ReduceSpec::f16 : ReduceSpec::f32;
  for (std::size_t k = 0; k < d.size(); ++k) {
    if (reduced[k]) {
      spec.red_dims[spec.red_rank] = d[k];
      spec.red_strides[spec.red_rank++] = st[k];
    } else {
      spec.out_dims[spec.out_rank] = d[k];
      spec.out_strides[spec.out_rank++] = st[k];
    }
  }
  const int sms = s.ctx.props().multiProcessorCount;
  const std::size_t partial = reduce_partial_floats(spec, sms);
  float* partials = partial ? static_cast<float*>(s.ctx.scratch(partial * sizeof(float))) : nullptr;
  cuda::reduce(s.ptr[in], s.ptr[out], spec, s.ctx.stream(), partials, sms);  // qualified: std::reduce is found by ADL
}

namespace {

// Dropout: any dtype as the identity; training mode (a training_mode input) of float32, bf16 or f16.
std::string dropout_reason(const analysis::Graph& g, const Op& op) {
  const DType d = g.tensors[op.inputs.at(0)].dtype;
  if (op.input(2) == kNoTensor || d == DType::f32 || is_half(d)) return {};
  return std::string("training-mode Dropout of dtype ") + analysis::dtype_name(d);
}

[[noreturn]] void no_implementation(const Op& op) {
  fail(ErrorKind::unsupported,
       "op '" + op.name + "' (" + (op.domain.empty() ? "" : op.domain + ".") + op.type + ") has no CUDA implementation");
}

// The ops implemented in other files, dispatched by their family's function there.
template <bool (*Family)(ExecState&, const Op&)>
void by_family(ExecState& s, const Op& op) {
  if (!Family(s, op)) no_implementation(op);
}

template <ReduceSpec::Kind K, bool kGlobal>
void reduce_op(ExecState& s, const Op& op) { run_reduce(s, op, K, kGlobal); }

constexpr KernelConstraints kAny{kAnyDType};
constexpr KernelConstraints kCopy{kAnyDType, static_cast<std::uint8_t>(kMaxRank)};  // strided copies: rank 8
constexpr KernelConstraints kFloat{kF32};
// Comparisons and Cast (cuda_compare.cpp): float32, int64, int32, bool; logic ops: rank 8 broadcasting.
constexpr KernelConstraints kCompare{kF32 | dtype_bit(DType::i64) | dtype_bit(DType::i32) | kBool, static_cast<std::uint8_t>(kMaxRank)};
constexpr KernelConstraints kInt{dtype_bit(DType::i64) | dtype_bit(DType::i32), static_cast<std::uint8_t>(kMaxRank)};
// ArgMax, ArgMin, TopK (cuda_select.cpp).
constexpr KernelConstraints kSelect{kF32 | dtype_bit(DType::f64) | dtype_bit(DType::i64) | dtype_bit(DType::i32)};
constexpr KernelConstraints kCumSum{kF32 | dtype_bit(DType::f64) | dtype_bit(DType::i64) | dtype_bit(DType::i32)};
// Cast: those and bf16/f16 (casts between float dtypes run as generated elementwise kernels first).
constexpr KernelConstraints kCast{kCompare.dtypes | dtype_bit(DType::bf16) | dtype_bit(DType::f16), kCompare.max_rank};
constexpr KernelConstraints kLogic{kBool, static_cast<std::uint8_t>(kMaxRank)};
// Integer arithmetic; the float32 ops of these types run as generated elementwise kernels.
constexpr KernelConstraints kIntArith{kF32 | dtype_bit(DType::i64) | dtype_bit(DType::i32), static_cast<std::uint8_t>(kMaxRank)};
// bf16 and f16 beside float32 (docs/cuda.md, "bf16 and fp16").
constexpr DTypeMask kHalf = dtype_bit(DType::bf16) | dtype_bit(DType::f16);
// Generated elementwise gradients and optimizer steps: float32, bf16 or f16 operands, bool masks.
constexpr KernelConstraints kGrad{kF32 | kHalf | kBool};
// Float32, bf16 or f16 (reductions with float32 sums, copies by element size).
constexpr KernelConstraints kFloatOrHalf{kF32 | kHalf};
constexpr KernelConstraints kHalfReduce{kF32 | kHalf, static_cast<std::uint8_t>(kMaxRank)};
// cuBLAS / cuDNN products: one float dtype for every operand (same_float_dtype_reason checks all of them).
constexpr KernelConstraints kProduct{kF32 | kHalf};
// Cross-entropy reads float32, bfloat16 or float16 logits (float32 compute).
constexpr KernelConstraints kLogits{kF32 | kHalf};

// bf16/f16 data beside float32 parameters and statistics (cuDNN's mixed batch norm), int64 pool indices.
std::string batch_norm_training_reason(const analysis::Graph& g, const Op& op) {
  return mixed_dtype_reason(g, op, {}, {0}, {1, 2, 3, 4}, {1, 2, 3, 4});
}
std::string batch_norm_grad_reason(const analysis::Graph& g, const Op& op) { return mixed_dtype_reason(g, op, {1}, {0}, {2, 3, 4}, {1, 2}); }
// bf16/f16 data beside float32 scale, bias and statistics (InstanceNormalization, GroupNormalization: cuda_norms.cpp).
std::string instance_norm_reason(const analysis::Graph& g, const Op& op) { return mixed_dtype_reason(g, op, {}, {0}, {1, 2}, {1, 2}); }
std::string pool_reason(const analysis::Graph& g, const Op& op) { return mixed_dtype_reason(g, op, {}, {0}); }
// ReduceMean/Max/Min run on autocast's promote list (ReduceSum on its fp32 one): the output in the data's dtype.
std::string reduce_reason(const analysis::Graph& g, const Op& op) { return mixed_dtype_reason(g, op, {}, {0}); }
std::string max_pool_grad_reason(const analysis::Graph& g, const Op& op) { return mixed_dtype_reason(g, op, {1}, {0}); }

struct Row {
  const char* key;  // op type for the default ONNX domain, "memplan::<type>" for memplan's own ops
  CudaKernel kernel;
};

std::map<analysis::OpTypeId, CudaKernel> build_table() {
  constexpr auto extra = by_family<run_extra_op>;
  constexpr auto dnn = by_family<run_dnn_op>;
  constexpr auto training = by_family<run_training_op>;
  constexpr auto loss = by_family<run_loss_op>;
  const Row rows[] = {
      {"Reshape", {run_view, true, false, kAny}},
      {"Flatten", {run_view, true, false, kAny}},
      {"Squeeze", {run_view, true, false, kAny}},
      {"Unsqueeze", {run_view, true, false, kAny}},
      {"Identity", {run_view, true, false, kAny}},
      {"Transpose", {run_transpose, false, false, kCopy}},
      {"Split", {[](ExecState& s, const Op& op) { run_split_concat(s, op, true); }, false, false, kCopy}},
      {"Concat", {[](ExecState& s, const Op& op) { run_split_concat(s, op, false); }, false, false, kCopy}},
      {"Slice", {run_slice, false, false, kCopy}},
      {"Expand", {run_expand, false, false, kCopy}},
      {"Gather", {run_gather, false, false, kAny}},
      {"Pad", {run_pad, false, false, kCopy}},  // cuda_pad_random.cpp
      {"memplan::PadGrad", {run_pad_grad, false, false, kFloatOrHalf, same_float_dtype_reason}},
      {"RandomUniformLike", {run_random_uniform_like, false, false, kAny}},
      {"RandomNormalLike", {run_random_normal, false, false, kAny}},
      {"RandomNormal", {run_random_normal, false, false, kAny}},
      {"RandomUniform", {run_random_uniform, false, false, kAny}},
      {"Bernoulli", {run_bernoulli, false, false, kAny}},
      {"CumSum", {run_cum_sum, false, false, kCumSum}},
      {"memplan::Roll", {run_roll, false, false, kAny}},  // cuda_pad_random.cpp
      {"GatherElements", {run_gather_elements, false, false, kCopy}},
      {"GatherND", {run_gather_nd, false, false, kAny}},  // cuda_scatter.cpp
      {"ScatterND", {run_scatter_nd, false, false, kAny, scatter_reason}},
      {"ScatterElements", {run_scatter_elements, false, false, kCopy, scatter_reason}},
      {"Resize", {run_resize, false, false, kAny, resize_reason}},  // cuda_resize.cpp
      {"Upsample", {run_resize, false, false, kAny, resize_reason}},
      {"memplan::ResizeGrad", {run_resize_grad, false, false, kFloat}},
      {"ArgMax", {run_arg_max, false, false, kSelect}},  // cuda_select.cpp
      {"ArgMin", {run_arg_max, false, false, kSelect}},
      {"TopK", {run_top_k, false, false, kSelect}},
      {"Size", {run_size, false, false, kAny}},
      {"Range", {run_range, false, false, kSelect}},  // cuda_misc.cpp
      {"NonZero", {run_non_zero, false, false, kAny}},
      {"Trilu", {run_trilu, true, false, kAny}},
      {"IsInf", {run_is_inf, false, false, {kF32 | dtype_bit(DType::f64)}}},
      {"Softmax", {[](ExecState& s, const Op& op) { run_softmax(s, op, false); }, true, false, kFloat}},
      {"LogSoftmax", {[](ExecState& s, const Op& op) { run_softmax(s, op, true); }, true, false, kFloat}},
      {"LayerNormalization", {run_layer_norm, true, false, kFloat}},
      {"ReduceMean", {reduce_op<ReduceSpec::mean, false>, false, false, kHalfReduce, reduce_reason}},
      {"ReduceSum", {reduce_op<ReduceSpec::sum, false>, false, false, kHalfReduce, reduce_reason}},
      {"ReduceMax", {reduce_op<ReduceSpec::max, false>, false, false, kHalfReduce, reduce_reason}},
      {"ReduceMin", {reduce_op<ReduceSpec::min, false>, false, false, kHalfReduce, reduce_reason}},
      {"GlobalAveragePool", {reduce_op<ReduceSpec::mean, true>, false, false, kHalfReduce, same_float_dtype_reason}},
      {"GlobalMaxPool", {reduce_op<ReduceSpec::max, true>, false, false, kHalfReduce, same_float_dtype_reason}},
      {"Dropout", {extra, true, false, kAny, dropout_reason}},
      {"Where", {extra, false, false, {kBool}}},
      {"IsNaN", {extra, false, false, kFloat}},
      {"Tile", {extra, false, false, kAny}},
      {"Shape", {extra, false, false, kAny}},
      {"ConstantOfShape", {extra, false, false, kAny}},
      {"ReduceProd", {extra, false, false, kFloat}},
      {"ReduceSumSquare", {extra, false, false, kFloat}},
      // cuda_compare.cpp; the float Add, Sub, Mul, Min, Max and Cast run as generated elementwise kernels first
      {"Equal", {extra, false, false, kCompare}},
      {"Greater", {extra, false, false, kCompare}},
      {"GreaterOrEqual", {extra, false, false, kCompare}},
      {"Less", {extra, false, false, kCompare}},
      {"LessOrEqual", {extra, false, false, kCompare}},
      {"And", {extra, false, false, kLogic}},
      {"Or", {extra, false, false, kLogic}},
      {"Xor", {extra, false, false, kLogic}},
      {"Not", {extra, true, false, {kBool}}},
      {"Cast", {extra, true, false, kCast}},
      {"Sin", {extra, true, false, kFloatOrHalf, same_float_dtype_reason}},
      {"Cos", {extra, true, false, kFloatOrHalf, same_float_dtype_reason}},
      {"Add", {extra, true, false, kIntArith}},
      {"Sub", {extra, true, false, kIntArith}},
      {"Mul", {extra, true, false, kIntArith}},
      {"Min", {extra, true, false, kIntArith}},
      {"Max", {extra, true, false, kIntArith}},
      {"Mod", {extra, true, false, kInt}},  // int64/int32 (cuda_compare.cpp); float Mod has no CUDA kernel
      {"BitwiseAnd", {extra, true, false, kInt}},
      {"BitwiseOr", {extra, true, false, kInt}},
      {"BitwiseXor", {extra, true, false, kInt}},
      {"MatMul", {dnn, false, false, kProduct, same_float_dtype_reason}},
      {"Gemm", {dnn, false, false, kProduct, same_float_dtype_reason}},
      {"BatchNormalization", {dnn, true, true, kFloat}},
      {"Conv", {dnn, false, true, kProduct, same_float_dtype_reason}},
      {"ConvTranspose", {dnn, false, true, kProduct, same_float_dtype_reason}},
      {"MaxPool", {dnn, false, true, kFloatOrHalf, pool_reason}},
      {"AveragePool", {dnn, false, true, kFloatOrHalf, pool_reason}},
      {"memplan::ReluGrad", {training, true, false, kGrad}},
      {"memplan::LeakyReluGrad", {training, true, false, kGrad}},
      {"memplan::SigmoidGrad", {training, true, false, kGrad}},
      {"memplan::TanhGrad", {training, true, false, kGrad}},
      {"memplan::SqrtGrad", {training, true, false, kGrad}},
      {"memplan::ErfGrad", {training, true, false, kGrad}},
      {"memplan::GeluGrad", {training, true, false, kGrad}},
      {"memplan::ClipGrad", {training, true, false, kGrad}},
      {"memplan::DropoutGrad", {training, true, false, kGrad}},
      {"memplan::DivGradB", {training, true, false, kGrad}},
      {"memplan::PowGradBase", {training, true, false, kGrad}},
      {"memplan::PowGradExponent", {training, true, false, kGrad}},
      {"memplan::WhereGrad", {training, true, false, kGrad}},
      {"memplan::MSELossGrad", {training, true, false, kGrad}},
      {"memplan::SGDUpdate", {training, true, false, kGrad}},
      {"memplan::AdamStep", {training, true, false, kGrad}},
      {"memplan::GradAccumulate", {training, true, false, kGrad}},
      {"memplan::AmpUnscale", {training, true, false, kFloat}},
      {"memplan::AmpUpdateScale", {training, true, false, kFloat}},
      {"memplan::SoftmaxGrad", {training, true, false, kFloat}},
      {"memplan::LogSoftmaxGrad", {training, true, false, kFloat}},
      {"memplan::BatchNormTraining", {training, false, false, kFloatOrHalf, batch_norm_training_reason}},
      {"memplan::BatchNormGrad", {training, false, false, kFloatOrHalf, batch_norm_grad_reason}},
      {"memplan::AveragePoolGrad", {training, false, false, kFloatOrHalf, pool_reason}},
      {"memplan::SliceGrad", {training, false, false, kFloatOrHalf}},
      {"memplan::GatherGrad", {training, false, false, kFloat}},
      {"memplan::SplitGrad", {training, false, false, kFloatOrHalf}},
      {"memplan::MatMulGradA", {training, false, false, kProduct, same_float_dtype_reason}},
      {"memplan::MatMulGradB", {training, false, false, kProduct, same_float_dtype_reason}},
      {"memplan::MatMulT", {run_matmul_t, false, false, kProduct, same_float_dtype_reason}},
      {"memplan::ReduceSumTo", {training, false, false, kFloatOrHalf, same_float_dtype_reason}},
      {"memplan::BroadcastTo", {training, false, false, kFloatOrHalf, same_float_dtype_reason}},
      {"memplan::ConvGradBias", {training, false, false, kFloatOrHalf, same_float_dtype_reason}},
      {"memplan::MSELoss", {training, false, false, kFloat}},
      {"memplan::CrossEntropyLoss", {loss, false, false, kLogits}},
      {"memplan::CrossEntropyLossGrad", {loss, true, false, kLogits}},
      {"memplan::SumLoss", {loss, false, false, kFloat}},
      {"memplan::LinearCrossEntropy", {loss, false, false, kFloat}},
      {"memplan::SumLossGrad", {loss, true, false, kAny}},
      {"memplan::AdamUpdate", {training, true, false, kFloat}},
      {"memplan::MomentumUpdate", {training, true, false, kFloat}},
      {"memplan::LayerNormGrad", {training, false, false, kFloat}},
      {"memplan::RMSNormalization", {by_family<run_norm_op>, true, false, kFloat}},
      {"memplan::RMSNormGrad", {by_family<run_norm_op>, false, false, kFloat}},
      {"InstanceNormalization", {by_family<run_norm_op>, true, false, kFloatOrHalf, instance_norm_reason}},
      {"GroupNormalization", {by_family<run_norm_op>, true, false, kFloatOrHalf, instance_norm_reason}},
      {"memplan::GroupNormGrad", {by_family<run_norm_op>, true, false, kFloatOrHalf, batch_norm_grad_reason}},
      {"memplan::MaxPoolGrad", {training, false, false, kFloatOrHalf, max_pool_grad_reason}},
      {"memplan::ConvGradInput", {training, false, true, kProduct, same_float_dtype_reason}},
      {"memplan::ConvGradWeight", {training, false, true, kProduct, same_float_dtype_reason}},
      {"memplan::FusedAttention", {run_fused_attention, false, false, {kF32 | kHalf, 5}, attention_unsupported_reason}},
      {"memplan::FusedAttentionGrad", {run_fused_attention, false, false, {kF32 | kHalf, 5}, attention_unsupported_reason}},
  };
  std::map<analysis::OpTypeId, CudaKernel> t;
  for (const Row& r : rows) {
#ifndef MEMPLAN_HAVE_CUDNN
    if (r.kernel.cudnn) continue;
#endif
    t[kernel_op_id(r.key)] = r.kernel;
  }
  return t;
}

const std::map<analysis::OpTypeId, CudaKernel>& table() {
  static const std::map<analysis::OpTypeId, CudaKernel> t = build_table();
  return t;
}

}  // namespace

const CudaKernel* cuda_kernel(const Op& op) {
  const analysis::OpInfo* info = analysis::op_registry().find(op);
  if (!info) return nullptr;
  auto it = table().find(info->id);
  return it == table().end() ? nullptr : &it->second;
}

std::vector<analysis::OpTypeId> registered_cuda_kernels() {
  std::vector<analysis::OpTypeId> ids;
  for (const auto& [id, k] : table()) ids.push_back(id);
  return ids;
}

void run_op(ExecState& s, OpId id) {
  const Op& op = s.g.ops[id];
  if (auto e = analysis::elementwise_expr(s.g, id)) return run_elementwise(s, op, *e);
  if (auto e = half_elementwise_expr(s.g, op)) return run_elementwise(s, op, *e);
  const CudaKernel* k = cuda_kernel(op);
  if (!k) no_implementation(op);
  k->fn(s, op);
}

}  // namespace memplan::runtime::cuda
