// CPU kernels that compute where each element comes from: Pad (constant, reflect, edge, wrap; negative pads crop),
// GatherElements, Range, CumSum, NonZero, and RandomUniformLike (its values a function of seed and element index).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime_allocator/kernels/cpu_kernels.hpp"
#include "runtime_allocator/kernels/pad_index.hpp"
#include "runtime_allocator/kernels/random_uniform.hpp"

namespace memplan::runtime::cpu {
namespace {

std::int64_t esize(const TensorRef& t) { return static_cast<std::int64_t>(analysis::dtype_bits(t.dtype) / 8); }

// Pad's fill value as bytes of x's dtype: input 2 (one element of x's dtype), else the float attribute `value`
// (before opset 11, float32 data), else zero.
std::vector<std::byte> pad_value(const Op& op, const Refs& in, const TensorRef& x) {
  std::vector<std::byte> value(static_cast<std::size_t>(esize(x)), std::byte{0});
  if (in.size() > 2 && in[2].data) {
    if (in[2].dtype != x.dtype || in[2].elements() != 1) unsupported(op, "the pad value must be one element of x's dtype");
    std::memcpy(value.data(), in[2].data, value.size());
  } else if (op.attr("value") && x.dtype == DType::f32) {
    const auto v = static_cast<float>(op.attr_float("value", 0.0));
    std::memcpy(value.data(), &v, sizeof v);
  }
  return value;
}

// Per axis, the input offset (in elements) of each output coordinate, -1 for the pad value.
std::vector<std::vector<std::int64_t>> pad_sources(const Op& op, PadMode mode, const std::vector<PadAxis>& ax,
                                                   const TensorRef& x, const TensorRef& y) {
  const auto xs = contiguous_strides(x.shape);
  std::vector<std::vector<std::int64_t>> src(x.shape.size());
  for (std::size_t d = 0; d < x.shape.size(); ++d) {
    if (ax[d].m == 0 && mode != PadMode::constant && y.shape[d] > 0) unsupported(op, "non-constant Pad of an empty axis");
    for (std::int64_t i = 0; i < y.shape[d]; ++i) {
      const std::int64_t s = pad_source(mode, ax[d], i);
      src[d].push_back(s < 0 ? -1 : s * xs[d]);
    }
  }
  return src;
}

// Pad: pads from input 1 (the attribute before opset 11), the pad value from input 2 (the float attribute `value`
// before opset 11; zero when absent), axes from input 3 (opset 18).
void k_pad(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  const TensorRef& y = out[0];
  PadMode mode{};
  if (!parse_pad_mode(op.attr_string("mode", "constant"), mode)) unsupported(op, "mode " + op.attr_string("mode", ""));
  const auto pads = in.size() > 1 && in[1].data ? int_values(op, in[1]) : op.attr_ints("pads");
  std::vector<std::int64_t> axes = in.size() > 3 && in[3].data ? int_values(op, in[3]) : std::vector<std::int64_t>{};
  for (auto& a : axes) a = normalize_axis(op, a, x.shape.size());
  const std::vector<PadAxis> ax = pad_axes(x.shape, pads, axes);
  if (ax.size() != x.shape.size()) unsupported(op, "pads do not give a begin and an end per padded axis");
  const std::int64_t es = esize(x);
  const std::vector<std::byte> value = pad_value(op, in, x);
  const auto src = pad_sources(op, mode, ax, x, y);
  const std::int64_t n = y.elements();
  std::vector<std::int64_t> idx(y.shape.size(), 0);
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t off = 0;
    for (std::size_t d = 0; d < idx.size() && off >= 0; ++d) {
      const std::int64_t sd = src[d][static_cast<std::size_t>(idx[d])];
      off = sd < 0 ? -1 : off + sd;
    }
    std::memcpy(y.data + i * es, off < 0 ? value.data() : x.data + off * es, static_cast<std::size_t>(es));
    for (std::size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < y.shape[d]) break;
      idx[d] = 0;
    }
  }
}

