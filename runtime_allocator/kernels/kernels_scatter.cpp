// CPU kernels of N-d indexing: GatherND (batch_dims), ScatterND and ScatterElements (reduction none, add, mul, max,
// min; negative indices count from the end), over every dtype the tensors may have.
#include <algorithm>

#include "runtime_allocator/kernels/cpu_kernels.hpp"
#include "runtime_allocator/kernels/scatter_reduction.hpp"

namespace memplan::runtime::cpu {
namespace {

std::int64_t esize(const TensorRef& t) { return static_cast<std::int64_t>(analysis::dtype_bits(t.dtype) / 8); }

using Reduction = ScatterReduction;

Reduction reduction_of(const Op& op) {
  Reduction r{};
  if (!parse_scatter_reduction(op.attr_string("reduction", "none"), r))
    unsupported(op, "reduction '" + op.attr_string("reduction", "") + "'");
  return r;
}

// Index j along a dim of `dim` elements, negative counting from the end; ErrorKind::runtime out of range.
std::int64_t wrap_index(const Op& op, std::int64_t j, std::int64_t dim) {
  if (j < -dim || j >= dim)
    fail(ErrorKind::runtime, "op '" + op.name + "' (" + op.type + "): index " + std::to_string(j) +
                                 " out of range for a dim of " + std::to_string(dim));
  return j < 0 ? j + dim : j;
}

// y[at] = y[at] (reduction) u, in the data's own dtype.
template <class T>
void apply(Reduction r, T& y, T u) {
  switch (r) {
    case Reduction::none:
      y = u;
      break;
    case Reduction::add:
      y = static_cast<T>(y + u);
      break;
    case Reduction::mul:
      y = static_cast<T>(y * u);
      break;
    case Reduction::max:
      y = std::max(y, u);
      break;
    case Reduction::min:
      y = std::min(y, u);
      break;
  }
}

// Calls f(update_offset, output_offset, count) for each contiguous run of `count` elements an update writes.
template <class F>
void scatter_runs(const Op& op, const TensorRef& data, const TensorRef& indices, F&& f) {
  const auto idx = int_values(op, indices);
  if (indices.shape.empty()) unsupported(op, "indices of rank 0");
  const auto k = static_cast<std::size_t>(indices.shape.back());
  if (k > data.shape.size()) unsupported(op, "index tuples longer than data's rank");
  const auto ds = contiguous_strides(data.shape);
  const std::int64_t slice = dims_product(data.shape, k),
                     tuples = k ? static_cast<std::int64_t>(idx.size() / k) : dims_product(indices.shape);
  for (std::int64_t t = 0; t < tuples; ++t) {
    std::int64_t off = 0;
    for (std::size_t j = 0; j < k; ++j) off += wrap_index(op, idx[static_cast<std::size_t>(t) * k + j], data.shape[j]) * ds[j];
    f(t * slice, off, slice);
  }
}

void k_scatter_nd(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& data = required(op, in, 0);
  const TensorRef& upd = required(op, in, 2);
  const TensorRef& y = out[0];
  copy_if_moved(y.data, data.data, data.bytes);
  const Reduction red = reduction_of(op);
  if (red == Reduction::none) {
    const std::int64_t es = esize(y);
    scatter_runs(op, data, required(op, in, 1), [&](std::int64_t u, std::int64_t o, std::int64_t n) {
      std::memcpy(y.data + o * es, upd.data + u * es, static_cast<std::size_t>(n * es));
    });
    return;
  }
  visit_dtype(op, y.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* py = y.as<T>();
    const T* pu = upd.as<T>();
    scatter_runs(op, data, required(op, in, 1), [&](std::int64_t u, std::int64_t o, std::int64_t n) {
      for (std::int64_t e = 0; e < n; ++e) apply(red, py[o + e], pu[u + e]);
    });
  });
}

void k_scatter_elements(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& data = required(op, in, 0);
  const auto idx = int_values(op, required(op, in, 1));
  const TensorRef& upd = required(op, in, 2);
  const TensorRef& y = out[0];
  const std::size_t r = data.shape.size();
  const auto axis = static_cast<std::size_t>(normalize_axis(op, op.attr_int("axis", 0), r));
  if (upd.shape.size() != r || in[1].shape != upd.shape)
    unsupported(op, "indices and updates of data's rank and one shape expected");
  copy_if_moved(y.data, data.data, data.bytes);
  const Reduction red = reduction_of(op);
  const auto ds = contiguous_strides(data.shape);
  std::vector<std::int64_t> s = ds;
  s[axis] = 0;  // the axis coordinate comes from the index
  const std::int64_t dim = data.shape[axis], es = esize(y);
  auto at = [&](std::int64_t i, const Offsets& o) {
    return o[0] + wrap_index(op, idx[static_cast<std::size_t>(i)], dim) * ds[axis];
  };
  if (red == Reduction::none) {
    strided_loop(upd.shape, {s}, [&](std::int64_t i, const Offsets& o) {
      std::memcpy(y.data + at(i, o) * es, upd.data + i * es, static_cast<std::size_t>(es));
    });
    return;
  }
  visit_dtype(op, y.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* py = y.as<T>();
    const T* pu = upd.as<T>();
    strided_loop(upd.shape, {s}, [&](std::int64_t i, const Offsets& o) { apply(red, py[at(i, o)], pu[i]); });
  });
}

// GatherND: per batch (the first batch_dims axes of data and indices), each index tuple of length k picks the
// slice data[batch, i0, .., ik-1, ...].
void k_gather_nd(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& data = required(op, in, 0);
  const TensorRef& indices = required(op, in, 1);
  const auto idx = int_values(op, indices);
  const auto b = static_cast<std::size_t>(op.attr_int("batch_dims", 0));
  if (indices.shape.empty() || b >= indices.shape.size()) unsupported(op, "indices of rank above batch_dims expected");
  const auto k = static_cast<std::size_t>(indices.shape.back());
  if (b + k > data.shape.size()) unsupported(op, "index tuples longer than data's rank");
  const auto ds = contiguous_strides(data.shape);
  const std::int64_t batches = dims_product(data.shape, 0, b), slice = dims_product(data.shape, b + k);
  const std::int64_t per_batch = dims_product(indices.shape, b, indices.shape.size() - 1);
  const std::int64_t es = esize(data), batch_stride = b ? ds[b - 1] : 0;
  std::byte* y = out[0].data;
  for (std::int64_t bi = 0; bi < batches; ++bi)
    for (std::int64_t t = 0; t < per_batch; ++t) {
      const std::size_t at = static_cast<std::size_t>(bi * per_batch + t) * k;
      std::int64_t off = bi * batch_stride;
      for (std::size_t j = 0; j < k; ++j) off += wrap_index(op, idx[at + j], data.shape[b + j]) * ds[b + j];
      std::memcpy(y + (bi * per_batch + t) * slice * es, data.data + off * es, static_cast<std::size_t>(slice * es));
    }
}

}  // namespace

void add_scatter_kernels(KernelTable& t) {
  t["GatherND"] = {k_gather_nd, false, {kAnyDType}};
  t["ScatterND"] = {k_scatter_nd, false, {kAnyDType}};
  t["ScatterElements"] = {k_scatter_elements, false, {kAnyDType}};
}

}  // namespace memplan::runtime::cpu
