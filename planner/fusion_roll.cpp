// Roll fusion: torch.roll as the exporters write it. Both torch.onnx exporters lower a roll by k along an axis to
// Concat(Slice(x, -k..end), Slice(x, 0..-k)) on that axis (Swin's shifted windows roll twice per block, two axes
// each). As ONNX ops that is two copies and a third to join them, and in training each Slice's backward writes a
// zero-filled tensor of x's size that an Add then sums: four full-size passes where torch.roll's backward is one.
// A Concat of exactly those two Slices of one tensor becomes memplan Roll (analysis/ops.hpp), whose gradient is
// one Roll back. Anything else (other steps, a gap or an overlap between the pieces, three pieces, another axis,
// a Slice read elsewhere) stays as it is.
#include <algorithm>

#include "analysis/autodiff.hpp"
#include "analysis/ops.hpp"
#include "planner/fusion.hpp"
#include "planner/fusion_norms_match.hpp"

namespace memplan::planner {

using namespace norm_match;

namespace {

// A Slice of one axis with step 1: its input, axis and the half-open range [begin, end) it keeps, clamped to
// the axis as ONNX clamps it.
struct AxisSlice {
  TensorId x = kNoTensor;
  std::int64_t axis = 0, begin = 0, end = 0;
};

std::optional<AxisSlice> axis_slice(const Graph& g, OpId o) {
  if (!is(g, o, "Slice")) return std::nullopt;
  const Op& op = g.ops[o];
  const TensorId x = op.input(0);
  if (x == kNoTensor || !g.tensors[x].shape_known()) return std::nullopt;
  const auto dims = g.tensors[x].shape();
  const auto starts = ints_of(g, op, 1, "starts"), ends = ints_of(g, op, 2, "ends");
  auto axes = ints_of(g, op, 3, "axes");
  const auto steps = ints_of(g, op, 4, "steps");
  if (!starts || !ends || !axes || !steps || starts->size() != 1 || ends->size() != 1) return std::nullopt;
  if (!steps->empty() && (steps->size() != 1 || (*steps)[0] != 1)) return std::nullopt;
  if (axes->empty()) axes->push_back(0);
  if (axes->size() != 1) return std::nullopt;
  const auto rank = static_cast<std::int64_t>(dims.size());
  std::int64_t a = (*axes)[0];
  if (a < -rank || a >= rank) return std::nullopt;
  if (a < 0) a += rank;
  const std::int64_t n = dims[static_cast<std::size_t>(a)];
  auto clamp = [n](std::int64_t v) { return std::clamp<std::int64_t>(v < 0 ? v + n : v, 0, n); };
  return AxisSlice{x, a, clamp((*starts)[0]), clamp((*ends)[0])};
}

// Concat(x[k:], x[:k]) along one axis of n elements, 0 < k < n: y[i] = x[(i + k) mod n], a roll by n - k.
std::optional<Found> roll_at(const Graph& g, OpId o) {
  if (!is(g, o, "Concat") || g.ops[o].inputs.size() != 2) return std::nullopt;
  const Op& cat = g.ops[o];
  const OpId p0 = made_by(g, cat.inputs[0], "Slice"), p1 = made_by(g, cat.inputs[1], "Slice");
  if (p0 == kNoOp || p1 == kNoOp || p0 == p1) return std::nullopt;
  const auto head = axis_slice(g, p0), tail = axis_slice(g, p1);
  if (!head || !tail || head->x != tail->x || head->axis != tail->axis) return std::nullopt;
  const auto dims = g.tensors[head->x].shape();
  const auto rank = static_cast<std::int64_t>(dims.size());
  std::int64_t axis = cat.attr_int("axis", 0);
  if (axis < -rank || axis >= rank) return std::nullopt;
  if (axis < 0) axis += rank;
  const std::int64_t n = dims[static_cast<std::size_t>(axis)], k = head->begin;
  if (axis != head->axis || head->end != n || tail->begin != 0 || tail->end != k || k <= 0 || k >= n) return std::nullopt;
  if (!same_shape(g, head->x, cat.outputs[0])) return std::nullopt;
  Found f;
  f.m.members = {p0, p1, o};
  f.m.result = cat.outputs[0];
  f.kind = "roll";
  f.op.type = std::string(analysis::memplan_ops::kRoll);
  f.op.domain = std::string(analysis::kMemplanDomain);
  f.op.inputs = {head->x};
  f.op.attrs["shifts"] = analysis::autodiff::attr_ints({n - k});
  f.op.attrs["axes"] = analysis::autodiff::attr_ints({axis});
  return f;
}

}  // namespace

FusionResult fuse_rolls(const Graph& g) { return fuse_matches(g, &roll_at); }

}  // namespace memplan::planner
