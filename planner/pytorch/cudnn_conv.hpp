// What PyTorch's CUDA convolution allocates inside the op beside its outputs, for the eager prediction: the cuDNN
// workspace of each pass and the copies of operands not laid out as the kernel runs. The same rule as
// python/memplan_torch/device_rules.py (conv_memory_format, conv_backend, conv_workspace_bytes) and estimate.py
// (_conv_sequence), which estimate_step uses; fitted to convolutions measured on an H100 with PyTorch 2.11, cuDNN
// 9.19, benchmark mode and TF32 off (bench/results/conv_h100_2026-11-28; docs/torch.md, "cuDNN convolutions").
// tests/python/test_estimate_conv_rule.py holds it to the Python rule over a grid.
#pragma once

#include <cstdint>
#include <vector>

#include "analysis/graph.hpp"

namespace memplan::planner {

enum class ConvPass : std::uint8_t { forward, backward_data, backward_filter };

// The order a tensor's strides were made in: contiguous (NCHW) or channels-last (NHWC, NDHWC); a tensor whose
// channels or spatial extent are 1 is both.
enum class MemoryFormat : std::uint8_t { contiguous, channels_last };

struct ConvOperand {
  std::vector<std::int64_t> shape;
  MemoryFormat layout = MemoryFormat::contiguous;
};

// One convolution as PyTorch hands it to its CUDA backend: input x [N, C, spatial...], weight w [K, C / groups,
// kernel...], output (or output gradient) y; stride and dilation one per spatial dim.
struct CudaConvolution {
  ConvOperand x, w, y;
  analysis::DType dtype = analysis::DType::f32;
  std::vector<std::int64_t> stride, dilation;
  std::int64_t groups = 1;
  bool transposed = false;
};

// The layout PyTorch runs the convolution in (cudnn_conv_suggest_memory_format): channels-last when the input or
// the weight is laid out channels-last (and not also contiguous), else contiguous; 1-d convolutions contiguous.
MemoryFormat conv_memory_format(const ConvOperand& x, const ConvOperand& w);

// False where PyTorch runs its own depthwise kernels (no workspace): contiguous fp32/bf16 depthwise convolutions
// (ConvUtils.h: cuDNN takes them only channels-last or in fp16).
bool conv_runs_cudnn(const CudaConvolution& c);

// The workspace cuDNN's first heuristic engine takes for one pass of a cuDNN convolution (0: none), from the
// operands as PyTorch hands them over (device_rules.conv_workspace_bytes).
std::uint64_t cudnn_conv_workspace_bytes(const CudaConvolution& c, ConvPass pass);

// The bytes of the copy PyTorch makes of an operand not laid out in `format` before the kernel (0: it is).
std::uint64_t conv_operand_copy_bytes(const ConvOperand& t, analysis::DType dtype, MemoryFormat format);

// What one op of a training graph allocates inside PyTorch's convolution beside its outputs: a forward Conv is
// aten::convolution; ConvGradInput and ConvGradWeight are the two passes of one aten::convolution_backward, which
// holds its operand copies through both. Transposed convolutions (a ConvTranspose, and its gradients: a Conv and a
// ConvGradWeight in the backward) run no workspace. `layouts`: each tensor's MemoryFormat (empty: all contiguous).
struct ConvOpAllocations {
  std::uint64_t held = 0;       // operand copies, held until the op ends
  std::uint64_t workspace = 0;  // taken after the op's output, given back at its end
};
ConvOpAllocations pytorch_convolution_allocations(const analysis::Graph& g, analysis::OpId op,
                                                  const std::vector<MemoryFormat>& layouts = {});

}  // namespace memplan::planner
