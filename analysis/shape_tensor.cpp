// Shape rules of data-movement ops: Shape, Constant(OfShape), Gather*, (Un)Squeeze, Slice, Concat, Reshape, Expand, ...
#include <algorithm>
#include <cmath>
#include <limits>

#include "analysis/shape_rules.hpp"

namespace memplan::analysis::shape_detail {

namespace {

// An op's axes: the attribute (older opsets) or the optional input `i` (newer), which must be constant.
std::optional<Shape> axes_of(const OpContext& c, std::size_t i) {
  if (c.op().attr("axes")) return c.op().attr_ints("axes");
  if (c.has_input(i)) return c.in_ints(i, "axes");
  return std::nullopt;
}

std::vector<std::size_t> normalized_axes(const OpContext& c, const Shape& axes, std::size_t rank) {
  std::vector<std::size_t> out;
  for (auto a : axes) out.push_back(c.axis(a, rank, "axis"));
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end()) c.fail_shape("axes " + shape_str(axes) + " repeat an axis");
  return out;
}

void shape_op(OpContext& c) {
  const auto r = static_cast<std::int64_t>(c.in_rank(0));
  auto clampi = [r](std::int64_t v) { return std::clamp(v < 0 ? v + r : v, std::int64_t{0}, r); };
  const std::int64_t start = clampi(c.op().attr_int("start", 0)), end = clampi(c.op().attr_int("end", r));
  c.set_output(0, DType::i64, {std::max<std::int64_t>(end - start, 0)});
}

void size_op(OpContext& c) { c.set_output(0, DType::i64, {}); }

void constant_op(OpContext& c) {
  const Op& op = c.op();
  if (const Attribute* a = op.attr("value"); a && a->t) c.set_output(0, a->t->dtype, a->t->dims);
  else if (op.attr("value_float")) c.set_output(0, DType::f32, {});
  else if (op.attr("value_int")) c.set_output(0, DType::i64, {});
  else if (const Attribute* f = op.attr("value_floats")) c.set_output(0, DType::f32, {static_cast<std::int64_t>(f->floats.size())});
  else if (const Attribute* i = op.attr("value_ints")) c.set_output(0, DType::i64, {static_cast<std::int64_t>(i->ints.size())});
  else fail(ErrorKind::unsupported, c.where() + ": only value, value_float(s) and value_int(s) are supported");
}

void constant_of_shape_op(OpContext& c) {
  const Attribute* v = c.op().attr("value");
  c.set_output(0, v && v->t ? v->t->dtype : DType::f32, c.in_ints(0, "shape"));
}

void gather_op(OpContext& c) {
  c.require_index_dtype(1);
  const Shape data = c.in_shape(0), idx = c.in_shape(1);
  if (data.empty()) c.fail_shape("data must have rank >= 1");
  const std::size_t axis = c.axis(c.op().attr_int("axis", 0), data.size(), "axis");
  Shape out(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(axis));
  out.insert(out.end(), idx.begin(), idx.end());
  out.insert(out.end(), data.begin() + static_cast<std::ptrdiff_t>(axis) + 1, data.end());
  c.set_output(0, c.in_dtype(0), out);
}

void gather_elements_op(OpContext& c) {
  c.require_index_dtype(1);
  if (c.in_rank(0) != c.in_rank(1))
    c.fail_shape("data " + shape_str(c.in_shape(0)) + " and indices " + shape_str(c.in_shape(1)) + " differ in rank");
  (void)c.axis(c.op().attr_int("axis", 0), c.in_rank(0), "axis");
  c.set_output(0, c.in_dtype(0), c.in_shape(1));
}

void gather_nd_op(OpContext& c) {
  const Shape data = c.in_shape(0), idx = c.in_shape(1);
  const auto b = static_cast<std::size_t>(std::max<std::int64_t>(c.op().attr_int("batch_dims", 0), 0));
  if (idx.empty() || b >= idx.size() || b + static_cast<std::size_t>(idx.back()) > data.size())
    c.fail_shape("indices " + shape_str(idx) + " do not fit data " + shape_str(data));
  Shape out(idx.begin(), idx.end() - 1);
  out.insert(out.end(), data.begin() + static_cast<std::ptrdiff_t>(b + static_cast<std::size_t>(idx.back())), data.end());
  c.set_output(0, c.in_dtype(0), out);
}

void unsqueeze_op(OpContext& c) {
  const Shape in = c.in_shape(0);
  const auto axes_in = axes_of(c, 1);
  if (!axes_in) c.fail_shape("needs axes");
  const std::size_t rank = in.size() + axes_in->size();
  const auto axes = normalized_axes(c, *axes_in, rank);
  Shape out;
  std::size_t next = 0;
  for (std::size_t k = 0; k < rank; ++k)
    out.push_back(std::binary_search(axes.begin(), axes.end(), k) ? 1 : in[next++]);
  c.set_output(0, c.in_dtype(0), out);
}

void squeeze_op(OpContext& c) {
  const Shape in = c.in_shape(0);
  const auto axes_in = axes_of(c, 1);
  std::vector<std::size_t> axes;
  if (axes_in) axes = normalized_axes(c, *axes_in, in.size());
  else
    for (std::size_t k = 0; k < in.size(); ++k)
      if (in[k] == 1) axes.push_back(k);
  Shape out;
  for (std::size_t k = 0; k < in.size(); ++k) {
    const bool drop = std::binary_search(axes.begin(), axes.end(), k);
    if (drop && in[k] != 1) c.fail_shape("cannot squeeze axis " + std::to_string(k) + " of " + shape_str(in));
    if (!drop) out.push_back(in[k]);
  }
  c.set_output(0, c.in_dtype(0), out);
}

void slice_op(OpContext& c) { c.set_output(0, c.in_dtype(0), slice_plan(c).out); }

void concat_op(OpContext& c) {
  const Shape first = c.in_shape(0);
  const std::size_t axis = c.axis(c.op().attr_int("axis", 0), first.size(), "axis");
  Shape out = first;
  for (std::size_t i = 1; i < c.num_inputs(); ++i) {
    const Shape s = c.in_shape(i);
    bool ok = s.size() == first.size() && c.in_dtype(i) == c.in_dtype(0);
    for (std::size_t k = 0; ok && k < s.size(); ++k) ok = k == axis || s[k] == first[k];
    if (!ok)
      c.fail_shape("input " + std::to_string(i) + " " + shape_str(s) + " (" + dtype_name(c.in_dtype(i)) +
                   ") does not concatenate with " + shape_str(first) + " (" + dtype_name(c.in_dtype(0)) +
                   ") on axis " + std::to_string(axis));
    out[axis] = c.add(out[axis], s[axis]);
  }
  c.set_output(0, c.in_dtype(0), out);
}

void reshape_op(OpContext& c) {
  const Shape in = c.in_shape(0);
  Shape target = c.op().attr("shape") ? c.op().attr_ints("shape") : c.in_ints(1, "the target shape");
  const bool allowzero = c.op().attr_int("allowzero", 0) != 0;
  std::size_t infer = target.size();
  std::int64_t known = 1;
  for (std::size_t k = 0; k < target.size(); ++k) {
    if (target[k] == 0 && !allowzero) {
      if (k >= in.size()) c.fail_shape("target " + shape_str(target) + " copies dim " + std::to_string(k) + " of " + shape_str(in));
      target[k] = in[k];
    }
    if (target[k] == -1) {
      if (infer != target.size()) c.fail_shape("target " + shape_str(target) + " has two -1 dims");
      infer = k;
      continue;
    }
    if (target[k] < 0) c.fail_shape("target " + shape_str(target) + " has a negative dim");
    known = c.mul(known, target[k]);
  }
  const std::int64_t total = c.product(in);
  if (infer != target.size()) {
    if (known == 0 || total % known != 0)
      c.fail_shape("cannot reshape " + shape_str(in) + " to " + shape_str(target));
    target[infer] = total / known;
  } else if (known != total) {
    c.fail_shape("cannot reshape " + shape_str(in) + " (" + std::to_string(total) + " elements) to " + shape_str(target));
  }
  c.set_output(0, c.in_dtype(0), target);
}

void expand_op(OpContext& c) { c.set_output(0, c.in_dtype(0), broadcast(c, c.in_shape(0), c.in_ints(1, "the shape"))); }

void range_op(OpContext& c) {
  for (std::size_t i = 0; i < 3; ++i)
    if (c.input(i).element_count() != 1) c.fail_shape("start, limit and delta must be scalars");
  (void)c.in_ints(0, "start"), (void)c.in_ints(1, "limit"), (void)c.in_ints(2, "delta");
  const double start = c.in_value(0)->as_double()[0], limit = c.in_value(1)->as_double()[0];
  const double delta = c.in_value(2)->as_double()[0];
  if (delta == 0.0) c.fail_shape("delta is 0");
  const double n = std::ceil((limit - start) / delta);
  if (!(n < 9.0e18)) c.fail_shape("range has too many elements");
  c.set_output(0, c.in_dtype(0), {n > 0 ? static_cast<std::int64_t>(n) : 0});
}

// OneHot: the indices' shape with `depth` (a known scalar) inserted at `axis` (in [-rank - 1, rank]), values' dtype.
void one_hot_op(OpContext& c) {
  const Shape idx = c.in_shape(0);
  const std::vector<std::int64_t> depth = c.in_ints(1, "depth");
  if (depth.size() != 1 || depth[0] < 1) c.fail_shape("depth must be one positive number");
  if (c.input(2).element_count() != 2) c.fail_shape("values must hold two elements: off, on");
  const std::size_t axis = c.axis(c.op().attr_int("axis", -1), idx.size() + 1, "axis");
  Shape out = idx;
  out.insert(out.begin() + static_cast<std::ptrdiff_t>(axis), depth[0]);
  c.set_output(0, c.in_dtype(2), out);
}

// NonZero: int64 [rank, count], the count of x's nonzero elements when x's value is known here, else an upper
// bound, x's element count (a run whose data gives another count stops with an error), said in a note.
void non_zero_op(OpContext& c) {
  const Shape x = c.in_shape(0);
  std::int64_t count = c.product(x);
  if (const TensorData* v = c.in_value(0)) {
    const auto values = v->as_double();
    count = static_cast<std::int64_t>(std::count_if(values.begin(), values.end(), [](double e) { return e != 0.0; }));
  } else {
    c.note("its output size depends on the data: planned at its upper bound, the input's " + std::to_string(count) +
           " elements (the count of nonzero elements)");
  }
  c.set_output(0, DType::i64, {static_cast<std::int64_t>(x.size()), count});
}

void transpose_op(OpContext& c) {
  const Shape in = c.in_shape(0);
  Shape out;
  for (auto p : transpose_perm(c)) out.push_back(in[p]);
  c.set_output(0, c.in_dtype(0), out);
}

void split_op(OpContext& c) {
  const Shape in = c.in_shape(0);
  const std::size_t axis = c.axis(c.op().attr_int("axis", 0), in.size(), "axis");
  Shape sizes = c.op().attr("split") ? c.op().attr_ints("split") : Shape{};
  if (sizes.empty() && c.has_input(1)) sizes = c.in_ints(1, "split");
  if (sizes.empty()) {
    const std::int64_t n = c.op().attr_int("num_outputs", static_cast<std::int64_t>(c.num_outputs()));
    if (n < 1) c.fail_shape("num_outputs must be >= 1");
    const std::int64_t chunk = in[axis] / n + (in[axis] % n ? 1 : 0);
    for (std::int64_t k = 0, left = in[axis]; k < n; ++k, left -= std::min(chunk, left)) sizes.push_back(std::min(chunk, left));
  }
  std::int64_t sum = 0;
  for (auto s : sizes) sum = s < 0 ? -1 : c.add(sum, s);
  if (sizes.size() != c.num_outputs() || sum != in[axis])
    c.fail_shape("split " + shape_str(sizes) + " does not divide axis " + std::to_string(axis) + " of " + shape_str(in) +
                 " into " + std::to_string(c.num_outputs()) + " outputs");
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    Shape out = in;
    out[axis] = sizes[k];
    c.set_output(k, c.in_dtype(0), out);
  }
}

