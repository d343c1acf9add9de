// The CUDA executor's Pad and PadGrad, CumSum (every mode, negative pads crop, optional pad value and axes) and
// RandomUniformLike (the CPU kernels' values bit for bit); kernels in kernels_pad_random.cu.
#include "runtime_allocator/cuda/cuda_state.hpp"
#include "runtime_allocator/cuda/kernels_pad_random.hpp"
#include "runtime_allocator/kernels/random_uniform.hpp"

namespace memplan::runtime::cuda {

using analysis::DType;
using analysis::kNoTensor;
using analysis::Op;
using analysis::TensorId;

namespace {

// Input i's int64/int32 values: its constant data, else read back from the device (a sync); `attr` when absent.
std::vector<std::int64_t> ints_of(ExecState& s, const Op& op, std::size_t i, const char* attr) {
  const TensorId t = op.input(i);
  if (t == kNoTensor) return op.attr_ints(attr);
  const auto& x = s.tensor(t);
  if (x.dtype != DType::i64 && x.dtype != DType::i32) unsupported(op, "input " + std::to_string(i) + " must be int64 or int32");
  if (x.data && x.data->bytes.size() == x.bytes()) return x.data->as_int64();
  analysis::TensorData v{x.dtype, x.shape(), std::vector<std::byte>(x.bytes())};
  if (!v.bytes.empty()) {
    check(cudaMemcpyAsync(v.bytes.data(), s.ptr[t], v.bytes.size(), cudaMemcpyDeviceToHost, s.ctx.stream()), "read of '" + x.name + "'");
    check(cudaStreamSynchronize(s.ctx.stream()), "read of '" + x.name + "'");
  }
  return v.as_int64();
}

}  // namespace

void run_pad(ExecState& s, const Op& op) {
  const TensorId x = op.inputs.at(0), y = op.outputs.at(0);
  const auto in = s.dims(x), out = s.dims(y);
  if (in.size() > static_cast<std::size_t>(kMaxRank)) unsupported(op, "rank above 8");
  PadShape p;
  if (!parse_pad_mode(op.attr_string("mode", "constant"), p.mode)) unsupported(op, "mode " + op.attr_string("mode", ""));
  auto axes = op.input(3) == kNoTensor ? std::vector<std::int64_t>{} : ints_of(s, op, 3, "axes");
  for (auto& a : axes) a = static_cast<std::int64_t>(norm_axis(a, in.size(), op));
  const std::vector<PadAxis> ax = pad_axes(in, ints_of(s, op, 1, "pads"), axes);
  if (ax.size() != in.size()) unsupported(op, "pads do not give a begin and an end per padded axis");
  const void* value = nullptr;
  if (op.input(2) != kNoTensor) {
    const auto& v = s.tensor(op.input(2));
    if (v.dtype != s.tensor(x).dtype || v.element_count() != 1) unsupported(op, "the pad value must be one element of x's dtype");
    value = s.ptr[op.input(2)];
  } else if (op.attr("value") && op.attr_float("value", 0.0) != 0.0) {
    unsupported(op, "the pad value attribute (opset < 11)");
  }
  const auto strides = contiguous_strides(in);
  p.rank = static_cast<int>(in.size());
  p.elem_bytes = elem_bytes(s, x);
  for (std::size_t d = 0; d < in.size(); ++d) {
    if (ax[d].m == 0 && p.mode != PadMode::constant && out[d] > 0) unsupported(op, "non-constant Pad of an empty axis");
    p.out_dims[d] = out[d];
    p.in_strides[d] = strides[d];
    p.axes[d] = ax[d];
  }
  pad(p, s.ptr[x], value, s.ptr[y], s.ctx.stream());
}

void run_pad_grad(ExecState& s, const Op& op) {
  const TensorId dy = op.inputs.at(0), dx = op.outputs.at(0);
  const auto in = s.dims(dx), out = s.dims(dy);
  if (in.size() > static_cast<std::size_t>(kMaxRank)) unsupported(op, "rank above 8");
  PadGradShape p;
  if (!parse_pad_mode(op.attr_string("mode", "constant"), p.mode)) unsupported(op, "mode " + op.attr_string("mode", ""));
  const std::vector<PadAxis> ax = pad_axes(in, op.attr_ints("pads"), {});
  if (ax.size() != in.size() || out.size() != in.size()) unsupported(op, "pads do not give a begin and an end per axis");
  p.storage = float_storage(op, s.tensor(dy).dtype);
  if (s.tensor(dx).dtype != s.tensor(dy).dtype) unsupported(op, "dX must have dY's dtype");
  const auto strides = contiguous_strides(out);
  p.rank = static_cast<int>(in.size());
  for (std::size_t d = 0; d < in.size(); ++d) {
    p.in_dims[d] = in[d];
    p.out_dims[d] = out[d];
    p.out_strides[d] = strides[d];
    p.axes[d] = ax[d];
  }
  pad_grad(p, s.ptr[dy], s.ptr[dx], s.ctx.stream());
}

void run_roll(ExecState& s, const Op& op) {
  const TensorId x = op.inputs.at(0), y = op.outputs.at(0);
  const auto in = s.dims(x);
  const auto shifts = op.attr_ints("shifts"), axes = op.attr_ints("axes");
  if (shifts.size() != axes.size()) unsupported(op, "one shift per axis expected");
  std::vector<std::int64_t> shift(in.size(), 0);
  std::size_t last = 0;  // one past the last rolled axis
  for (std::size_t k = 0; k < axes.size(); ++k) {
    const std::size_t a = norm_axis(axes[k], in.size(), op);
    if (in[a] > 0) shift[a] = ((shift[a] + shifts[k]) % in[a] + in[a]) % in[a];
    last = std::max(last, a + 1);
  }
  if (last > static_cast<std::size_t>(kMaxRank)) unsupported(op, "rolled axes beyond rank 8");
  RollShape r;
  r.rank = static_cast<int>(last);
  for (std::size_t d = 0; d < last; ++d) {
    r.dims[d] = in[d];
    r.shift[d] = shift[d];
  }
  r.block_bytes = dims_product(in, last) * elem_bytes(s, x);
  roll(r, s.ptr[x], s.ptr[y], s.ctx.stream());
}

void run_cum_sum(ExecState& s, const Op& op) {
  const TensorId x = op.inputs.at(0), y = op.outputs.at(0);
  const auto in = s.dims(x);
  const auto axes = ints_of(s, op, 1, "axis");
  if (axes.size() != 1) unsupported(op, "axis must be a scalar");
  const std::size_t axis = norm_axis(axes[0], in.size(), op);
  int code = -1;
  switch (s.tensor(x).dtype) {
    case DType::f32: code = 0; break;
    case DType::f64: code = 1; break;
    case DType::i32: code = 2; break;
    case DType::i64: code = 3; break;
    default: unsupported(op, std::string("dtype ") + analysis::dtype_name(s.tensor(x).dtype) + " (float32, float64, int32, int64)");
  }
  cum_sum(s.ptr[x], s.ptr[y], code, dims_product(in, 0, axis), in[axis], dims_product(in, axis + 1), op.attr_int("exclusive", 0) != 0,
          op.attr_int("reverse", 0) != 0, s.ctx.stream());
}

void run_gather_elements(ExecState& s, const Op& op) {
  const TensorId x = op.inputs.at(0), idx = op.inputs.at(1), y = op.outputs.at(0);
  const auto in = s.dims(x), out = s.dims(y);
  if (in.size() > static_cast<std::size_t>(kMaxRank)) unsupported(op, "rank above 8");
  if (out.size() != in.size()) unsupported(op, "indices of x's rank expected");
  const DType it = s.tensor(idx).dtype;
  if (it != DType::i64 && it != DType::i32) unsupported(op, "indices must be int64 or int32");
  GatherElementsShape g;
  g.rank = static_cast<int>(in.size());
  g.axis = static_cast<int>(norm_axis(op.attr_int("axis", 0), in.size(), op));
  g.elem_bytes = elem_bytes(s, x);
  g.idx64 = it == DType::i64;
  g.axis_dim = in[static_cast<std::size_t>(g.axis)];
  const auto strides = contiguous_strides(in);
  for (std::size_t d = 0; d < in.size(); ++d) {
    g.y_dims[d] = out[d];
    g.x_strides[d] = strides[d];
  }
  gather_elements(g, s.ptr[x], s.ptr[idx], s.ptr[y], s.ctx.stream());
}

void run_random_uniform_like(ExecState& s, const Op& op) {
  const TensorId y = op.outputs.at(0);
  const std::uint64_t key =
      step_key(static_cast<std::uint64_t>(op.attr_int("seed", static_cast<std::int64_t>(kDefaultRandomSeed))));
  const double low = op.attr_float("low", 0.0), high = op.attr_float("high", 1.0);
  const auto n = static_cast<std::int64_t>(s.tensor(y).element_count());
  if (s.tensor(y).dtype == DType::f32)
    random_uniform_f32(s.f32(y), n, key, static_cast<float>(low), static_cast<float>(high), s.ctx.stream());
  else if (s.tensor(y).dtype == DType::f64)
    random_uniform_f64(reinterpret_cast<double*>(s.ptr[y]), n, key, low, high, s.ctx.stream());
  else
    unsupported(op, std::string("dtype ") + analysis::dtype_name(s.tensor(y).dtype) + " (float32 and float64 only)");
}

}  // namespace memplan::runtime::cuda
