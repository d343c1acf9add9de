// PyTorch's CUDA convolution: cuDNN workspaces per pass and operand layout copies (cudnn_conv.hpp).
#include "planner/pytorch/cudnn_conv.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>

#include "analysis/error.hpp"

namespace memplan::planner {
namespace {

using analysis::DType;

// The engines' workspace families (device_rules.py names each constant the same way).
constexpr std::uint64_t kFp32SmallFftBytesPerFilter = 2484;    // fp32 forward, outputs of at most 8x8: a filter bank
constexpr double kFp32WgradActivationFactor = 2.25;            // fp32 3x3 weight gradient: x (input + grad_output)
constexpr double kFp32WgradWeightFactor = 3.85;                // ... + this x the weight
constexpr std::uint64_t kLowWgrad1x1Partials = 8;              // 16-bit 1x1 weight gradient: fp32 split-K partial sums
constexpr std::uint64_t kFp32DgradFftTileBytes = 32 * 17 * 8;  // fp32 input gradient: one 32x32 tile's half-spectrum

const char* const kWhat = "cuDNN convolution workspace";

std::uint64_t product(const std::vector<std::int64_t>& dims, std::size_t from) {
  std::uint64_t n = 1;
  for (std::size_t k = from; k < dims.size(); ++k)
    n = checked_mul(n, static_cast<std::uint64_t>(std::max<std::int64_t>(dims[k], 0)), kWhat);
  return n;
}

std::uint64_t operand_bytes(const ConvOperand& t, DType dtype) {
  return checked_mul(product(t.shape, 0), std::max<std::uint64_t>(analysis::dtype_bits(dtype) / 8, 1), kWhat);
}

bool has_layouts(const ConvOperand& t) { return t.shape.size() == 4 || t.shape.size() == 5; }

// Contiguous and channels-last strides coincide when one channel or one spatial position is all there is.
bool both_layouts(const ConvOperand& t) { return has_layouts(t) && (t.shape[1] == 1 || product(t.shape, 2) == 1); }

bool laid_out_as(const ConvOperand& t, MemoryFormat format) {
  const MemoryFormat own = has_layouts(t) ? t.layout : MemoryFormat::contiguous;
  return own == format || both_layouts(t);
}

bool all_ones(const std::vector<std::int64_t>& v) {
  return std::all_of(v.begin(), v.end(), [](std::int64_t d) { return d == 1; });
}

std::vector<std::int64_t> kernel_of(const ConvOperand& w) {
  return w.shape.size() > 2 ? std::vector<std::int64_t>(w.shape.begin() + 2, w.shape.end()) : std::vector<std::int64_t>{};
}

// The bytes of input x, weight w and output (or its gradient) y.
struct OperandBytes {
  std::uint64_t x = 0, w = 0, y = 0;
  std::uint64_t xyw() const { return checked_add(checked_add(x, y, kWhat), w, kWhat); }
};

std::uint64_t channels(const ConvOperand& t) { return static_cast<std::uint64_t>(t.shape[1]); }
std::uint64_t filters(const ConvOperand& w) { return static_cast<std::uint64_t>(w.shape[0]); }
std::uint64_t groups_of(const CudaConvolution& c) { return static_cast<std::uint64_t>(std::max<std::int64_t>(c.groups, 1)); }

// bf16/fp16: tensor-core engines run channels-last; a contiguous convolution transforms its operands into the
// workspace, except a 1x1 stride-1 one (a plain GEMM), whose weight gradient splits its reduction.
std::uint64_t half_workspace(const CudaConvolution& c, ConvPass pass, const OperandBytes& b) {
  if (conv_memory_format(c.x, c.w) != MemoryFormat::contiguous) return 0;
  if (!all_ones(kernel_of(c.w)) || !all_ones(c.stride)) return b.xyw();
  if (pass != ConvPass::backward_filter) return 0;
  const std::uint64_t partials =
      checked_mul(checked_mul(kLowWgrad1x1Partials * 4, channels(c.x), kWhat), filters(c.w), kWhat) / groups_of(c);
  return std::min(partials, checked_add(b.x, b.y, kWhat));  // at most the size of the operands
}

// A 3x3 window at stride 1, undilated.
bool three_by_three(const CudaConvolution& c) {
  return kernel_of(c.w) == std::vector<std::int64_t>{3, 3} && all_ones(c.stride) && all_ones(c.dilation);
}

// fp32 forward at outputs of at most 8x8 with 76-160 input channels: a frequency-domain filter bank.
std::uint64_t fp32_forward(const CudaConvolution& c) {
  const std::uint64_t cin = channels(c.x), cout = filters(c.w);
  if (!three_by_three(c) || c.groups != 1 || product(c.y.shape, 2) > 64 || cin < 76 || cin > 160 || cout < 76) return 0;
  return checked_mul(checked_mul(kFp32SmallFftBytesPerFilter, cin, kWhat), cout, kWhat);
}

// fp32 3x3 weight gradients with at least 32 input channels a group (maps over 56x56 only from 64 channels).
std::uint64_t fp32_weight_gradient(const CudaConvolution& c, const OperandBytes& b) {
  const std::uint64_t cin = channels(c.x);
  if (!three_by_three(c) || cin / groups_of(c) < 32 || (cin < 64 && product(c.x.shape, 2) > 56 * 56)) return 0;
  return static_cast<std::uint64_t>(kFp32WgradActivationFactor * static_cast<double>(checked_add(b.x, b.y, kWhat)) +
                                    kFp32WgradWeightFactor * static_cast<double>(b.w));
}

// fp32 3x3 input gradients on 40-80 pixel maps with at least 64 channels each side: FFT over 32x32 tiles (the
// filters' spectra, two tiles of spectra per image and channel).
std::uint64_t fp32_input_gradient(const CudaConvolution& c) {
  const std::uint64_t cin = channels(c.x), cout = filters(c.w);
  const bool mid = c.x.shape.size() == 4 &&
                   std::all_of(c.x.shape.begin() + 2, c.x.shape.end(), [](std::int64_t v) { return v >= 40 && v <= 80; });
  if (!three_by_three(c) || c.groups != 1 || !mid || std::min(cin, cout) < 64) return 0;
  const auto n = static_cast<std::uint64_t>(c.x.shape[0]);
  const std::uint64_t spectra = checked_add(checked_mul(cin, cout, kWhat), checked_mul(2 * n, cin + cout, kWhat), kWhat);
  return checked_mul(kFp32DgradFftTileBytes, spectra, kWhat);
}

// fp32 with TF32 off: CUDA-core engines, native NCHW; a channels-last convolution is transformed to NCHW (its weight
// gradient excepted).
std::uint64_t fp32_workspace(const CudaConvolution& c, ConvPass pass, const OperandBytes& b) {
  if (conv_memory_format(c.x, c.w) != MemoryFormat::contiguous) return pass == ConvPass::backward_filter ? 0 : b.xyw();
  switch (pass) {
    case ConvPass::forward:
      return fp32_forward(c);
    case ConvPass::backward_data:
      return fp32_input_gradient(c);
    case ConvPass::backward_filter:
      return fp32_weight_gradient(c, b);
  }
  return 0;
}

// The convolution an op of the training graph is (part of), as PyTorch runs it: which pass it computes, which
// passes its aten::convolution_backward computes (output_mask), and its operand tensors (kNoTensor: known by shape).
struct ConvInGraph {
  ConvPass pass = ConvPass::forward;
  analysis::TensorId x = analysis::kNoTensor, w = analysis::kNoTensor, y = analysis::kNoTensor;
  std::vector<std::int64_t> x_shape, w_shape;
  bool transposed = false, data = false, filter = false;
};

bool is_op(const analysis::Op& op, std::string_view type, bool memplan_domain) {
  return op.type == type && (memplan_domain ? op.domain == analysis::kMemplanDomain : op.domain.empty());
}

// The op reading `t` as input `slot` that is of `type` (memplan's domain or the default one), else kNoOp.
analysis::OpId reader(const analysis::Graph& g, analysis::TensorId t, std::size_t slot, std::string_view type,
                      bool memplan_domain) {
  if (t == analysis::kNoTensor) return analysis::kNoOp;
  for (analysis::OpId c : g.tensors[t].consumers)
    if (is_op(g.ops[c], type, memplan_domain) && g.ops[c].input(slot) == t) return c;
  return analysis::kNoOp;
}

bool feeds_conv_transpose(const analysis::Graph& g, analysis::TensorId t) {
  return reader(g, t, 0, "ConvTranspose", false) != analysis::kNoOp;
}

// The other pass of the same convolution_backward: the op reading the same grad_output for the other gradient.
analysis::OpId other_pass(const analysis::Graph& g, const ConvInGraph& c) {
  if (c.pass == ConvPass::backward_data) return reader(g, c.y, c.transposed ? 1 : 0, "ConvGradWeight", true);
  return c.transposed ? reader(g, c.y, 0, "Conv", false) : reader(g, c.y, 0, "ConvGradInput", true);
}

// A backward pass: the gradient of a Conv (ConvGradInput(dY, W), ConvGradWeight(dY, X)) or of a ConvTranspose (its
// input gradient is a Conv(dY, W) in the backward, its weight gradient ConvGradWeight(X, dY)).
ConvInGraph backward_pass(const analysis::Graph& g, const analysis::Op& op) {
  ConvInGraph c;
  const bool data_pass = !is_op(op, "ConvGradWeight", true);
  c.pass = data_pass ? ConvPass::backward_data : ConvPass::backward_filter;
  c.transposed = is_op(op, "Conv", false) || feeds_conv_transpose(g, op.input(0));
  c.y = data_pass || !c.transposed ? op.input(0) : op.input(1);
  const analysis::OpId other = other_pass(g, c);
  const analysis::Op* other_op = other == analysis::kNoOp ? nullptr : &g.ops[other];
  const analysis::Op* data_op = data_pass ? &op : other_op;
  const analysis::Op* filter_op = data_pass ? other_op : &op;
  c.data = data_op != nullptr;
  c.filter = filter_op != nullptr;
  if (data_op) c.w = data_op->input(1);
  if (filter_op) c.x = filter_op->input(c.transposed ? 0 : 1);
  (data_pass ? c.x_shape : c.w_shape) = g.tensors[op.output(0)].shape();  // the operand known by its gradient alone
  return c;
}

std::optional<ConvInGraph> conv_in_graph(const analysis::Graph& g, analysis::OpId id) {
  const analysis::Op& op = g.ops[id];
  const bool forward = op.phase == analysis::Phase::forward && (is_op(op, "Conv", false) || is_op(op, "ConvTranspose", false));
  const bool backward = op.phase == analysis::Phase::backward &&
                        (is_op(op, "Conv", false) || is_op(op, "ConvGradInput", true) || is_op(op, "ConvGradWeight", true));
  if ((!forward && !backward) || op.inputs.size() < 2 || op.output(0) == analysis::kNoTensor) return std::nullopt;
  for (analysis::TensorId t : {op.input(0), op.input(1), op.output(0)})
    if (t == analysis::kNoTensor || !g.tensors[t].shape_known() || g.tensors[t].on_host) return std::nullopt;
  if (backward) return backward_pass(g, op);
  ConvInGraph c;
  c.x = op.input(0);
  c.w = op.input(1);
  c.y = op.output(0);
  c.transposed = is_op(op, "ConvTranspose", false);
  return c;
}

ConvOperand operand_of(const analysis::Graph& g, analysis::TensorId t, const std::vector<std::int64_t>& shape,
                       const std::vector<MemoryFormat>& layouts) {
  if (t == analysis::kNoTensor) return {shape, MemoryFormat::contiguous};
  return {g.tensors[t].shape(), t < layouts.size() ? layouts[t] : MemoryFormat::contiguous};
}

}  // namespace

MemoryFormat conv_memory_format(const ConvOperand& x, const ConvOperand& w) {
  if (!has_layouts(x)) return MemoryFormat::contiguous;
  for (const ConvOperand* t : {&x, &w})
    if (has_layouts(*t) && t->layout == MemoryFormat::channels_last && !both_layouts(*t)) return MemoryFormat::channels_last;
  return MemoryFormat::contiguous;
}

bool conv_runs_cudnn(const CudaConvolution& c) {
  const std::size_t rank = c.x.shape.size();
  if (c.transposed || (rank != 3 && rank != 4) || c.groups <= 1 || c.w.shape.empty()) return true;
  const bool depthwise = c.x.shape[1] == c.groups && c.w.shape[0] % c.groups == 0;
  return !(depthwise && c.dtype != DType::f16 && conv_memory_format(c.x, c.w) == MemoryFormat::contiguous);
}

std::uint64_t cudnn_conv_workspace_bytes(const CudaConvolution& c, ConvPass pass) {
  if (c.x.shape.size() < 3 || c.w.shape.size() != c.x.shape.size() || c.y.shape.size() != c.x.shape.size()) return 0;
  const OperandBytes b{operand_bytes(c.x, c.dtype), operand_bytes(c.w, c.dtype), operand_bytes(c.y, c.dtype)};
  if (c.dtype == DType::bf16 || c.dtype == DType::f16) return half_workspace(c, pass, b);
  return c.dtype == DType::f32 ? fp32_workspace(c, pass, b) : 0;
}

std::uint64_t conv_operand_copy_bytes(const ConvOperand& t, DType dtype, MemoryFormat format) {
  return laid_out_as(t, has_layouts(t) ? format : MemoryFormat::contiguous) ? 0 : operand_bytes(t, dtype);
}

ConvOpAllocations pytorch_convolution_allocations(const analysis::Graph& g, analysis::OpId op,
                                                  const std::vector<MemoryFormat>& layouts) {
  const auto found = conv_in_graph(g, op);
  if (!found) return {};
  const ConvInGraph& in = *found;
  const analysis::Op& o = g.ops[op];
  CudaConvolution c;
  c.x = operand_of(g, in.x, in.x_shape, layouts);
  c.w = operand_of(g, in.w, in.w_shape, layouts);
  c.y = operand_of(g, in.y, {}, layouts);
  c.dtype = g.tensors[in.y].dtype;
  const std::size_t spatial = c.w.shape.size() > 2 ? c.w.shape.size() - 2 : 0;
  c.stride = o.attr_ints("strides", std::vector<std::int64_t>(spatial, 1));
  c.dilation = o.attr_ints("dilations", std::vector<std::int64_t>(spatial, 1));
  c.groups = o.attr_int("group", 1);
  c.transposed = in.transposed;
  const MemoryFormat format = conv_memory_format(c.x, c.w);
  ConvOpAllocations out;
  if (in.pass == ConvPass::forward) {
    out.held = checked_add(conv_operand_copy_bytes(c.x, c.dtype, format), conv_operand_copy_bytes(c.w, c.dtype, format), kWhat);
  } else {  // convolution_backward copies grad_output, and the input and weight where a pass reads them
    out.held = conv_operand_copy_bytes(c.y, c.dtype, format);
    if (in.filter) out.held = checked_add(out.held, conv_operand_copy_bytes(c.x, c.dtype, format), kWhat);
    if (in.data) out.held = checked_add(out.held, conv_operand_copy_bytes(c.w, c.dtype, format), kWhat);
  }
  if (!c.transposed && conv_runs_cudnn(c)) out.workspace = cudnn_conv_workspace_bytes(c, in.pass);
  return out;
}

}  // namespace memplan::planner