void tile_op(OpContext& c) {
  Shape out = c.in_shape(0);
  const Shape reps = c.in_ints(1, "repeats");
  if (reps.size() != out.size()) c.fail_shape("repeats " + shape_str(reps) + " do not match rank of " + shape_str(out));
  for (std::size_t k = 0; k < out.size(); ++k) {
    if (reps[k] < 0) c.fail_shape("negative repeat " + shape_str(reps));
    out[k] = c.mul(out[k], reps[k]);
  }
  c.set_output(0, c.in_dtype(0), out);
}

void pad_op(OpContext& c) {
  Shape out = c.in_shape(0);
  const Shape pads = c.op().attr("pads") ? c.op().attr_ints("pads") : c.in_ints(1, "pads");
  std::vector<std::size_t> axes;
  if (c.has_input(3)) {
    for (auto a : c.in_ints(3, "axes")) axes.push_back(c.axis(a, out.size(), "axis"));
  } else {
    for (std::size_t k = 0; k < out.size(); ++k) axes.push_back(k);
  }
  if (pads.size() != 2 * axes.size()) c.fail_shape("pads " + shape_str(pads) + " do not match the axes");
  for (std::size_t k = 0; k < axes.size(); ++k) out[axes[k]] = c.add(c.add(out[axes[k]], pads[k]), pads[k + axes.size()]);
  c.set_output(0, c.in_dtype(0), out);
}

}  // namespace

