// CPU kernels of memplan's reduction and data-movement gradients: ReduceSumTo, BroadcastTo, SliceGrad, PadGrad,
// GatherGrad, GatherElementsGrad, SplitGrad (docs/backward-ops.md).
#include <algorithm>

#include "runtime_allocator/kernels/cpu_kernels.hpp"
#include "runtime_allocator/kernels/pad_index.hpp"

namespace memplan::runtime::cpu {
namespace {

void zero(const TensorRef& t) { std::fill_n(t.as<float>(), t.elements(), 0.0f); }

void k_reduce_sum_to(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& g = required(op, in, 0);
  const float scale = static_cast<float>(op.attr_float("scale", 1.0));
  zero(out[0]);
  float* r = out[0].as<float>();
  const float* pg = g.as<float>();
  strided_loop(g.shape, {broadcast_strides(out[0].shape, g.shape)}, [&](std::int64_t i, const Offsets& o) { r[o[0]] += pg[i]; });
  if (scale != 1.0f)
    for (std::int64_t i = 0; i < out[0].elements(); ++i) r[i] *= scale;
}

void k_broadcast_to(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& dy = required(op, in, 0);
  const float scale = static_cast<float>(op.attr_float("scale", 1.0));
  std::vector<std::int64_t> shape = dy.shape;
  if (op.attr_int("keepdims", 1) == 0) {
    const std::size_t rank = out[0].shape.size();
    std::vector<bool> reduced(rank, false);
    for (auto a : op.attr_ints("axes")) reduced[static_cast<std::size_t>(normalize_axis(op, a, rank))] = true;
    shape.clear();
    std::size_t next = 0;
    for (std::size_t k = 0; k < rank; ++k) shape.push_back(reduced[k] ? 1 : dy.shape.at(next++));
  }
  const float* p = dy.as<float>();
  float* y = out[0].as<float>();
  strided_loop(out[0].shape, {broadcast_strides(shape, out[0].shape)}, [&](std::int64_t i, const Offsets& o) { y[i] = p[o[0]] * scale; });
}

void k_slice_grad(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& dy = required(op, in, 0);
  const TensorRef& dx = out[0];
  // The forward Slice's arguments moved one input to the right (dY takes X's place).
  const auto starts = in.size() > 1 && in[1].data ? int_values(op, in[1]) : op.attr_ints("starts");
  std::vector<std::int64_t> axes = in.size() > 3 && in[3].data ? int_values(op, in[3]) : op.attr_ints("axes");
  const auto steps = in.size() > 4 && in[4].data ? int_values(op, in[4]) : std::vector<std::int64_t>(starts.size(), 1);
  if (axes.empty())
    for (std::size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<std::int64_t>(k));
  const auto xs = contiguous_strides(dx.shape);
  std::vector<std::int64_t> s = xs;
  std::int64_t base = 0;
  for (std::size_t k = 0; k < starts.size() && k < axes.size() && k < steps.size(); ++k) {
    const auto a = static_cast<std::size_t>(normalize_axis(op, axes[k], dx.shape.size()));
    const std::int64_t dim = dx.shape[a];
    std::int64_t st = starts[k] < 0 ? starts[k] + dim : starts[k];
    st = steps[k] > 0 ? std::clamp<std::int64_t>(st, 0, dim) : std::clamp<std::int64_t>(st, 0, dim - 1);
    base += st * xs[a];
    s[a] = xs[a] * steps[k];
  }
  zero(dx);
  strided_loop(dy.shape, {s}, [&](std::int64_t i, const Offsets& o) { dx.as<float>()[base + o[0]] = dy.as<float>()[i]; });
}

void k_gather_grad(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& dy = required(op, in, 0);
  const auto idx = int_values(op, required(op, in, 1));
  const TensorRef& dd = out[0];
  const auto axis = static_cast<std::size_t>(normalize_axis(op, op.attr_int("axis", 0), dd.shape.size()));
  const std::int64_t outer = dims_product(dd.shape, 0, axis), dim = dd.shape[axis], inner = dims_product(dd.shape, axis + 1);
  const auto count = static_cast<std::int64_t>(idx.size());
  zero(dd);
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t j = 0; j < count; ++j) {
      std::int64_t i = idx[static_cast<std::size_t>(j)];
      if (i < -dim || i >= dim) fail(ErrorKind::runtime, "op '" + op.name + "' (GatherGrad): index out of range");
      if (i < 0) i += dim;
      for (std::int64_t e = 0; e < inner; ++e) dd.as<float>()[(o * dim + i) * inner + e] += dy.as<float>()[(o * count + j) * inner + e];
    }
}

// GatherElementsGrad(dY, indices) -> dX of the forward's x shape: zeros, each dY element added at its gathered
// position (repeated indices accumulate, in element order).
void k_gather_elements_grad(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& dy = required(op, in, 0);
  const auto idx = int_values(op, required(op, in, 1));
  const TensorRef& dx = out[0];
  const std::size_t r = dx.shape.size();
  const auto axis = static_cast<std::size_t>(normalize_axis(op, op.attr_int("axis", 0), r));
  if (dy.shape.size() != r) unsupported(op, "dY of dX's rank expected");
  zero(dx);
  const auto xs = contiguous_strides(dx.shape);
  std::vector<std::int64_t> s = xs;
  s[axis] = 0;
  const std::int64_t dim = dx.shape[axis];
  float* pdx = dx.as<float>();
  const float* pdy = dy.as<float>();
  strided_loop(dy.shape, {s}, [&](std::int64_t i, const Offsets& o) {
    std::int64_t j = idx[static_cast<std::size_t>(i)];
    if (j < -dim || j >= dim) fail(ErrorKind::runtime, "op '" + op.name + "' (GatherElementsGrad): index out of range");
    if (j < 0) j += dim;
    pdx[o[0] + j * xs[axis]] += pdy[i];
  });
}

void k_split_grad(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& dx = out[0];
  const auto axis = static_cast<std::size_t>(normalize_axis(op, op.attr_int("axis", 0), dx.shape.size()));
  const auto split = op.attr_ints("split");
  if (split.size() != in.size()) unsupported(op, "one split size per piece expected");
  const std::int64_t outer = dims_product(dx.shape, 0, axis), inner = dims_product(dx.shape, axis + 1), row = dx.shape[axis] * inner;
  std::int64_t at = 0;
  for (std::size_t k = 0; k < in.size(); ++k) {
    const std::int64_t part = split[k] * inner;
    for (std::int64_t o = 0; o < outer; ++o) {
      float* dst = dx.as<float>() + o * row + at;
      if (in[k].data) std::copy_n(in[k].as<float>() + o * part, part, dst);
      else std::fill_n(dst, part, 0.0f);
    }
    at += part;
  }
}

// PadGrad: dX[x] = the sum of dY over the output coordinates that read x (pad_preimage per axis, their product in
// odometer order: the CUDA kernel's order), float32 sums.
void k_pad_grad(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& dy = required(op, in, 0);
  const TensorRef& dx = out[0];
  PadMode mode{};
  if (!parse_pad_mode(op.attr_string("mode", "constant"), mode)) unsupported(op, "mode " + op.attr_string("mode", ""));
  const std::size_t rank = dx.shape.size();
  const auto ax = pad_axes(dx.shape, op.attr_ints("pads"), {});
  if (ax.size() != rank || dy.shape.size() != rank) unsupported(op, "pads do not give a begin and an end per axis");
  const auto ys = contiguous_strides(dy.shape);
  std::vector<PadPreimage> pre(rank);
  std::vector<std::int64_t> k(rank);
  const float* g = dy.as<float>();
  for (std::int64_t i = 0; i < dx.elements(); ++i) {
    std::int64_t rest = i;
    bool done = false;  // an x element that was cropped away reads nothing
    for (std::size_t d = rank; d-- > 0;) {
      pre[d] = pad_preimage(mode, ax[d], dy.shape[d], rest % dx.shape[d]);
      rest /= dx.shape[d];
      done = done || pre[d].size() == 0;
    }
    float acc = 0.0f;
    std::fill(k.begin(), k.end(), 0);
    while (!done) {
      std::int64_t off = 0;
      for (std::size_t d = 0; d < rank; ++d) off += pre[d].at(k[d]) * ys[d];
      acc += g[off];
      std::size_t d = rank;
      while (d-- > 0 && ++k[d] == pre[d].size()) k[d] = 0;
      done = d == static_cast<std::size_t>(-1);  // every axis wrapped around
    }
    dx.as<float>()[i] = acc;
  }
}

}  // namespace

void add_gradient_shape_kernels(KernelTable& t) {
  t["memplan::ReduceSumTo"] = {k_reduce_sum_to, false};
  t["memplan::BroadcastTo"] = {k_broadcast_to, false};
  t["memplan::SliceGrad"] = {k_slice_grad, false};
  t["memplan::PadGrad"] = {k_pad_grad, false};
  t["memplan::GatherGrad"] = {k_gather_grad, false};
  t["memplan::GatherElementsGrad"] = {k_gather_elements_grad, false};
  t["memplan::SplitGrad"] = {k_split_grad, false};
}

}  // namespace memplan::runtime::cpu