// GatherElements: y[i] = x[i with its `axis` coordinate replaced by indices[i]] (negative indices count from the end).
void k_gather_elements(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  const auto idx = int_values(op, required(op, in, 1));
  const std::size_t r = x.shape.size();
  const auto axis = static_cast<std::size_t>(normalize_axis(op, op.attr_int("axis", 0), r));
  const TensorRef& y = out[0];
  if (y.shape.size() != r) unsupported(op, "indices of x's rank expected");
  const auto xs = contiguous_strides(x.shape);
  std::vector<std::int64_t> s = xs;
  s[axis] = 0;  // the axis coordinate comes from the index
  const std::int64_t es = esize(x), dim = x.shape[axis];
  strided_loop(y.shape, {s}, [&](std::int64_t i, const Offsets& o) {
    std::int64_t j = idx[static_cast<std::size_t>(i)];
    if (j < -dim || j >= dim)
      fail(ErrorKind::runtime, "op '" + op.name + "' (GatherElements): index " + std::to_string(j) + " out of range for a dim of " + std::to_string(dim));
    if (j < 0) j += dim;
    std::memcpy(y.data + i * es, x.data + (o[0] + j * xs[axis]) * es, static_cast<std::size_t>(es));
  });
}

// Range: start + k * delta for k < the output's length (computed in double for floats, as shape folding does).
void k_range(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& y = out[0];
  for (std::size_t i = 0; i < 3; ++i)
    if (required(op, in, i).elements() != 1 || in[i].dtype != y.dtype) unsupported(op, "start, limit and delta must be scalars of the output's dtype");
  visit_dtype(op, y.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      unsupported(op, "bool Range");
    } else {
      T* p = y.as<T>();
      const T start = *in[0].as<T>(), delta = *in[2].as<T>();
      for (std::int64_t k = 0; k < y.elements(); ++k) {
        if constexpr (std::is_floating_point_v<T>)
          p[k] = static_cast<T>(static_cast<double>(start) + static_cast<double>(k) * static_cast<double>(delta));
        else
          p[k] = static_cast<T>(static_cast<std::uint64_t>(start) + static_cast<std::uint64_t>(k) * static_cast<std::uint64_t>(delta));
      }
    }
  });
}

// RandomUniformLike: random_uniform.hpp's draw of (seed, element index) in [low, high); the input gives the shape.
void k_random_uniform_like(const Op& op, const Refs&, const Refs& out) {
  const TensorRef& y = out[0];
  const std::uint64_t key = step_key(static_cast<std::uint64_t>(op.attr_int("seed", static_cast<std::int64_t>(kDefaultRandomSeed))));
  const double low = op.attr_float("low", 0.0), high = op.attr_float("high", 1.0);
  if (y.dtype == DType::f32) {
    float* p = y.as<float>();
    for (std::int64_t i = 0; i < y.elements(); ++i)
      p[i] = uniform_f32(key, static_cast<std::uint64_t>(i), static_cast<float>(low), static_cast<float>(high));
  } else if (y.dtype == DType::f64) {
    double* p = y.as<double>();
    for (std::int64_t i = 0; i < y.elements(); ++i) p[i] = uniform_f64(key, static_cast<std::uint64_t>(i), low, high);
  } else {
    unsupported(op, std::string("dtype ") + analysis::dtype_name(y.dtype) + " (float32 and float64 only)");
  }
}

// CumSum: running sums of x along `axis` (a scalar input), inclusive unless `exclusive`, from the end when
// `reverse`; summed in x's dtype in index order, as the CUDA kernel does.
void k_cum_sum(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  const TensorRef& y = out[0];
  if (required(op, in, 1).elements() != 1) unsupported(op, "axis must be a scalar");
  const std::int64_t rank = static_cast<std::int64_t>(x.shape.size());
  std::int64_t axis = in[1].dtype == DType::i32 ? *in[1].as<std::int32_t>() : *in[1].as<std::int64_t>();
  if (axis < -rank || axis >= rank) unsupported(op, "axis " + std::to_string(axis) + " out of range");
  if (axis < 0) axis += rank;
  std::int64_t outer = 1, len = x.shape[static_cast<std::size_t>(axis)], inner = 1;
  for (std::int64_t d = 0; d < axis; ++d) outer *= x.shape[static_cast<std::size_t>(d)];
  for (std::int64_t d = axis + 1; d < rank; ++d) inner *= x.shape[static_cast<std::size_t>(d)];
  const bool exclusive = op.attr_int("exclusive", 0) != 0, reverse = op.attr_int("reverse", 0) != 0;
  visit_dtype(op, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      unsupported(op, "bool CumSum");
    } else {
      const T* a = x.as<T>();
      T* b = y.as<T>();
      for (std::int64_t o = 0; o < outer; ++o)
        for (std::int64_t i = 0; i < inner; ++i) {
          T acc = T(0);
          for (std::int64_t k = 0; k < len; ++k) {
            const std::int64_t at = (o * len + (reverse ? len - 1 - k : k)) * inner + i;
            if (exclusive) {
              b[at] = acc;
              acc = static_cast<T>(acc + a[at]);
            } else {
              acc = static_cast<T>(acc + a[at]);
              b[at] = acc;
            }
          }
        }
    }
  });
}

