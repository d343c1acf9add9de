// cuDNN descriptors of N-d tensors and the windows of convolutions and pools (internal to cuda_dnn*.cpp).
#pragma once

#ifdef MEMPLAN_HAVE_CUDNN
#include <array>
#include <string>
#include <vector>

#include "runtime_allocator/cuda/cuda_state.hpp"

namespace memplan::runtime::cuda {

cudnnDataType_t dnn_data_type(analysis::DType d, const analysis::Op& op);

// An NCHW or NCDHW tensor; 1-D ([N, C, W]) runs as 2-D with a trailing axis of 1.
struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc(std::vector<std::int64_t> dims, const analysis::Op& op, analysis::DType dt = analysis::DType::f32);
  ~TensorDesc();
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

// Dims of a tensor as cuDNN sees them (at least 4: a 1-D window gets a trailing axis of 1).
std::vector<std::int64_t> dnn_dims(std::vector<std::int64_t> dims);

// kernel, pads (symmetric), strides and dilations of up to 3 spatial axes (`spatial` of them, at least 2).
struct DnnWindow {
  int spatial = 2;
  std::array<int, 3> k{1, 1, 1}, pad{0, 0, 0}, stride{1, 1, 1}, dil{1, 1, 1};
  bool asymmetric = false;  // begin and end pads differ (pad holds the begin pads)
};

// The window of a convolution or pool from x (input) to y (output); backward ops pass the forward's x and y.
// ConvTranspose passes the convolution it is the input gradient of: x its Y, y its X.
DnnWindow window_of(const analysis::Op& op, const std::vector<std::int64_t>& kernel, const std::vector<std::int64_t>& in,
                    const std::vector<std::int64_t>& out);

// MaxPool and AveragePool (cuda_dnn_pool.cpp).
void run_pool(ExecState& s, const analysis::Op& op, bool max);

}  // namespace memplan::runtime::cuda
#endif