SlicePlan slice_plan(const OpContext& c) {
  const Shape in = c.in_shape(0);
  const bool attrs = c.op().attr("starts") != nullptr;
  const Shape starts = attrs ? c.op().attr_ints("starts") : c.in_ints(1, "starts");
  const Shape ends = attrs ? c.op().attr_ints("ends") : c.in_ints(2, "ends");
  Shape axes = attrs ? c.op().attr_ints("axes") : (c.has_input(3) ? c.in_ints(3, "axes") : Shape{});
  Shape steps = !attrs && c.has_input(4) ? c.in_ints(4, "steps") : Shape{};
  if (axes.empty())
    for (std::size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<std::int64_t>(k));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    c.fail_shape("starts, ends, axes and steps differ in length");
  SlicePlan p{Shape(in.size(), 0), Shape(in.size(), 1), in};
  std::vector<bool> seen(in.size(), false);
  for (std::size_t i = 0; i < starts.size(); ++i) {
    const std::size_t a = c.axis(axes[i], in.size(), "axis");
    if (seen[a]) c.fail_shape("axis " + std::to_string(a) + " is sliced twice");
    seen[a] = true;
    // INT64_MIN as a step would overflow on negation; any step beyond the dim takes one element anyway.
    const std::int64_t dim = in[a], step = std::max(steps[i], -std::numeric_limits<std::int64_t>::max());
    if (step == 0) c.fail_shape("step is 0");
    std::int64_t s = starts[i] < 0 ? starts[i] + dim : starts[i];
    std::int64_t e = ends[i] < 0 ? ends[i] + dim : ends[i];
    if (dim == 0) {  // nothing to take; also keeps the clamps below well-formed (dim - 1 < 0)
      s = 0;
      p.out[a] = 0;
    } else if (step > 0) {
      s = std::clamp<std::int64_t>(s, 0, dim);
      e = std::clamp<std::int64_t>(e, 0, dim);
      p.out[a] = e > s ? (e - s - 1) / step + 1 : 0;
    } else {
      s = std::clamp<std::int64_t>(s, 0, dim - 1);
      e = std::clamp<std::int64_t>(e, -1, dim - 1);
      p.out[a] = s > e ? (s - e - 1) / -step + 1 : 0;
    }
    p.starts[a] = s;
    p.steps[a] = step;
  }
  return p;
}