// NonZero: the indices of x's nonzero elements, row-major, one row of y per axis. y's count was planned (exact for a
// known x, else x's element count): other data is refused rather than written past or short of it.
void k_non_zero(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  const TensorRef& y = out[0];
  const std::size_t rank = x.shape.size();
  const std::int64_t planned = y.shape.size() == 2 ? y.shape[1] : -1;
  std::vector<std::int64_t> found;  // flat indices
  visit_dtype(op, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* v = x.as<T>();
    for (std::int64_t i = 0; i < x.elements(); ++i)
      if (v[i] != T(0)) found.push_back(i);
  });
  if (static_cast<std::int64_t>(found.size()) != planned)
    unsupported(op, "x has " + std::to_string(found.size()) + " nonzero elements where the plan holds " + std::to_string(planned) +
                        " (NonZero's output size depends on the data)");
  auto* py = y.as<std::int64_t>();
  for (std::size_t k = 0; k < found.size(); ++k) {
    std::int64_t rest = found[k];
    for (std::size_t d = rank; d-- > 0;) {
      py[d * found.size() + k] = rest % x.shape[d];
      rest /= x.shape[d];
    }
  }
}

// OneHot: values[1] where the index (negative ones counted from depth) names the position along `axis`, values[0]
// elsewhere; an index outside [-depth, depth) gives an all-off vector, as ONNX Runtime does.
void k_one_hot(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& idx = required(op, in, 0);
  const TensorRef& values = required(op, in, 2);
  const TensorRef& y = out[0];
  const std::int64_t es = static_cast<std::int64_t>(y.bytes / static_cast<std::uint64_t>(std::max<std::int64_t>(y.elements(), 1)));
  if (values.elements() != 2 || values.dtype != y.dtype) unsupported(op, "values must be two elements of the output's dtype");
  const auto axis = static_cast<std::size_t>(normalize_axis(op, op.attr_int("axis", -1), y.shape.size()));
  const std::int64_t depth = y.shape[axis], outer = dims_product(y.shape, 0, axis), inner = dims_product(y.shape, axis + 1);
  std::vector<double> where(static_cast<std::size_t>(idx.elements()));
  visit_dtype(op, idx.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (std::size_t i = 0; i < where.size(); ++i) where[i] = static_cast<double>(idx.as<T>()[i]);
  });
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t d = 0; d < depth; ++d)
      for (std::int64_t i = 0; i < inner; ++i) {
        double at = where[static_cast<std::size_t>(o * inner + i)];
        at = at < 0 ? at + static_cast<double>(depth) : at;
        const bool on = std::floor(at) == static_cast<double>(d);
        std::memcpy(y.data + ((o * depth + d) * inner + i) * es, values.data + (on ? es : 0), static_cast<std::size_t>(es));
      }
}

}  // namespace

void add_indexing_kernels(KernelTable& t) {
  t["OneHot"] = {k_one_hot, false, {kVisitedDTypes}};
  t["CumSum"] = {k_cum_sum, false, {kF32 | dtype_bit(DType::f64) | dtype_bit(DType::i64) | dtype_bit(DType::i32)}};
  t["Pad"] = {k_pad, false, {kAnyDType}};
  t["GatherElements"] = {k_gather_elements, false, {kAnyDType}};
  t["Range"] = {k_range, false, {kVisitedDTypes}};
  t["NonZero"] = {k_non_zero, false, {kVisitedDTypes}};
  t["RandomUniformLike"] = {k_random_uniform_like, false, {kAnyDType}};
}

}  // namespace memplan::runtime::cpu
