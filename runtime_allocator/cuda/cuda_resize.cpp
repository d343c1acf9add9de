// The CUDA executor's Resize, Upsample (nearest on any dtype, n-linear and cubic on float32) and memplan::ResizeGrad; the
// geometry from runtime_allocator/kernels/resize_geometry.hpp, kernels in kernels_resize.cu.
#include "runtime_allocator/cuda/cuda_state.hpp"
#include "runtime_allocator/cuda/kernels_resize.hpp"
#include "runtime_allocator/kernels/resize_geometry.hpp"

namespace memplan::runtime::cuda {

using analysis::DType;
using analysis::kNoTensor;
using analysis::Op;
using analysis::TensorId;

namespace {

// Input i's float values (roi, scales): its constant data, else read back from the device (a sync); empty when absent.
std::vector<double> float_values(ExecState& s, const Op& op, std::size_t i) {
  const TensorId t = op.input(i);
  if (t == kNoTensor || s.tensor(t).element_count() == 0) return {};
  const auto& x = s.tensor(t);
  if (x.dtype != DType::f32 && x.dtype != DType::f64) unsupported(op, "roi and scales must be float32 or float64");
  if (x.data && x.data->bytes.size() == x.bytes()) return x.data->as_double();
  analysis::TensorData v{x.dtype, x.shape(), std::vector<std::byte>(x.bytes())};
  check(cudaMemcpyAsync(v.bytes.data(), s.ptr[t], v.bytes.size(), cudaMemcpyDeviceToHost, s.ctx.stream()),
        "read of '" + x.name + "'");
  check(cudaStreamSynchronize(s.ctx.stream()), "read of '" + x.name + "'");
  return v.as_double();
}

ResizeShape shape_of(ExecState& s, const Op& op, TensorId x, TensorId y) {
  const auto in = s.dims(x), out = s.dims(y);
  const bool legacy = resize_legacy_layout(op);
  const ResizeGeometry g = resize_geometry(op, in, out, legacy ? std::vector<double>{} : float_values(s, op, 1),
                                           float_values(s, op, resize_scales_input(op)));
  ResizeShape r;
  r.rank = static_cast<int>(in.size());
  r.mode = g.mode;
  r.elem_bytes = elem_bytes(s, x);
  r.f32 = s.tensor(x).dtype == DType::f32;
  for (std::size_t d = 0; d < in.size(); ++d) r.axes[d] = g.axes[d];
  return r;
}

}  // namespace

std::string resize_reason(const analysis::Graph& g, const Op& op) {
  const DType d = g.tensors[op.inputs.at(0)].dtype;
  const std::string mode = op.attr_string("mode", "nearest");
  if (d == DType::f32 || mode == "nearest") return {};
  return std::string(mode + " mode of dtype ") + analysis::dtype_name(d);
}

void run_resize(ExecState& s, const Op& op) {
  const TensorId x = op.inputs.at(0), y = op.outputs.at(0);
  resize_forward(shape_of(s, op, x, y), s.ptr[x], s.ptr[y], s.ctx.stream());
}

void run_resize_grad(ExecState& s, const Op& op) {
  const TensorId dy = op.inputs.at(0), dx = op.outputs.at(0);
  if (s.tensor(dy).dtype != DType::f32 || s.tensor(dx).dtype != DType::f32) unsupported(op, "float32 only");
  resize_backward(shape_of(s, op, dx, dy), s.f32(dy), s.f32(dx), s.ctx.stream());
}

}  // namespace memplan::runtime::cuda