std::vector<std::size_t> transpose_perm(const OpContext& c) {
  const std::size_t rank = c.in_rank(0);
  std::vector<std::size_t> perm;
  if (const Attribute* a = c.op().attr("perm")) {
    for (auto p : a->ints) perm.push_back(c.axis(p, rank, "perm entry"));
    std::vector<std::size_t> sorted = perm;
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t k = 0; k < sorted.size(); ++k)
      if (sorted[k] != k || sorted.size() != rank) c.fail_shape("perm " + shape_str(a->ints) + " is not a permutation of rank " + std::to_string(rank));
  } else {
    for (std::size_t k = rank; k-- > 0;) perm.push_back(k);
  }
  return perm;
}

void add_tensor_rules(RuleTable& t) {
  t["Shape"] = {&shape_op, nullptr, false};
  t["Size"] = {&size_op, nullptr, false};
  t["Constant"].shape = &constant_op;
  t["ConstantOfShape"].shape = &constant_of_shape_op;
  t["Gather"].shape = &gather_op;
  t["GatherElements"].shape = &gather_elements_op;
  t["GatherND"].shape = &gather_nd_op;
  t["Unsqueeze"].shape = &unsqueeze_op;
  t["Squeeze"].shape = &squeeze_op;
  t["Slice"].shape = &slice_op;
  t["Concat"].shape = &concat_op;
  t["Reshape"].shape = &reshape_op;
  t["Expand"].shape = &expand_op;
  t["Range"].shape = &range_op;
  t["NonZero"].shape = &non_zero_op;
  t["OneHot"].shape = &one_hot_op;
  t["Transpose"].shape = &transpose_op;
  t["Split"].shape = &split_op;
  t["Tile"].shape = &tile_op;
  t["Pad"].shape = &pad_op;
}

}  // namespace memplan::analysis::shape_detail
