// CPU data-movement kernels: views (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout), Transpose,
// Split, Concat, Slice, Gather, Expand, Tile, Shape, ConstantOfShape.
#include <algorithm>

#include "runtime_allocator/kernels/cpu_kernels.hpp"
#include "runtime_allocator/kernels/dropout_mask.hpp"

namespace memplan::runtime::cpu {
namespace {

std::int64_t esize(const TensorRef& t) { return static_cast<std::int64_t>(analysis::dtype_bits(t.dtype) / 8); }

// dst (contiguous, `out` shape) gets src read at base + sum idx[k] * src_strides[k] (in elements).
void gather_strided(const TensorRef& src, std::int64_t base, const std::vector<std::int64_t>& src_strides, const TensorRef& dst) {
  const std::int64_t es = esize(dst);
  strided_loop(dst.shape, {src_strides}, [&](std::int64_t i, const Offsets& o) {
    std::memcpy(dst.data + i * es, src.data + (base + o[0]) * es, static_cast<std::size_t>(es));
  });
}

// Views: the output holds the input's bytes; nothing moves when the plan binds both to one address.
void k_view(const Op& op, const Refs& in, const Refs& out) {
  copy_if_moved(out[0].data, required(op, in, 0).data, out[0].bytes);
}

// Dropout: inference mode (training_mode absent or false) is the identity with an all-true mask. Training mode
// draws the mask from dropout_mask.hpp's hash of (seed, element index), the same on every backend and run:
// y = mask ? x / (1 - ratio) : 0.
void k_dropout(const Op& op, const Refs& in, const Refs& out) {
  const bool training = in.size() > 2 && in[2].data && *in[2].as<bool>();
  const bool has_mask = out.size() > 1 && out[1].data;
  if (!training) {
    k_view(op, in, out);
    if (has_mask) std::fill_n(out[1].as<bool>(), out[1].elements(), true);
    return;
  }
  const TensorRef& x = required(op, in, 0);
  if (x.dtype != DType::f32) unsupported(op, "training-mode Dropout of float32 only");
  const float ratio = scalar_value(op, in, 1, static_cast<float>(op.attr_float("ratio", 0.5)));
  if (!(ratio >= 0.0f && ratio <= 1.0f)) unsupported(op, "ratio outside [0, 1]");
  const std::uint64_t key =
      step_key(static_cast<std::uint64_t>(op.attr_int("seed", static_cast<std::int64_t>(kDefaultDropoutSeed))));
  const std::uint64_t threshold = dropout_threshold(ratio);
  const float* px = x.as<float>();
  float* py = out[0].as<float>();
  for (std::int64_t i = 0; i < x.elements(); ++i) {
    const bool keep = dropout_keep(key, static_cast<std::uint64_t>(i), threshold);
    py[i] = keep ? px[i] / (1.0f - ratio) : 0.0f;  // x[i] read before y[i] written: y may alias x
    if (has_mask) out[1].as<bool>()[i] = keep;
  }
}

void k_transpose(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  const std::size_t r = x.shape.size();
  std::vector<std::int64_t> perm = op.attr_ints("perm");
  if (perm.empty())
    for (std::size_t k = 0; k < r; ++k) perm.push_back(static_cast<std::int64_t>(r - 1 - k));
  if (perm.size() != r) unsupported(op, "perm has the wrong length");
  const auto xs = contiguous_strides(x.shape);
  std::vector<std::int64_t> s(r);
  for (std::size_t k = 0; k < r; ++k) s[k] = xs[static_cast<std::size_t>(normalize_axis(op, perm[k], r))];
  gather_strided(x, 0, s, out[0]);
}

// memplan Roll: y[c] = x[c - shift mod dim] along each rolled axis; the axes after the last rolled one move as one
// contiguous block.
void k_roll(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  const std::size_t r = x.shape.size();
  const auto shifts = op.attr_ints("shifts"), axes = op.attr_ints("axes");
  if (shifts.size() != axes.size()) unsupported(op, "one shift per axis expected");
  std::vector<std::int64_t> shift(r, 0);
  std::size_t last = 0;  // one past the last rolled axis
  for (std::size_t k = 0; k < axes.size(); ++k) {
    const auto a = static_cast<std::size_t>(normalize_axis(op, axes[k], r));
    const std::int64_t n = x.shape[a];
    if (n > 0) shift[a] = ((shift[a] + shifts[k]) % n + n) % n;
    last = std::max(last, a + 1);
  }
  const std::int64_t block = dims_product(x.shape, last) * esize(x), rows = dims_product(x.shape, 0, last);
  const auto xs = contiguous_strides(std::vector<std::int64_t>(x.shape.begin(), x.shape.begin() + static_cast<std::ptrdiff_t>(last)));
  for (std::int64_t i = 0; i < rows; ++i) {
    std::int64_t src = 0, rest = i;
    for (std::size_t d = last; d-- > 0;) {
      const std::int64_t n = x.shape[d], c = rest % n;
      rest /= n;
      src += ((c - shift[d] + n) % n) * xs[d];
    }
    std::memcpy(out[0].data + i * block, x.data + src * block, static_cast<std::size_t>(block));
  }
}

// Copies each part of a concatenation along `axis` into (or, for split, out of) the whole.
void k_split(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  const auto axis = static_cast<std::size_t>(normalize_axis(op, op.attr_int("axis", 0), x.shape.size()));
  const std::int64_t outer = dims_product(x.shape, 0, axis), row = dims_product(x.shape, axis) * esize(x);
  std::int64_t at = 0;
  for (const auto& y : out) {
    const std::int64_t part = dims_product(y.shape, axis) * esize(y);
    if (y.data)
      for (std::int64_t o = 0; o < outer; ++o) std::memcpy(y.data + o * part, x.data + o * row + at, static_cast<std::size_t>(part));
    at += part;
  }
}

void k_concat(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& y = out[0];
  const auto axis = static_cast<std::size_t>(normalize_axis(op, op.attr_int("axis", 0), y.shape.size()));
  const std::int64_t outer = dims_product(y.shape, 0, axis), row = dims_product(y.shape, axis) * esize(y);
  std::int64_t at = 0;
  for (const auto& x : in) {
    if (!x.data) continue;
    const std::int64_t part = dims_product(x.shape, axis) * esize(x);
    for (std::int64_t o = 0; o < outer; ++o) std::memcpy(y.data + o * row + at, x.data + o * part, static_cast<std::size_t>(part));
    at += part;
  }
}

void k_slice(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  const std::size_t r = x.shape.size();
  const auto starts = in.size() > 1 && in[1].data ? int_values(op, in[1]) : op.attr_ints("starts");
  const auto ends = in.size() > 2 && in[2].data ? int_values(op, in[2]) : op.attr_ints("ends");
  std::vector<std::int64_t> axes = in.size() > 3 && in[3].data ? int_values(op, in[3]) : op.attr_ints("axes");
  const auto steps = in.size() > 4 && in[4].data ? int_values(op, in[4]) : std::vector<std::int64_t>(starts.size(), 1);
  if (axes.empty())
    for (std::size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<std::int64_t>(k));
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    unsupported(op, "starts, ends, axes and steps differ in length");
  const auto xs = contiguous_strides(x.shape);
  std::vector<std::int64_t> s = xs;
  std::int64_t base = 0;
  for (std::size_t k = 0; k < starts.size(); ++k) {
    const auto a = static_cast<std::size_t>(normalize_axis(op, axes[k], r));
    const std::int64_t dim = x.shape[a], step = steps[k];
    if (step == 0) unsupported(op, "step 0");
    std::int64_t st = starts[k] < 0 ? starts[k] + dim : starts[k];
    st = step > 0 ? std::clamp<std::int64_t>(st, 0, dim) : std::clamp<std::int64_t>(st, 0, dim - 1);
    base += st * xs[a];
    s[a] = xs[a] * step;
  }
  gather_strided(x, base, s, out[0]);
}

void k_gather(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  const auto idx = int_values(op, required(op, in, 1));
  const auto axis = static_cast<std::size_t>(normalize_axis(op, op.attr_int("axis", 0), x.shape.size()));
  const std::int64_t outer = dims_product(x.shape, 0, axis), dim = x.shape[axis], inner = dims_product(x.shape, axis + 1) * esize(x);
  const auto count = static_cast<std::int64_t>(idx.size());
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t j = 0; j < count; ++j) {
      std::int64_t i = idx[static_cast<std::size_t>(j)];
      if (i < -dim || i >= dim) fail(ErrorKind::runtime, "op '" + op.name + "' (Gather): index " + std::to_string(i) + " out of range for a dim of " + std::to_string(dim));
      if (i < 0) i += dim;
      std::memcpy(out[0].data + (o * count + j) * inner, x.data + (o * dim + i) * inner, static_cast<std::size_t>(inner));
    }
}

void k_expand(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  // The shape input as it is at run time (computed by Shape ops, or fed) must broadcast x to the planned output.
  const auto target = int_values(op, required(op, in, 1));
  const std::size_t rank = std::max(x.shape.size(), target.size());
  bool agrees = out[0].shape.size() == rank;
  for (std::size_t k = 0; agrees && k < rank; ++k) {
    const std::int64_t a = k + x.shape.size() >= rank ? x.shape[k + x.shape.size() - rank] : 1;
    const std::int64_t b = k + target.size() >= rank ? target[k + target.size() - rank] : 1;
    agrees = (a == b || a == 1 || b == 1) && out[0].shape[k] == (a == 1 ? b : a);
  }
  if (!agrees) fail(ErrorKind::runtime, "op '" + op.name + "' (Expand): the shape input's values at run time do not give the planned output shape");
  gather_strided(x, 0, broadcast_strides(x.shape, out[0].shape), out[0]);
}

void k_tile(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  const std::int64_t es = esize(x);
  const auto xs = contiguous_strides(x.shape);
  const auto ys = contiguous_strides(out[0].shape);
  const std::int64_t n = out[0].elements();
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t src = 0, rest = i;
    for (std::size_t k = 0; k < ys.size(); ++k) {
      src += (rest / ys[k]) % x.shape[k] * xs[k];
      rest %= ys[k];
    }
    std::memcpy(out[0].data + i * es, x.data + src * es, static_cast<std::size_t>(es));
  }
}

