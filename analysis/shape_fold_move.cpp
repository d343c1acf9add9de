// Constant folding of data-movement ops: values are copied element by element, whatever the dtype.
#include <algorithm>
#include <cstring>

#include "analysis/shape_rules.hpp"

namespace memplan::analysis::shape_detail {

std::size_t element_bytes(const OpContext& c, DType t) {
  const std::uint32_t bits = dtype_bits(t);
  if (bits == 0 || bits % 8 != 0) fail(ErrorKind::unsupported, c.where() + ": cannot fold values of dtype " + dtype_name(t));
  return bits / 8;
}

namespace {

// The output, each element copied from element src_of(out_index) of `src`.
template <typename F>
TensorData copy_elements(const OpContext& c, const TensorData& src, F&& src_of) {
  const Shape out = c.out_shape(0);
  const std::size_t w = element_bytes(c, src.dtype);
  TensorData d{src.dtype, out, {}};
  d.bytes.resize(d.element_count() * w);
  for_each_index(out, [&](const std::vector<std::int64_t>& idx, std::uint64_t flat) {
    const std::uint64_t from = src_of(idx);
    std::memcpy(d.bytes.data() + flat * w, src.bytes.data() + from * w, w);
  });
  return d;
}

std::uint64_t dot(const std::vector<std::int64_t>& idx, const std::vector<std::uint64_t>& strides) {
  std::uint64_t s = 0;
  for (std::size_t k = 0; k < idx.size(); ++k) s += static_cast<std::uint64_t>(idx[k]) * strides[k];
  return s;
}

// Identity, Reshape, (Un)Squeeze, Flatten: the same bytes under a new shape.
std::vector<TensorData> same_bytes(const OpContext& c) {
  TensorData d = *c.in_value(0);
  d.dims = c.out_shape(0);
  return {d};
}

std::vector<TensorData> shape_eval(const OpContext& c) {
  const Shape in = c.in_shape(0);
  const auto r = static_cast<std::int64_t>(in.size());
  std::int64_t start = c.op().attr_int("start", 0);
  start = std::clamp(start < 0 ? start + r : start, std::int64_t{0}, r);
  const Shape out(in.begin() + start, in.begin() + start + c.out_shape(0)[0]);
  return {TensorData::from_int64(DType::i64, c.out_shape(0), out)};
}

std::vector<TensorData> size_eval(const OpContext& c) {
  return {TensorData::from_int64(DType::i64, {}, {c.product(c.in_shape(0))})};
}

std::vector<TensorData> constant_eval(const OpContext& c) {
  const Op& op = c.op();
  if (const Attribute* a = op.attr("value"); a && a->t) return {*a->t};
  if (const Attribute* a = op.attr("value_float")) return {TensorData::from_double(DType::f32, {}, {a->f})};
  if (const Attribute* a = op.attr("value_int")) return {TensorData::from_int64(DType::i64, {}, {a->i})};
  if (const Attribute* a = op.attr("value_floats")) return {TensorData::from_double(DType::f32, c.out_shape(0), a->floats)};
  const Attribute* a = op.attr("value_ints");
  return {TensorData::from_int64(DType::i64, c.out_shape(0), a->ints)};
}

std::vector<TensorData> constant_of_shape_eval(const OpContext& c) {
  const Attribute* v = c.op().attr("value");
  TensorData fill = v && v->t ? *v->t : TensorData::from_double(DType::f32, {1}, {0.0});
  if (fill.element_count() != 1) c.fail_shape("attribute 'value' must hold one element");
  fill.dims = {1};
  return {copy_elements(c, fill, [](const std::vector<std::int64_t>&) { return std::uint64_t{0}; })};
}

std::int64_t checked_index(const OpContext& c, std::int64_t i, std::int64_t dim) {
  if (i < -dim || i >= dim) c.fail_shape("index " + std::to_string(i) + " is out of range for a dim of " + std::to_string(dim));
  return i < 0 ? i + dim : i;
}

std::vector<TensorData> gather_eval(const OpContext& c) {
  const Shape data = c.in_shape(0), idx_shape = c.in_shape(1);
  const auto idx = c.in_value(1)->as_int64();
  const std::size_t axis = c.axis(c.op().attr_int("axis", 0), data.size(), "axis"), q = idx_shape.size();
  const auto st = strides_of(data), ist = strides_of(idx_shape);
  return {copy_elements(c, *c.in_value(0), [&](const std::vector<std::int64_t>& o) {
    std::uint64_t from = 0, at = 0;
    for (std::size_t k = 0; k < q; ++k) at += static_cast<std::uint64_t>(o[axis + k]) * ist[k];
    for (std::size_t k = 0; k < data.size(); ++k) {
      const std::int64_t i = k < axis ? o[k] : k == axis ? checked_index(c, idx[at], data[axis]) : o[k + q - 1];
      from += static_cast<std::uint64_t>(i) * st[k];
    }
    return from;
  })};
}

std::vector<TensorData> gather_elements_eval(const OpContext& c) {
  const Shape data = c.in_shape(0);
  const auto idx = c.in_value(1)->as_int64();
  const std::size_t axis = c.axis(c.op().attr_int("axis", 0), data.size(), "axis");
  const auto st = strides_of(data), ost = strides_of(c.out_shape(0));
  return {copy_elements(c, *c.in_value(0), [&](const std::vector<std::int64_t>& o) {
    std::vector<std::int64_t> at = o;
    at[axis] = checked_index(c, idx[dot(o, ost)], data[axis]);
    for (std::size_t k = 0; k < at.size(); ++k)
      if (at[k] >= data[k]) c.fail_shape("indices exceed the data's shape " + shape_str(data));
    return dot(at, st);
  })};
}

std::vector<TensorData> slice_eval(const OpContext& c) {
  const SlicePlan p = slice_plan(c);
  const auto st = strides_of(c.in_shape(0));
  return {copy_elements(c, *c.in_value(0), [&](const std::vector<std::int64_t>& o) {
    std::uint64_t from = 0;
    for (std::size_t k = 0; k < o.size(); ++k) from += static_cast<std::uint64_t>(p.starts[k] + o[k] * p.steps[k]) * st[k];
    return from;
  })};
}

std::vector<TensorData> concat_eval(const OpContext& c) {
  const Shape out = c.out_shape(0);
  const std::size_t axis = c.axis(c.op().attr_int("axis", 0), out.size(), "axis");
  const std::size_t w = element_bytes(c, c.out_dtype(0));
  const auto outer = static_cast<std::uint64_t>(c.product(out, 0, axis));
  const auto inner = static_cast<std::uint64_t>(c.product(out, axis + 1));
  TensorData d{c.out_dtype(0), out, {}};
  d.bytes.reserve(d.element_count() * w);
  for (std::uint64_t o = 0; o < outer; ++o)
    for (std::size_t i = 0; i < c.num_inputs(); ++i) {
      const std::uint64_t block = static_cast<std::uint64_t>(c.in_shape(i)[axis]) * inner * w;
      const std::byte* src = c.in_value(i)->bytes.data() + o * block;
      d.bytes.insert(d.bytes.end(), src, src + block);
    }
  return {d};
}

std::vector<TensorData> transpose_eval(const OpContext& c) {
  const auto perm = transpose_perm(c);
  const auto st = strides_of(c.in_shape(0));
  return {copy_elements(c, *c.in_value(0), [&](const std::vector<std::int64_t>& o) {
    std::uint64_t from = 0;
    for (std::size_t k = 0; k < o.size(); ++k) from += static_cast<std::uint64_t>(o[k]) * st[perm[k]];
    return from;
  })};
}

std::vector<TensorData> expand_eval(const OpContext& c) {
  const auto st = broadcast_strides(c.in_shape(0), c.out_shape(0).size());
  return {copy_elements(c, *c.in_value(0), [&](const std::vector<std::int64_t>& o) { return dot(o, st); })};
}

std::vector<TensorData> tile_eval(const OpContext& c) {
  const Shape in = c.in_shape(0);
  const auto st = strides_of(in);
  return {copy_elements(c, *c.in_value(0), [&](const std::vector<std::int64_t>& o) {
    std::uint64_t from = 0;
    for (std::size_t k = 0; k < o.size(); ++k) from += static_cast<std::uint64_t>(o[k] % in[k]) * st[k];
    return from;
  })};
}

std::vector<TensorData> where_eval(const OpContext& c) {
  const std::size_t rank = c.out_shape(0).size();
  const auto cond = c.in_value(0)->as_int64();
  const auto sc = broadcast_strides(c.in_shape(0), rank), sx = broadcast_strides(c.in_shape(1), rank),
             sy = broadcast_strides(c.in_shape(2), rank);
  const std::size_t w = element_bytes(c, c.out_dtype(0));
  TensorData d{c.out_dtype(0), c.out_shape(0), {}};
  d.bytes.resize(d.element_count() * w);
  for_each_index(d.dims, [&](const std::vector<std::int64_t>& o, std::uint64_t flat) {
    const bool pick_x = cond[dot(o, sc)] != 0;
    const std::byte* src = pick_x ? c.in_value(1)->bytes.data() + dot(o, sx) * w : c.in_value(2)->bytes.data() + dot(o, sy) * w;
    std::memcpy(d.bytes.data() + flat * w, src, w);
  });
  return {d};
}

}  // namespace

void add_fold_move_rules(RuleTable& t) {
  for (const char* name : {"Identity", "Reshape", "Unsqueeze", "Squeeze", "Flatten"}) t[name].eval = &same_bytes;
  t["Shape"].eval = &shape_eval;
  t["Size"].eval = &size_eval;
  t["Constant"].eval = &constant_eval;
  t["ConstantOfShape"].eval = &constant_of_shape_eval;
  t["Gather"].eval = &gather_eval;
  t["GatherElements"].eval = &gather_elements_eval;
  t["Slice"].eval = &slice_eval;
  t["Concat"].eval = &concat_eval;
  t["Transpose"].eval = &transpose_eval;
  t["Expand"].eval = &expand_eval;
  t["Tile"].eval = &tile_eval;
  t["Where"].eval = &where_eval;
}

}  // namespace memplan::analysis::shape_detail
