// Backward rules of data-movement ops: views, Transpose, Concat/Split, Slice, Gather, GatherND, ScatterND/Elements.
#include <algorithm>
#include <memory>
#include <numeric>

#include "analysis/autodiff.hpp"

namespace memplan::analysis::autodiff {
namespace {

std::int64_t axis_of(const GradContext& c, std::size_t rank) {
  const auto r = static_cast<std::int64_t>(rank);
  const std::int64_t a = c.fwd().attr_int("axis", 0);
  if (a < -r || a >= r) c.unsupported("axis " + std::to_string(a) + " is out of range");
  return a < 0 ? a + r : a;
}

void single(GradContext& c, const char* type, const char* domain, std::vector<TensorId> inputs,
            std::map<std::string, Attribute> attrs = {}) {
  TensorId g = c.grad_tensor(0);
  c.emit(type, domain, std::move(inputs), {g}, std::move(attrs));
  c.give(0, g);
}

// Reshape, Flatten, Squeeze, Unsqueeze: the gradient is dY viewed in X's shape (a plain Reshape).
void view(GradContext& c) {
  TensorId shape = c.int_constant("shape", c.shape(c.in(0)));
  single(c, "Reshape", "", {c.dy(), shape});
}

void transpose(GradContext& c) {
  const std::size_t rank = c.shape(c.in(0)).size();
  std::vector<std::int64_t> perm = c.fwd().attr_ints("perm");
  if (perm.empty())
    for (std::size_t k = rank; k-- > 0;) perm.push_back(static_cast<std::int64_t>(k));
  // Entries may count from the end (the TorchScript exporter writes [0, -2, -1, 1]), as the shape rule reads them.
  const auto r = static_cast<std::int64_t>(rank);
  if (perm.size() != rank) c.unsupported("perm has " + std::to_string(perm.size()) + " entries for rank " + std::to_string(rank));
  std::vector<std::int64_t> inverse(rank, -1);
  for (std::size_t k = 0; k < rank; ++k) {
    const std::int64_t p = perm[k] < 0 ? perm[k] + r : perm[k];
    if (p < 0 || p >= r || inverse[static_cast<std::size_t>(p)] >= 0) c.unsupported("perm is not a permutation of the axes");
    inverse[static_cast<std::size_t>(p)] = static_cast<std::int64_t>(k);
  }
  single(c, "Transpose", "", {c.dy()}, {{"perm", attr_ints(inverse)}});
}

// Concat's gradient is a plain Split of dY at the inputs' extents.
void concat(GradContext& c) {
  const auto& f = c.fwd();
  const std::int64_t axis = axis_of(c, c.shape(c.out(0)).size());
  std::vector<std::int64_t> sizes;
  std::vector<TensorId> outs;
  for (std::size_t i = 0; i < f.inputs.size(); ++i) {
    const Shape s = c.shape(f.inputs[i]);
    sizes.push_back(s.at(static_cast<std::size_t>(axis)));
    outs.push_back(c.wants(i) ? c.grad_tensor(i) : c.temp("unused" + std::to_string(i), c.tensor(c.out(0)).dtype, s));
  }
  std::map<std::string, Attribute> at{{"axis", attr_i(axis)}};
  std::vector<TensorId> ins{c.dy()};
  if (c.graph().opset > 0 && c.graph().opset < 13) at["split"] = attr_ints(sizes);
  else ins.push_back(c.int_constant("split", sizes));
  c.emit("Split", "", std::move(ins), outs, std::move(at));
  for (std::size_t i = 0; i < f.inputs.size(); ++i)
    if (c.wants(i)) c.give(i, outs[i]);
}

// Split's gradient: a plain Concat of the outputs' gradients, or memplan SplitGrad when some have none.
void split(GradContext& c) {
  const auto& f = c.fwd();
  const std::int64_t axis = axis_of(c, c.shape(c.in(0)).size());
  std::vector<TensorId> dys;
  std::vector<std::int64_t> sizes;
  bool all = true;
  for (std::size_t i = 0; i < f.outputs.size(); ++i) {
    dys.push_back(c.dy(i));
    all = all && dys.back() != kNoTensor;
    sizes.push_back(c.shape(f.outputs[i]).at(static_cast<std::size_t>(axis)));
  }
  if (all) return single(c, "Concat", "", dys, {{"axis", attr_i(axis)}});
  single(c, "SplitGrad", "memplan", dys, {{"axis", attr_i(axis)}, {"split", attr_ints(sizes)}});
}

void slice(GradContext& c) {
  const auto& f = c.fwd();
  std::vector<TensorId> ins{c.dy()};
  for (std::size_t i = 1; i < 5; ++i) ins.push_back(f.input(i));
  while (ins.back() == kNoTensor) ins.pop_back();
  std::map<std::string, Attribute> at;  // opset < 10 keeps starts/ends/axes as attributes
  for (const char* k : {"starts", "ends", "axes"})
    if (const Attribute* a = f.attr(k)) at[k] = *a;
  single(c, "SliceGrad", "memplan", std::move(ins), std::move(at));
}

void gather(GradContext& c) {
  const std::int64_t axis = axis_of(c, c.shape(c.in(0)).size());
  const char* type = c.fwd().type == "Gather" ? "GatherGrad" : "GatherElementsGrad";
  single(c, type, "memplan", {c.dy(), c.in(1)}, {{"axis", attr_i(axis)}});
}

// Zeros of `dtype` and `shape` (a ConstantOfShape whose value has the dtype).
TensorId zeros(GradContext& c, const std::string& hint, DType dtype, const Shape& shape) {
  const TensorId dims = c.int_constant(hint + "_shape", shape);
  const TensorId z = c.temp(hint, dtype, shape);
  Attribute v;
  v.kind = Attribute::Kind::tensor;
  v.t = std::make_shared<TensorData>(TensorData::from_double(dtype, {1}, {0.0}));
  c.emit("ConstantOfShape", "", {dims}, {z}, {{"value", v}});
  return z;
}

// GatherND (batch_dims 0): dX is zeros with each dY slice added at its index tuple (ScatterND, reduction add:
// repeated tuples accumulate).
void gather_nd(GradContext& c) {
  if (c.fwd().attr_int("batch_dims", 0) != 0) c.unsupported("GatherND with batch_dims has no backward rule");
  const TensorId x = c.in(0);
  const DType dt = c.tensor(x).dtype;
  const TensorId z = zeros(c, "zeros", dt, c.shape(x));
  const TensorId g = c.grad_tensor(0);
  c.emit("ScatterND", "", {z, c.in(1), c.dy()}, {g}, {{"reduction", attr_s("add")}});
  c.give(0, g);
}

// ScatterND / ScatterElements with reduction none: dData is dY with the scattered positions zeroed (the same scatter
// of zeros), dUpdates is dY gathered at the indices (GatherND / GatherElements), as torch's index_put and scatter.
// With reduction add (torch's index_put(accumulate=True), index_add, scatter_add) every element of the data is kept
// and added to: dData is dY itself, dUpdates the same gather (repeated indices each read their position's dY).
void scatter(GradContext& c) {
  const bool nd = c.fwd().type == "ScatterND";
  const std::string reduction = c.fwd().attr_string("reduction", "none");
  if (reduction != "none" && reduction != "add") c.unsupported("only reductions 'none' and 'add' have a backward rule");
  std::map<std::string, Attribute> at;
  if (!nd) at["axis"] = attr_i(axis_of(c, c.shape(c.in(0)).size()));
  if (c.wants(0) && reduction == "add") {
    c.give(0, c.dy());
  } else if (c.wants(0)) {
    const TensorId u = c.in(2);
    const DType dt = c.tensor(u).dtype;
    const TensorId z = zeros(c, "zeros", dt, c.shape(u));
    const TensorId g = c.grad_tensor(0);
    c.emit(nd ? "ScatterND" : "ScatterElements", "", {c.dy(), c.in(1), z}, {g}, at);
    c.give(0, g);
  }
  if (c.wants(2)) {
    const TensorId g = c.grad_tensor(2);
    c.emit(nd ? "GatherND" : "GatherElements", "", {c.dy(), c.in(1)}, {g}, at);
    c.give(2, g);
  }
}

// Resize / Upsample, nearest, linear or cubic: memplan ResizeGrad of dY with the forward's roi and scales inputs at their
// positions and its attributes; `legacy` marks the layout of Upsample and opset-10 Resize (scales at input 1).
void resize(GradContext& c) {
  const Op f = c.fwd();
  const std::string mode = f.attr_string("mode", "nearest");
  if (mode != "nearest" && mode != "linear" && mode != "bilinear" && mode != "cubic")
    c.unsupported("mode '" + mode + "' has no backward rule");
  if (f.attr_int("antialias", 0) != 0) c.unsupported("antialias has no backward rule");
  std::vector<TensorId> ins{c.dy()};
  ins.insert(ins.end(), f.inputs.begin() + 1, f.inputs.end());
  std::map<std::string, Attribute> at = f.attrs;
  at["legacy"] = attr_i(f.type == "Upsample" || f.inputs.size() == 2 ? 1 : 0);
  single(c, "ResizeGrad", "memplan", std::move(ins), std::move(at));
}

// TopK: the values' gradient lands where they were taken (memplan GatherElementsGrad of dY at the indices output along
// the axis); the indices carry none.
void top_k(GradContext& c) {
  const auto r = static_cast<std::int64_t>(c.shape(c.in(0)).size());
  std::int64_t axis = c.fwd().attr_int("axis", -1);
  if (axis < -r || axis >= r) c.unsupported("axis " + std::to_string(axis) + " is out of range");
  if (axis < 0) axis += r;
  single(c, "GatherElementsGrad", "memplan", {c.dy(0), c.out(1)}, {{"axis", attr_i(axis)}});
}

// Pad: a constant Pad that only grows x gives dY cropped back to x (a Slice from the leading pads). Other modes
// (reflect, edge, wrap), negative pads (crops) and an axes input give one memplan PadGrad, which adds each dY element
// to the x element it read (runtime_allocator/kernels/pad_index.hpp), with the pads spelled out for every axis.
void pad(GradContext& c) {
  const std::string mode = c.fwd().attr_string("mode", "constant");
  std::vector<std::int64_t> pads = c.fwd().attr_ints("pads");
  if (c.in(1) != kNoTensor) {
    const Tensor& p = c.tensor(c.in(1));
    if (!p.data) c.unsupported("the pads are computed at run time");
    pads = p.data->as_int64();
  }
  const Shape x = c.shape(c.in(0));
  std::vector<std::int64_t> axes;
  if (c.fwd().input(3) != kNoTensor) {
    const Tensor& a = c.tensor(c.fwd().input(3));
    if (!a.data) c.unsupported("the axes are computed at run time");
    axes = a.data->as_int64();
  } else {
    axes.resize(x.size());
    std::iota(axes.begin(), axes.end(), 0);
  }
  if (pads.size() != 2 * axes.size()) c.unsupported("pads do not give a begin and an end per padded axis");
  std::vector<std::int64_t> full(2 * x.size(), 0);
  const auto rank = static_cast<std::int64_t>(x.size());
  for (std::size_t k = 0; k < axes.size(); ++k) {
    if (axes[k] < -rank || axes[k] >= rank) c.unsupported("axis " + std::to_string(axes[k]) + " is out of range");
    const auto a = static_cast<std::size_t>(axes[k] < 0 ? axes[k] + rank : axes[k]);
    full[a] = pads[k];
    full[a + x.size()] = pads[k + axes.size()];
  }
  const bool grows = std::all_of(full.begin(), full.end(), [](std::int64_t p) { return p >= 0; });
  if (mode != "constant" || !grows) {
    if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap") c.unsupported("mode '" + mode + "'");
    return single(c, "PadGrad", "memplan", {c.dy()}, {{"mode", attr_s(mode)}, {"pads", attr_ints(full)}});
  }
  std::vector<std::int64_t> starts(x.size()), ends(x.size());
  for (std::size_t k = 0; k < x.size(); ++k) {
    starts[k] = full[k];
    ends[k] = full[k] + x[k];
  }
  const TensorId g = c.grad_tensor(0);
  c.emit("Slice", "", {c.dy(), c.int_constant("starts", starts), c.int_constant("ends", ends)}, {g});
  c.give(0, g);
}

// memplan Roll: the gradient is dY rolled back (every shift negated).
void roll(GradContext& c) {
  std::vector<std::int64_t> back = c.fwd().attr_ints("shifts");
  for (auto& s : back) s = -s;
  single(c, memplan_ops::kRoll.data(), "memplan", {c.dy()}, {{"shifts", attr_ints(back)}, {"axes", attr_ints(c.fwd().attr_ints("axes"))}});
}

}  // namespace

void add_tensor_grads(GradTable& t) {
  t["Pad"] = {pad, 1u, 1u};
  for (const char* v : {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}) t[v] = {view, 1u, 1u};
  t["Transpose"] = {transpose, 1u, 1u};
  t["Concat"] = {concat, kAll, 1u};
  t["Split"] = {split, 1u, kAll};
  t["Slice"] = {slice, 1u, 1u};
  t[std::string(memplan_ops::kRoll)] = {roll, 1u, 1u};
  t["Gather"] = {gather, 1u, 1u};
  t["GatherElements"] = {gather, 1u, 1u};
  t["GatherND"] = {gather_nd, 1u, 1u};
  t["ScatterND"] = {scatter, 5u, 1u};
  t["ScatterElements"] = {scatter, 5u, 1u};
  t["Resize"] = {resize, 1u, 1u};
  t["TopK"] = {top_k, 1u, 1u};
  t["Upsample"] = {resize, 1u, 1u};
}

}  // namespace memplan::analysis::autodiff