void k_shape(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  const auto r = static_cast<std::int64_t>(x.shape.size());
  std::int64_t start = op.attr_int("start", 0), end = op.attr_int("end", r);
  start = std::clamp<std::int64_t>(start < 0 ? start + r : start, 0, r);
  end = std::clamp<std::int64_t>(end < 0 ? end + r : end, 0, r);
  for (std::int64_t k = start; k < end; ++k) out[0].as<std::int64_t>()[k - start] = x.shape[static_cast<std::size_t>(k)];
}

void k_constant_of_shape(const Op& op, const Refs&, const Refs& out) {
  const analysis::Attribute* v = op.attr("value");
  const std::int64_t es = esize(out[0]), n = out[0].elements();
  std::vector<std::byte> one(static_cast<std::size_t>(es), std::byte{0});
  if (v && v->t) {
    if (v->t->element_count() != 1) unsupported(op, "value must be one element");
    // A value of another dtype than the output's is converted.
    one = v->t->dtype == out[0].dtype ? v->t->bytes : analysis::TensorData::from_double(out[0].dtype, {1}, v->t->as_double()).bytes;
    if (one.size() != static_cast<std::size_t>(es)) unsupported(op, "value must be one element of the output dtype");
  }
  for (std::int64_t i = 0; i < n; ++i) std::memcpy(out[0].data + i * es, one.data(), one.size());
}

}  // namespace

void add_shape_kernels(KernelTable& t) {
  // Bytes moved whatever the dtype (training-mode Dropout checks float32 itself).
  for (const char* v : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}) t[v] = {k_view, true, {kAnyDType}};
  t["Dropout"] = {k_dropout, true, {kAnyDType}};
  t["Transpose"] = {k_transpose, false, {kAnyDType}};
  t["Split"] = {k_split, false, {kAnyDType}};
  t["Concat"] = {k_concat, false, {kAnyDType}};
  t["Slice"] = {k_slice, false, {kAnyDType}};
  t["memplan::Roll"] = {k_roll, false, {kAnyDType}};
  t["Gather"] = {k_gather, false, {kAnyDType}};
  t["Expand"] = {k_expand, false, {kAnyDType}};
  t["Tile"] = {k_tile, false, {kAnyDType}};
  t["Shape"] = {k_shape, false, {kAnyDType}};
  // Native in 16-bit floats: its value is one element of the output's dtype, written as bytes (widened, the f32
  // stand-in of a bf16 output would not match a bf16 value's size).
  t["ConstantOfShape"] = {k_constant_of_shape, false, {kAnyDType}, true};
}

}  // namespace memplan::runtime::cpu
