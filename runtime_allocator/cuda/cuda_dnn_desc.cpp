// cuDNN tensor descriptors of 1-D to 3-D spatial data and the windows of convolutions and pools.
#include "runtime_allocator/cuda/cuda_dnn_desc.hpp"

#ifdef MEMPLAN_HAVE_CUDNN
#include <algorithm>

#include "analysis/conv_geometry.hpp"

namespace memplan::runtime::cuda {

using analysis::Op;

cudnnDataType_t dnn_data_type(analysis::DType d, const Op& op) {
  switch (d) {
    case analysis::DType::f32: return CUDNN_DATA_FLOAT;
    case analysis::DType::bf16: return CUDNN_DATA_BFLOAT16;
    case analysis::DType::f16: return CUDNN_DATA_HALF;
    default: unsupported(op, std::string("cuDNN data of dtype ") + analysis::dtype_name(d));
  }
}

std::vector<std::int64_t> dnn_dims(std::vector<std::int64_t> dims) {
  while (dims.size() < 4) dims.push_back(1);  // 1-D convolutions and pools run as 2-D ones
  return dims;
}

TensorDesc::TensorDesc(std::vector<std::int64_t> dims, const Op& op, analysis::DType dt) {
  check(cudnnCreateTensorDescriptor(&d), "cudnnCreateTensorDescriptor");
  dims = dnn_dims(std::move(dims));
  if (dims.size() > 5) unsupported(op, "cuDNN tensors of 1 to 3 spatial axes only");
  std::vector<int> n, stride(dims.size(), 1);
  for (std::int64_t v : dims) n.push_back(as_int(v, op));
  for (std::size_t k = dims.size() - 1; k-- > 0;) stride[k] = as_int(static_cast<std::int64_t>(stride[k + 1]) * n[k + 1], op);
  check(cudnnSetTensorNdDescriptor(d, dnn_data_type(dt, op), static_cast<int>(n.size()), n.data(), stride.data()),
        "tensor descriptor of '" + op.name + "'");
}

TensorDesc::~TensorDesc() { cudnnDestroyTensorDescriptor(d); }

DnnWindow window_of(const Op& op, const std::vector<std::int64_t>& kernel, const std::vector<std::int64_t>& in,
                    const std::vector<std::int64_t>& out) {
  const std::size_t nsp = kernel.size();
  if (nsp < 1 || nsp > 3 || in.size() != nsp + 2 || out.size() != nsp + 2)
    unsupported(op, "windows over 1 to 3 spatial axes only");
  std::vector<std::int64_t> pads(2 * nsp, 0);
  const auto strides = op.attr_ints("strides", std::vector<std::int64_t>(nsp, 1));
  const auto dil = op.attr_ints("dilations", std::vector<std::int64_t>(nsp, 1));
  if (strides.size() != nsp || dil.size() != nsp) unsupported(op, "strides or dilations of the wrong length");
  const std::string auto_pad = op.attr_string("auto_pad", "NOTSET");
  if (op.type == "ConvTranspose") {
    pads = analysis::conv_transpose_pads(op, out, in, kernel);  // x is its Y, y its X
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (std::size_t i = 0; i < nsp; ++i) {
      const std::int64_t total = std::max<std::int64_t>(0, (out[2 + i] - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - in[2 + i]);
      pads[i] = auto_pad == "SAME_LOWER" ? total - total / 2 : total / 2;
      pads[i + nsp] = total - pads[i];
    }
  } else if (auto_pad != "VALID") {
    pads = op.attr_ints("pads", pads);
    if (pads.size() != 2 * nsp) unsupported(op, "pads of the wrong length");
  }
  DnnWindow w;
  w.spatial = static_cast<int>(std::max<std::size_t>(2, nsp));
  for (std::size_t i = 0; i < nsp; ++i) {
    w.k[i] = as_int(kernel[i], op);
    w.stride[i] = as_int(strides[i], op);
    w.dil[i] = as_int(dil[i], op);
    w.pad[i] = as_int(pads[i], op);
    if (pads[i] != pads[i + nsp]) w.asymmetric = true;
  }
  return w;
}

}  // namespace memplan::runtime::cuda
#endif
