// CPU kernels that select along an axis: ArgMax and ArgMin (keepdims, select_last_index), TopK (largest or
// smallest, sorted; ties by the lower index as ONNX specifies) and Hardmax (1 at the first maximum), over every
// visited dtype; and MeanVarianceNormalization.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "runtime_allocator/kernels/cpu_kernels.hpp"

namespace memplan::runtime::cpu {
namespace {

// x viewed as [outer, len, inner] around `axis`.
struct Lines {
  std::int64_t outer = 1, len = 1, inner = 1;
};
Lines lines(const std::vector<std::int64_t>& shape, std::size_t axis) {
  return {dims_product(shape, 0, axis), shape.empty() ? 1 : shape[axis], dims_product(shape, axis + 1)};
}

template <bool kMax>
void k_arg(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  const auto axis = static_cast<std::size_t>(normalize_axis(op, op.attr_int("axis", 0), x.shape.size()));
  const bool last = op.attr_int("select_last_index", 0) != 0;
  const Lines l = lines(x.shape, axis);
  if (l.len == 0) unsupported(op, "an empty axis");
  std::int64_t* y = out[0].as<std::int64_t>();
  visit_dtype(op, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.as<T>();
    for (std::int64_t o = 0; o < l.outer; ++o)
      for (std::int64_t i = 0; i < l.inner; ++i) {
        const T* line = p + o * l.len * l.inner + i;
        std::int64_t best = 0;
        for (std::int64_t k = 1; k < l.len; ++k) {
          const T v = line[k * l.inner], b = line[best * l.inner];
          const bool better = kMax ? (last ? !(v < b) : b < v) : (last ? !(b < v) : v < b);
          if (better) best = k;
        }
        y[o * l.inner + i] = best;
      }
  });
}

// TopK(X, K) -> values, indices along `axis` (K from input 1, or the attribute `k` before opset 10).
void k_top_k(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  const auto axis = static_cast<std::size_t>(normalize_axis(op, op.attr_int("axis", -1), x.shape.size()));
  const std::int64_t k = in.size() > 1 && in[1].data ? int_values(op, in[1]).at(0) : op.attr_int("k", 0);
  const bool largest = op.attr_int("largest", 1) != 0;
  const Lines l = lines(x.shape, axis);
  if (k < 0 || k > l.len) unsupported(op, "k " + std::to_string(k) + " outside the axis of " + std::to_string(l.len));
  std::int64_t* idx = out.size() > 1 && out[1].data ? out[1].as<std::int64_t>() : nullptr;
  visit_dtype(op, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.as<T>();
    T* vals = out[0].data ? out[0].as<T>() : nullptr;
    std::vector<std::int64_t> order(static_cast<std::size_t>(l.len));
    for (std::int64_t o = 0; o < l.outer; ++o)
      for (std::int64_t i = 0; i < l.inner; ++i) {
        const T* line = p + o * l.len * l.inner + i;
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](std::int64_t a, std::int64_t b) {
          const T va = line[a * l.inner], vb = line[b * l.inner];
          if (va == vb) return a < b;
          return largest ? vb < va : va < vb;
        });
        for (std::int64_t j = 0; j < k; ++j) {
          const std::int64_t at = (o * k + j) * l.inner + i;
          if (vals) vals[at] = line[order[static_cast<std::size_t>(j)] * l.inner];
          if (idx) idx[at] = order[static_cast<std::size_t>(j)];
        }
      }
  });
}

// Hardmax: 1 at the first maximum along `axis` (-1 from opset 13; the importer spells out older opsets' 1), else 0.
void k_hardmax(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  const auto axis = static_cast<std::size_t>(normalize_axis(op, op.attr_int("axis", -1), x.shape.size()));
  const Lines l = lines(x.shape, axis);
  visit_dtype(op, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.as<T>();
    T* y = out[0].as<T>();
    for (std::int64_t o = 0; o < l.outer; ++o)
      for (std::int64_t i = 0; i < l.inner; ++i) {
        const std::int64_t base = o * l.len * l.inner + i;
        std::int64_t best = 0;
        for (std::int64_t k = 1; k < l.len; ++k)
          if (p[base + best * l.inner] < p[base + k * l.inner]) best = k;
        for (std::int64_t k = 0; k < l.len; ++k) y[base + k * l.inner] = static_cast<T>(k == best ? 1 : 0);
      }
  });
}

// MeanVarianceNormalization over `axes` (default 0, 2, 3) as ONNX Runtime computes it, in float32:
// (x - mean) * (1 / sqrt(mean((x - mean)^2))), no epsilon (ONNX's function body adds 1e-9 to the deviation), so a
// constant group gives NaN there as here.
void k_mean_variance_normalization(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  if (x.dtype != DType::f32) unsupported(op, "float32 only");
  std::vector<std::int64_t> kept = x.shape;
  for (auto a : op.attr_ints("axes", {0, 2, 3})) kept[static_cast<std::size_t>(normalize_axis(op, a, x.shape.size()))] = 1;
  std::vector<std::int64_t> ostride = contiguous_strides(kept);
  for (std::size_t k = 0; k < kept.size(); ++k)
    if (kept[k] == 1 && x.shape[k] != 1) ostride[k] = 0;
  const std::int64_t groups = dims_product(kept), n = groups ? x.elements() / groups : 0;
  std::vector<float> mean(static_cast<std::size_t>(groups), 0.0f), var(static_cast<std::size_t>(groups), 0.0f);
  const float* px = x.as<float>();
  strided_loop(x.shape, {ostride}, [&](std::int64_t i, const Offsets& o) { mean[static_cast<std::size_t>(o[0])] += px[i]; });
  for (float& m : mean) m /= static_cast<float>(n);
  strided_loop(x.shape, {ostride}, [&](std::int64_t i, const Offsets& o) {
    const float d = px[i] - mean[static_cast<std::size_t>(o[0])];
    var[static_cast<std::size_t>(o[0])] += d * d;
  });
  for (float& v : var) v = 1.0f / std::sqrt(v / static_cast<float>(n));  // the inverse deviation
  float* py = out[0].as<float>();
  strided_loop(x.shape, {ostride}, [&](std::int64_t i, const Offsets& o) {
    const auto g = static_cast<std::size_t>(o[0]);
    py[i] = (px[i] - mean[g]) * var[g];
  });
}

}  // namespace

void add_select_kernels(KernelTable& t) {
  constexpr KernelConstraints kNumbers{kVisitedDTypes};
  t["ArgMax"] = {k_arg<true>, false, kNumbers};
  t["ArgMin"] = {k_arg<false>, false, kNumbers};
  t["TopK"] = {k_top_k, false, kNumbers};
  t["Hardmax"] = {k_hardmax, false, kNumbers};
  t["MeanVarianceNormalization"] = {k_mean_variance_normalization, false};
}

}  // namespace memplan::runtime::cpu
