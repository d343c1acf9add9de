// The CUDA executor's training-graph layers outside cuBLAS/cuDNN: BatchNorm in
// training mode and its gradient, the AveragePool/Slice/Gather/Split gradients,
// deterministic Dropout and its gradient, Where and its gradient with bool
// conditions, IsNaN, Tile, Shape, ConstantOfShape, ReduceProd and
// ReduceSumSquare (comparison, logic and Cast ops: cuda_compare.cpp). Semantics follow the CPU kernels
// (runtime_allocator/kernels/kernels_*.cpp).
#include <algorithm>
#include <cstring>

#include "runtime_allocator/kernels/cpu_kernels.hpp"
#include "runtime_allocator/cuda/cuda_compare.hpp"
#include "runtime_allocator/cuda/cuda_state.hpp"
#include "runtime_allocator/cuda/kernels_layers.hpp"
#include "runtime_allocator/cuda/kernels_pad_random.hpp"
#include "runtime_allocator/kernels/dropout_mask.hpp"

namespace memplan::runtime::cuda {

using analysis::DType;
using analysis::kNoTensor;
using analysis::Op;
using analysis::TensorData;
using analysis::TensorId;

namespace {

const float *in_f32(const ExecState &s, const Op &op, std::size_t i) {
  const TensorId t = op.input(i);
  if (t == kNoTensor) unsupported(op, "input " + std::to_string(i) + " is required");
  if (s.tensor(t).dtype != DType::f32) unsupported(op, "input " + std::to_string(i) + " must be float32");
  return s.f32(t);
}

float *out_f32(const ExecState &s, const Op &op, std::size_t i) {
  const TensorId t = op.output(i);
  if (t == kNoTensor || !s.ptr[t]) return nullptr;
  if (s.tensor(t).dtype != DType::f32) unsupported(op, "output " + std::to_string(i) + " must be float32");
  return s.f32(t);
}

// The data of tensor t (input or output `what` of op): float32, bf16 or f16 storage of dtype d (the op's data dtype).
std::byte *data_of(const ExecState &s, const Op &op, TensorId t, DType d, const std::string &what) {
  if (t == kNoTensor) unsupported(op, what + " is required");
  if (s.tensor(t).dtype != d) unsupported(op, what + " must have the dtype of input 0");
  return s.ptr[t];
}

// The value of a small tensor on the host: its constant data, or its bytes read
// back from the device (a sync).
TensorData host_value(ExecState &s, TensorId t) {
  const auto &x = s.tensor(t);
  if (x.data && x.data->bytes.size() == x.bytes()) return *x.data;
  TensorData v{x.dtype, x.shape(), std::vector<std::byte>(x.bytes())};
  if (!v.bytes.empty()) {
    check(cudaMemcpyAsync(v.bytes.data(), s.ptr[t], v.bytes.size(), cudaMemcpyDeviceToHost, s.ctx.stream()),
          "read of '" + x.name + "'");
    check(cudaStreamSynchronize(s.ctx.stream()), "read of '" + x.name + "'");
  }
  return v;
}

// Integer arguments (starts, axes, ...) from input i when present, else the
// attribute, else `fallback`.
std::vector<std::int64_t> int_arg(ExecState &s, const Op &op, std::size_t i, const char *attr,
                                  std::vector<std::int64_t> fallback = {}) {
  if (op.input(i) != kNoTensor) {
    const DType dt = s.tensor(op.input(i)).dtype;
    if (dt != DType::i64 && dt != DType::i32) unsupported(op, "input " + std::to_string(i) + " must be int64 or int32");
    return host_value(s, op.input(i)).as_int64();
  }
  return op.attr_ints(attr, std::move(fallback));
}

// A float32 scalar input (Dropout's ratio), `fallback` when absent; as the CPU
// kernels' scalar_value.
float scalar_arg(ExecState &s, const Op &op, std::size_t i, float fallback) {
  const TensorId t = op.input(i);
  if (t == kNoTensor) return fallback;
  if (s.tensor(t).dtype != DType::f32 || s.tensor(t).element_count() != 1)
    unsupported(op, "input " + std::to_string(i) + " must be a float32 scalar");
  float v = 0.0f;
  std::memcpy(&v, host_value(s, t).bytes.data(), sizeof v);
  return v;
}

}  // namespace

BroadcastShape broadcast_shape(const ExecState &s, const Op &op, const std::vector<std::int64_t> &out,
                               const std::vector<TensorId> &operands) {
  if (out.size() > static_cast<std::size_t>(kMaxRank) || operands.size() > 3) unsupported(op, "rank above 8");
  BroadcastShape b;
  b.rank = static_cast<int>(out.size());
  for (std::size_t d = 0; d < out.size(); ++d) b.dims[d] = out[d];
  for (std::size_t k = 0; k < operands.size(); ++k) {
    const auto in = s.dims(operands[k]);
    if (in.size() > out.size()) unsupported(op, "an operand of higher rank than the output");
    for (std::size_t j = 0; j < in.size(); ++j) {
      const std::int64_t o = out[out.size() - in.size() + j];
      if (in[j] != 1 && in[j] != o) unsupported(op, "operand shapes do not broadcast to the output");
    }
    const auto st = broadcast_strides(in, out);
    for (std::size_t d = 0; d < out.size(); ++d) b.strides[k][d] = st[d];
  }
  return b;
}

namespace {

void zero(ExecState &s, TensorId t, const Op &op) {
  if (s.tensor(t).bytes())
    check(cudaMemsetAsync(s.ptr[t], 0, s.tensor(t).bytes(), s.ctx.stream()), "zero for op '" + op.name + "'");
}

// x viewed as [n, c, plane] for the BatchNorm ops.
void channel_view(const ExecState &s, const Op &op, TensorId x, std::int64_t &n, std::int64_t &c, std::int64_t &plane) {
  const auto d = s.dims(x);
  if (d.size() < 2) unsupported(op, "BatchNorm of a tensor of rank below 2");
  n = d[0];
  c = d[1];
  plane = dims_product(d, 2);
}

// The BatchNorm kernels' partial sums: a small device buffer of the op's own (library bytes, beside the arena),
// made on its first run.
void *batch_norm_scratch(ExecState &s, const Op &op, std::int64_t c) {
  auto &slot = s.prepared[s.id_of(op)];
  if (!slot) slot = std::make_shared<Buffer>(batch_norm_scratch_bytes(c), Buffer::Kind::device, "BatchNorm scratch of '" + op.name + "'");
  return static_cast<Buffer *>(slot.get())->data();
}

void run_batch_norm_training(ExecState &s, const Op &op) {
  BatchNormTrainingArgs a;
  channel_view(s, op, op.inputs.at(0), a.n, a.c, a.plane);
  const DType d = s.tensor(op.inputs[0]).dtype;
  a.storage = float_storage(op, d);
  a.x = data_of(s, op, op.inputs[0], d, "input 0");
  a.scale = in_f32(s, op, 1);
  a.bias = in_f32(s, op, 2);
  a.y = data_of(s, op, op.output(0), d, "output 0");
  a.running_mean_out = out_f32(s, op, 1);
  a.running_var_out = out_f32(s, op, 2);
  a.saved_mean = out_f32(s, op, 3);
  a.saved_invstd = out_f32(s, op, 4);
  if (a.running_mean_out) a.running_mean = in_f32(s, op, 3);
  if (a.running_var_out) a.running_var = in_f32(s, op, 4);
  a.epsilon = static_cast<float>(op.attr_float("epsilon", 1e-5));
  a.momentum = static_cast<float>(op.attr_float("momentum", 0.9));
  batch_norm_training(a, batch_norm_scratch(s, op, a.c), s.ctx.stream());
}

void run_batch_norm_grad(ExecState &s, const Op &op) {
  std::int64_t n = 0, c = 0, plane = 1;
  channel_view(s, op, op.inputs.at(1), n, c, plane);
  const DType d = s.tensor(op.inputs.at(0)).dtype;
  const TensorId dx = op.output(0);
  batch_norm_grad(data_of(s, op, op.inputs[0], d, "input 0"), data_of(s, op, op.inputs[1], d, "input 1"), in_f32(s, op, 2),
                  in_f32(s, op, 3), in_f32(s, op, 4), dx == kNoTensor || !s.ptr[dx] ? nullptr : data_of(s, op, dx, d, "output 0"),
                  out_f32(s, op, 1), out_f32(s, op, 2), n, c, plane, float_storage(op, d), batch_norm_scratch(s, op, c),
                  s.ctx.stream());
}

}  // namespace

// The window geometry is the CPU kernels' own (cpu::window: pads, auto_pad,
// dilations, 1-D as 2-D), from the pool's input x and output y.
AvgPoolGeometry pool_window(const ExecState &s, const Op &op, TensorId x, TensorId y) {
  TensorRef x_ref, y_ref;
  x_ref.dtype = s.tensor(x).dtype;
  x_ref.shape = s.dims(x);
  y_ref.dtype = s.tensor(y).dtype;
  y_ref.shape = s.dims(y);
  const cpu::Window w = cpu::window(op, x_ref, y_ref, op.attr_ints("kernel_shape"));
  AvgPoolGeometry p;
  p.d = w.in[0];
  p.od = w.out[0];
  p.kd = w.k[0];
  p.sd = w.stride[0];
  p.dd = w.dil[0];
  p.pd = w.pad[0];
  p.pd_end = w.pad_end[0];
  p.nc = w.N * w.C;
  p.h = w.in[1];
  p.w = w.in[2];
  p.oh = w.out[1];
  p.ow = w.out[2];
  p.kh = w.k[1];
  p.kw = w.k[2];
  p.sh = w.stride[1];
  p.sw = w.stride[2];
  p.dh = w.dil[1];
  p.dw = w.dil[2];
  p.ph = w.pad[1];
  p.pw = w.pad[2];
  p.ph_end = w.pad_end[1];
  p.pw_end = w.pad_end[2];
  p.count_include_pad = op.attr_int("count_include_pad", 0) != 0;
  return p;
}

namespace {

void run_average_pool_grad(ExecState &s, const Op &op) {
  const TensorId dy = op.inputs.at(0), dx = op.outputs.at(0);
  const DType d = s.tensor(dy).dtype;
  average_pool_grad(data_of(s, op, dy, d, "input 0"), data_of(s, op, dx, d, "output 0"), float_storage(op, d),
                    pool_window(s, op, dx, dy), s.ctx.stream());
}

// dX = dY in the sliced region, zeros elsewhere (the forward Slice's arguments moved one input right): with unit
// steps one zero-padding pass, else a zero fill and a strided copy.
void run_slice_grad(ExecState &s, const Op &op) {
  const TensorId dy = op.inputs.at(0), dx = op.outputs.at(0);
  const auto xd = s.dims(dx);
  const auto starts = int_arg(s, op, 1, "starts");
  auto axes = int_arg(s, op, 3, "axes");
  const auto steps = int_arg(s, op, 4, "", std::vector<std::int64_t>(starts.size(), 1));
  if (axes.empty())
    for (std::size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<std::int64_t>(k));
  const auto xs = contiguous_strides(xd);
  std::vector<std::int64_t> st = xs;
  std::int64_t base = 0;
  std::vector<std::int64_t> begin(xd.size(), 0);  // per axis, the first element the slice took
  for (std::size_t k = 0; k < starts.size() && k < axes.size() && k < steps.size(); ++k) {
    const std::size_t a = norm_axis(axes[k], xd.size(), op);
    if (steps[k] == 0) unsupported(op, "step 0");
    const std::int64_t dim = xd[a];
    std::int64_t b = starts[k] < 0 ? starts[k] + dim : starts[k];
    b = steps[k] > 0 ? std::clamp<std::int64_t>(b, 0, dim) : std::clamp<std::int64_t>(b, 0, dim - 1);
    base += b * xs[a];
    begin[a] = b;
    st[a] = xs[a] * steps[k];
  }
  const auto yd = s.dims(dy);
  const int eb = elem_bytes(s, dx);
  const bool unit_steps = std::all_of(steps.begin(), steps.end(), [](std::int64_t k) { return k == 1; });
  if (unit_steps && yd.size() == xd.size() && xd.size() <= static_cast<std::size_t>(kMaxRank) && dims_product(yd) > 0) {
    // dX is dY zero-padded to X's dims: one pass writes every element (a zero fill and a copy would write the slice
    // twice).
    PadShape p;
    p.rank = static_cast<int>(xd.size());
    p.elem_bytes = eb;
    const auto ys = contiguous_strides(yd);
    for (std::size_t d = 0; d < xd.size(); ++d) {
      p.out_dims[d] = xd[d];
      p.in_strides[d] = ys[d];
      p.axes[d] = PadAxis{0, yd[d], begin[d]};
    }
    pad(p, s.ptr[dy], nullptr, s.ptr[dx], s.ctx.stream());
    return;
  }
  zero(s, dx, op);
  if (dims_product(yd) == 0) return;
  copy_region(s, op, eb, yd, s.ptr[dy], contiguous_strides(yd), s.ptr[dx] + base * eb, st);
}

void run_gather_grad(ExecState &s, const Op &op) {
  const TensorId dy = op.inputs.at(0), idx = op.inputs.at(1), dx = op.outputs.at(0);
  const DType it = s.tensor(idx).dtype;
  if (it != DType::i64 && it != DType::i32) unsupported(op, "indices must be int64 or int32");
  const auto xd = s.dims(dx);
  const std::size_t axis = norm_axis(op.attr_int("axis", 0), xd.size(), op);
  const std::int64_t outer = dims_product(xd, 0, axis), dim = xd[axis], inner = dims_product(xd, axis + 1);
  const auto count = static_cast<std::int64_t>(s.tensor(idx).element_count());
  if (static_cast<std::int64_t>(s.tensor(dy).element_count()) != outer * count * inner)
    fail(ErrorKind::shape, "op '" + op.name +
                               "' (GatherGrad): dY does not hold outer x "
                               "indices x inner elements");
  gather_grad(in_f32(s, op, 0), s.ptr[idx], it == DType::i64, out_f32(s, op, 0), outer, dim, inner, count, s.ctx.stream());
}

// dX is the concatenation of the pieces' gradients along axis; an absent piece
// contributes zeros.
void run_split_grad(ExecState &s, const Op &op) {
  const TensorId dx = op.outputs.at(0);
  const auto xd = s.dims(dx);
  const std::size_t axis = norm_axis(op.attr_int("axis", 0), xd.size(), op);
  const auto split = op.attr_ints("split");
  if (split.size() != op.inputs.size()) unsupported(op, "one split size per piece expected");
  const std::int64_t outer = dims_product(xd, 0, axis), inner = dims_product(xd, axis + 1), row = xd[axis] * inner;
  const int eb = elem_bytes(s, dx);
  zero(s, dx, op);
  std::int64_t at = 0;
  for (std::size_t k = 0; k < op.inputs.size(); ++k) {
    const std::int64_t part = split[k] * inner;
    const TensorId piece = op.inputs[k];
    if (piece != kNoTensor && outer * part > 0) {
      if (static_cast<std::int64_t>(s.tensor(piece).element_count()) != outer * part)
        fail(ErrorKind::shape, "op '" + op.name + "' (SplitGrad): piece " + std::to_string(k) + " does not match its split size");
      copy_region(s, op, eb, {outer, part}, s.ptr[piece], {part, 1}, s.ptr[dx] + at * eb, {row, 1});
    }
    at += part;
  }
}

// DropoutGrad (divide by 1 - ratio where kept) and WhereGrad (pass where cond
// == select) with a bool mask.
void run_masked_grad(ExecState &s, const Op &op, bool dropout) {
  const TensorId dy = op.inputs.at(0), mask = op.inputs.at(1), dx = op.outputs.at(0);
  const auto out = s.dims(dx);
  if (s.dims(dy) != out) unsupported(op, "dY must have the gradient's shape");
  const float ratio = dropout ? scalar_arg(s, op, 2, 0.5f) : 0.0f;
  const bool select = dropout || op.attr_int("select", 1) != 0;
  masked_grad(in_f32(s, op, 0), reinterpret_cast<const std::uint8_t *>(s.ptr[mask]), out_f32(s, op, 0),
              broadcast_shape(s, op, out, {mask}), select, dropout, ratio, s.ctx.stream());
}

bool is_bool(const ExecState &s, TensorId t) { return t != kNoTensor && s.tensor(t).dtype == DType::boolean; }

void copy_if_moved(ExecState &s, const Op &op, TensorId in, TensorId out) {
  if (s.ptr[in] != s.ptr[out] && s.tensor(out).bytes())
    check(cudaMemcpyAsync(s.ptr[out], s.ptr[in], s.tensor(out).bytes(), cudaMemcpyDeviceToDevice, s.ctx.stream()),
          "copy for op '" + op.name + "'");
}

// Dropout: the identity with an all-true mask unless training_mode (input 2) is
// true; then the deterministic mask of dropout_mask.hpp, as the CPU kernel
// draws it.
void run_dropout(ExecState &s, const Op &op) {
  const TensorId x = op.inputs.at(0), y = op.outputs.at(0), mask = op.output(1);
  bool training = false;
  if (op.input(2) != kNoTensor) {
    if (!is_bool(s, op.input(2))) unsupported(op, "training_mode must be bool");
    const auto v = host_value(s, op.input(2));
    training = !v.bytes.empty() && v.bytes[0] != std::byte{0};
  }
  auto *mask_bytes = mask == kNoTensor ? nullptr : reinterpret_cast<std::uint8_t *>(s.ptr[mask]);
  if (mask != kNoTensor && s.tensor(mask).dtype != DType::boolean) unsupported(op, "the mask must be bool");
  if (!training) {
    copy_if_moved(s, op, x, y);
    if (mask_bytes && s.tensor(mask).bytes())
      check(cudaMemsetAsync(mask_bytes, 1, s.tensor(mask).bytes(), s.ctx.stream()), "mask for op '" + op.name + "'");
    return;
  }
  const DType dt = s.tensor(x).dtype;
  if (dt != DType::f32 && !is_half(dt)) unsupported(op, "training-mode Dropout of float32, bfloat16 or float16 only");
  const float ratio = scalar_arg(s, op, 1, static_cast<float>(op.attr_float("ratio", 0.5)));
  if (!(ratio >= 0.0f && ratio <= 1.0f)) unsupported(op, "ratio outside [0, 1]");
  const auto seed = static_cast<std::uint64_t>(op.attr_int("seed", static_cast<std::int64_t>(kDefaultDropoutSeed)));
  const auto n = static_cast<std::int64_t>(s.tensor(x).element_count());
  if (dt == DType::f32)
    dropout_forward(s.f32(x), s.f32(y), mask_bytes, n, step_key(seed), dropout_threshold(ratio), ratio, s.ctx.stream());
  else
    dropout_forward_half(s.ptr[x], s.ptr[y], dt == DType::bf16, mask_bytes, n, step_key(seed), dropout_threshold(ratio), ratio,
                         s.ctx.stream());
}

void run_where(ExecState &s, const Op &op) {
  const TensorId c = op.inputs.at(0), x = op.inputs.at(1), y = op.inputs.at(2), out = op.outputs.at(0);
  if (!is_bool(s, c) || s.tensor(x).dtype != s.tensor(y).dtype) unsupported(op, "bool condition and equal value dtypes expected");
  where(reinterpret_cast<const std::uint8_t *>(s.ptr[c]), s.ptr[x], s.ptr[y], s.ptr[out],
        broadcast_shape(s, op, s.dims(out), {c, x, y}), elem_bytes(s, x), s.ctx.stream());
}

void run_tile(ExecState &s, const Op &op) {
  const TensorId x = op.inputs.at(0), out = op.outputs.at(0);
  const auto xd = s.dims(x), od = s.dims(out);
  if (xd.size() != od.size() || od.size() > static_cast<std::size_t>(kMaxRank)) unsupported(op, "ranks differ or exceed 8");
  TileShape t;
  t.rank = static_cast<int>(od.size());
  const auto xs = contiguous_strides(xd);
  for (std::size_t k = 0; k < od.size(); ++k) {
    t.out_dims[k] = od[k];
    t.in_dims[k] = xd[k];
    t.in_strides[k] = xs[k];
  }
  tile(s.ptr[x], s.ptr[out], t, elem_bytes(s, x), s.ctx.stream());
}

void run_shape(ExecState &s, const Op &op) {
  const auto d = s.dims(op.inputs.at(0));
  const auto r = static_cast<std::int64_t>(d.size());
  std::int64_t start = op.attr_int("start", 0), end = op.attr_int("end", r);
  start = std::clamp<std::int64_t>(start < 0 ? start + r : start, 0, r);
  end = std::clamp<std::int64_t>(end < 0 ? end + r : end, 0, r);
  const std::vector<std::int64_t> dims(d.begin() + start, d.begin() + std::max(start, end));
  const TensorId out = op.outputs.at(0);
  if (s.tensor(out).dtype != DType::i64 || s.tensor(out).element_count() != dims.size())
    unsupported(op, "int64 output of the slice's length expected");
  if (dims.empty()) return;
  // From pageable memory: the call returns once `dims` is staged, so the vector
  // may go out of scope.
  check(cudaMemcpyAsync(s.ptr[out], dims.data(), dims.size() * sizeof(std::int64_t), cudaMemcpyHostToDevice, s.ctx.stream()),
        "Shape '" + op.name + "'");
}

void run_constant_of_shape(ExecState &s, const Op &op) {
  const TensorId out = op.outputs.at(0);
  const int eb = elem_bytes(s, out);
  std::uint64_t pattern = 0;
  if (const analysis::Attribute *v = op.attr("value"); v && v->t) {
    if (v->t->bytes.size() != static_cast<std::size_t>(eb)) unsupported(op, "value must be one element of the output dtype");
    std::memcpy(&pattern, v->t->bytes.data(), v->t->bytes.size());
  }
  fill_pattern(s.ptr[out], static_cast<std::int64_t>(s.tensor(out).element_count()), eb, pattern, s.ctx.stream());
}

// ReduceProd and ReduceSumSquare with the CPU kernel's axes rules (attribute,
// or input 1 when present).
void run_serial_reduce(ExecState &s, const Op &op, bool prod) {
  const TensorId x = op.inputs.at(0);
  const float* px = in_f32(s, op, 0);
  const auto d = s.dims(x);
  if (d.size() > static_cast<std::size_t>(kMaxRank)) unsupported(op, "rank above 8");
  std::vector<std::int64_t> axes = op.attr_ints("axes");
  if (op.input(1) != kNoTensor) axes = int_arg(s, op, 1, "axes");
  std::vector<bool> reduced(d.size(), axes.empty() && op.attr_int("noop_with_empty_axes", 0) == 0);
  for (auto a : axes) reduced[norm_axis(a, d.size(), op)] = true;
  const auto st = contiguous_strides(d);
  ReduceSpec spec;
  for (std::size_t k = 0; k < d.size(); ++k) {
    if (reduced[k]) {
      spec.red_dims[spec.red_rank] = d[k];
      spec.red_strides[spec.red_rank++] = st[k];
    } else {
      spec.out_dims[spec.out_rank] = d[k];
      spec.out_strides[spec.out_rank++] = st[k];
    }
  }
  reduce_serial(px, out_f32(s, op, 0), spec, prod, s.ctx.stream());
}

}  // namespace

bool run_layer_training_op(ExecState &s, const Op &op) {
  if (op.domain != "memplan") return false;
  const std::string &t = op.type;
  if (t == "BatchNormTraining") return run_batch_norm_training(s, op), true;
  if (t == "BatchNormGrad") return run_batch_norm_grad(s, op), true;
  if (t == "AveragePoolGrad") return run_average_pool_grad(s, op), true;
  if (t == "SliceGrad") return run_slice_grad(s, op), true;
  if (t == "GatherGrad") return run_gather_grad(s, op), true;
  if (t == "SplitGrad") return run_split_grad(s, op), true;
  // With a float mask, or a bf16/f16 gradient, these stay with the generated
  // elementwise kernels (cuda_training_ops.cpp; bool masks load as 0 or 1).
  const bool f32_grad = !op.inputs.empty() && op.inputs[0] != kNoTensor && s.tensor(op.inputs[0]).dtype == DType::f32;
  if (t == "DropoutGrad" && is_bool(s, op.input(1)) && f32_grad) return run_masked_grad(s, op, true), true;
  if (t == "WhereGrad" && is_bool(s, op.input(1)) && f32_grad) return run_masked_grad(s, op, false), true;
  return false;
}

bool run_extra_op(ExecState &s, const Op &op) {
  if (!op.domain.empty() && op.domain != "ai.onnx") return false;
  const std::string &t = op.type;
  if (t == "Dropout") return run_dropout(s, op), true;
  if (t == "Where") return run_where(s, op), true;
  if (t == "IsNaN") {
    is_nan(in_f32(s, op, 0), reinterpret_cast<std::uint8_t *>(s.ptr[op.outputs.at(0)]),
           static_cast<std::int64_t>(s.tensor(op.inputs[0]).element_count()), s.ctx.stream());
    return true;
  }
  if (t == "Tile") return run_tile(s, op), true;
  if (t == "Shape") return run_shape(s, op), true;
  if (t == "ConstantOfShape") return run_constant_of_shape(s, op), true;
  if (t == "ReduceProd") return run_serial_reduce(s, op, true), true;
  if (t == "ReduceSumSquare") return run_serial_reduce(s, op, false), true;
  return run_compare_op(s, op);
}

}  // namespace memplan::runtime::cuda
