// MaxPool and AveragePool on the CUDA backend: cuDNN's N-d pooling (float32, symmetric pads, no dilation, floor
// mode); the own kernels over 1 to 3 spatial axes for Indices, bf16/f16 data, dilations, asymmetric pads and ceil_mode.
#include "runtime_allocator/cuda/cuda_dnn_desc.hpp"

#ifdef MEMPLAN_HAVE_CUDNN
#include "runtime_allocator/cuda/kernels_training.hpp"

namespace memplan::runtime::cuda {

using analysis::kNoTensor;
using analysis::Op;
using analysis::TensorId;

namespace {

// MaxPool with its Indices output, or of bf16/f16 data, or dilated: own kernel (flat indices over all of X, the first
// maximum in window order; compared in float32).
void run_max_pool_indices(ExecState& s, const Op& op) {
  if (op.attr_int("storage_order", 0) != 0) unsupported(op, "column-major MaxPool indices");
  const auto x = s.dims(op.inputs[0]), y = s.dims(op.outputs[0]);
  const auto kernel = op.attr_ints("kernel_shape");
  const DnnWindow w = window_of(op, kernel, x, y);
  PoolGeometry p;
  p.nc = x[0] * x[1];
  // Spatial axes right-aligned into (d, h, w): a 1-D pool runs over w, a 2-D one over h and w.
  std::int64_t* in[3] = {&p.d, &p.h, &p.w};
  std::int64_t* out[3] = {&p.od, &p.oh, &p.ow};
  int* fields[4][3] = {{&p.kd, &p.kh, &p.kw}, {&p.sd, &p.sh, &p.sw}, {&p.dd, &p.dh, &p.dw}, {&p.pd, &p.ph, &p.pw}};
  const std::size_t a = 3 - kernel.size();
  for (std::size_t i = 0; i < kernel.size(); ++i) {
    *in[i + a] = x[2 + i];
    *out[i + a] = y[2 + i];
    *fields[0][i + a] = w.k[i];
    *fields[1][i + a] = w.stride[i];
    *fields[2][i + a] = w.dil[i];
    *fields[3][i + a] = w.pad[i];
  }
  const TensorId indices = op.output(1);
  if (indices != kNoTensor && s.tensor(indices).dtype != analysis::DType::i64) unsupported(op, "int64 indices only");
  max_pool_with_indices(s.ptr[op.inputs[0]], s.ptr[op.outputs[0]],
                        indices == kNoTensor ? nullptr : reinterpret_cast<std::int64_t*>(s.ptr[indices]),
                        float_storage(op, s.tensor(op.inputs[0]).dtype), p, s.ctx.stream());
}

}  // namespace

void run_pool(ExecState& s, const Op& op, bool max) {
  const analysis::DType dt = s.tensor(op.inputs[0]).dtype;
  const auto xd = s.dims(op.inputs[0]), yd = s.dims(op.outputs[0]);
  const DnnWindow w = window_of(op, op.attr_ints("kernel_shape"), xd, yd);
  const bool dilated = w.dil[0] != 1 || w.dil[1] != 1 || w.dil[2] != 1;
  const bool own = is_half(dt) || dilated || w.asymmetric;  // cuDNN pools neither dilate nor pad unevenly
  if (max && (op.output(1) != kNoTensor || own)) return run_max_pool_indices(s, op);
  if (own)  // the CPU kernel's window (its count and ceil_mode), float32 sums
    return average_pool(s.ptr[op.inputs[0]], s.ptr[op.outputs[0]], float_storage(op, dt),
                        pool_window(s, op, op.inputs[0], op.outputs[0]), s.ctx.stream());
  TensorDesc x(xd, op), y(yd, op);
  cudnnPoolingDescriptor_t p = nullptr;
  check(cudnnCreatePoolingDescriptor(&p), "cudnnCreatePoolingDescriptor");
  const auto mode = max ? CUDNN_POOLING_MAX_DETERMINISTIC
                        : op.attr_int("count_include_pad", 0) ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                              : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
  cudnnStatus_t st = cudnnSetPoolingNdDescriptor(p, mode, CUDNN_PROPAGATE_NAN, w.spatial, w.k.data(), w.pad.data(), w.stride.data());
  const auto out = dnn_dims(yd);
  std::vector<int> got(out.size(), 0);
  if (st == CUDNN_STATUS_SUCCESS) st = cudnnGetPoolingNdForwardOutputDim(p, x.d, static_cast<int>(got.size()), got.data());
  bool same = st == CUDNN_STATUS_SUCCESS;
  for (std::size_t k = 2; same && k < out.size(); ++k) same = got[k] == out[k];
  const float one = 1.0f, zero = 0.0f;
  if (same) st = cudnnPoolingForward(s.ctx.cudnn(), p, &one, x.d, s.ptr[op.inputs[0]], &zero, y.d, s.ptr[op.outputs[0]]);
  cudnnDestroyPoolingDescriptor(p);
  if (!same && st == CUDNN_STATUS_SUCCESS) {
    // ceil_mode: cuDNN floors; the own kernels take ONNX's window
    if (max) return run_max_pool_indices(s, op);
    return average_pool(s.ptr[op.inputs[0]], s.ptr[op.outputs[0]], float_storage(op, dt),
                        pool_window(s, op, op.inputs[0], op.outputs[0]), s.ctx.stream());
  }
  check(st, "pooling '" + op.name + "'");
}

}  // namespace memplan::runtime::cuda
#endif
