// ONNX Loop and Scan made ordinary ops: unrolled where the number of iterations is known at planning time.
#include <algorithm>

#include "analysis/control_flow.hpp"
#include "analysis/control_flow_splice.hpp"

namespace memplan::analysis::control_flow {

namespace {

[[noreturn]] void refuse(const Op& op, const std::string& why) {
  fail(ErrorKind::unsupported, op_where(op) + ": " + why + "; memplan plans loops only by unrolling them, which needs the "
                                                       "number of iterations at planning time");
}

bool used(const Graph& body, TensorId t) { return !body.tensors[t].consumers.empty() || body.tensors[t].is_graph_output; }

// True when the body hands its condition input on unchanged (directly or through Identity), or a constant true.
bool keeps_condition(const Graph& body, TensorId t) {
  for (;;) {
    if (t == body.inputs[1]) return true;
    const Tensor& x = body.tensors[t];
    if (x.data) {
      const auto v = x.data->as_double();
      return !v.empty() && std::all_of(v.begin(), v.end(), [](double d) { return d != 0.0; });
    }
    if (x.producer == kNoOp || body.ops[x.producer].type != "Identity") return false;
    t = body.ops[x.producer].input(0);
  }
}

// The Loop's trip count: M known at planning time, and its condition neither false from the start (then 0) nor
// computed at run time.
std::int64_t loop_trips(const Reached& r, const Graph& body) {
  const Op& op = r.base.ops[r.o];
  const TensorId m = op.input(0);
  if (m == kNoTensor) refuse(op, "it has no trip count M (a while loop: its condition decides at run time when it ends)");
  if (!r.values[m] || r.values[m]->element_count() != 1)
    refuse(op, "its trip count '" + r.base.tensors[m].name + "' is not known at planning time (it is computed from input values)");
  const std::int64_t trips = r.values[m]->as_int64().front();
  if (trips < 0) fail(ErrorKind::invalid_graph, op_where(op) + ": its trip count is negative (" + std::to_string(trips) + ")");
  const TensorId cond = op.input(1);
  if (cond != kNoTensor) {
    if (!r.values[cond] || r.values[cond]->element_count() != 1)
      refuse(op, "its condition '" + r.base.tensors[cond].name + "' is not known at planning time (data-dependent)");
    if (r.values[cond]->as_double().front() == 0.0) return 0;
  }
  const TensorId cond_out = body.outputs[0];
  if (!keeps_condition(body, cond_out)) {
    const Tensor& x = body.tensors[cond_out];
    const std::string by = x.producer == kNoOp ? "" : " by " + op_where(body.ops[x.producer]);
    refuse(op, "its body computes the condition ('" + x.name + "'" + by + "), which may end the loop early: data-dependent");
  }
  return trips;
}

void check_unroll_size(const Op& op, std::int64_t trips, const Graph& body) {
  const std::uint64_t ops = static_cast<std::uint64_t>(trips) * (body.ops.size() + 2);
  if (ops > kMaxUnrolledOps)
    refuse(op, std::to_string(trips) + " iterations of " + std::to_string(body.ops.size()) + " ops would unroll into " +
                   std::to_string(ops) + " ops, over the limit of " + std::to_string(kMaxUnrolledOps));
}

void check_arity(const Op& op, const Graph& body, std::size_t in, std::size_t out_min) {
  if (body.inputs.size() != in || body.outputs.size() < out_min)
    fail(ErrorKind::invalid_graph, op_where(op) + ": its body has " + std::to_string(body.inputs.size()) + " inputs and " +
                                       std::to_string(body.outputs.size()) + " outputs, " + std::to_string(in) +
                                       " inputs and at least " + std::to_string(out_min) + " outputs expected");
}

// Where no iteration runs: the carried values are the initial ones; scan outputs would be empty of unknown shape.
Graph zero_trips(Rewrite& rw, const std::vector<TensorId>& initial, std::size_t scan_outputs) {
  const Op& op = rw.replaced();
  if (scan_outputs > 0) refuse(op, "it runs no iteration and has scan outputs, whose element shape is then unknown");
  for (std::size_t j = 0; j < initial.size(); ++j) rw.add_op("Identity", {initial[j]}, {op.outputs[j]});
  return std::move(rw).finish();
}

std::vector<TensorId> last_targets(const Op& op, std::size_t leading, std::size_t carried, std::size_t total) {
  std::vector<TensorId> targets(total, kNoTensor);
  for (std::size_t j = 0; j < carried; ++j) targets[leading + j] = op.outputs[j];
  return targets;
}

// Scan's per-input axis: attribute values (default 0) made non-negative against the input's rank.
std::int64_t scan_axis(const Reached& r, const Op& op, std::size_t m, TensorId x) {
  const auto axes = op.attr_ints("scan_input_axes");
  std::int64_t a = m < axes.size() ? axes[m] : 0;
  const auto rank = static_cast<std::int64_t>(r.shaped.tensors[x].dims.size());
  if (a < -rank || a >= rank)
    fail(ErrorKind::shape, op_where(op) + ": scan axis " + std::to_string(a) + " is out of range for input '" +
                               r.shaped.tensors[x].name + "' of rank " + std::to_string(rank));
  return a < 0 ? a + rank : a;
}

// The number of iterations: the length of every scan input along its scan axis (`axis`, one per input, filled).
std::int64_t scan_length(const Reached& r, const Op& op, std::size_t states, std::vector<std::int64_t>& axis) {
  std::int64_t length = -1;
  for (std::size_t j = 0; states + j < op.inputs.size(); ++j) {
    const TensorId x = op.inputs[states + j];
    if (x == kNoTensor) fail(ErrorKind::invalid_graph, op_where(op) + ": scan input " + std::to_string(j) + " is missing");
    axis.push_back(scan_axis(r, op, j, x));
    const std::int64_t n = r.shaped.tensors[x].dims[static_cast<std::size_t>(axis[j])].value;
    if (length >= 0 && n != length)
      fail(ErrorKind::shape, op_where(op) + ": its scan inputs have lengths " + std::to_string(length) + " and " + std::to_string(n));
    length = n;
  }
  return length;
}

}  // namespace

Graph unroll_loop(const Reached& r) {
  const Op& op = r.base.ops[r.o];
  const Graph& body = subgraph(op, "body");
  const std::size_t carried = op.inputs.size() >= 2 ? op.inputs.size() - 2 : 0;
  check_arity(op, body, 2 + carried, 1 + carried);
  const std::size_t scans = body.outputs.size() - 1 - carried;
  if (op.outputs.size() != carried + scans)
    fail(ErrorKind::invalid_graph, op_where(op) + ": has " + std::to_string(op.outputs.size()) + " outputs, its body makes " +
                                       std::to_string(carried + scans));
  const std::int64_t trips = loop_trips(r, body);
  check_unroll_size(op, trips, body);
  Rewrite rw(r.base, r.o);
  std::vector<TensorId> state(op.inputs.begin() + 2, op.inputs.end());
  if (trips == 0) return zero_trips(rw, state, scans);
  TensorId cond = op.input(1);
  if (cond == kNoTensor && used(body, body.inputs[1]))
    cond = rw.add_constant(op.name + "/cond", TensorData::from_int64(DType::boolean, {}, {1}));
  std::vector<std::vector<TensorId>> rows(scans);
  for (std::int64_t k = 0; k < trips; ++k) {
    const std::string prefix = op.name + "/iter" + std::to_string(k) + "/";
    std::vector<TensorId> bound{kNoTensor, cond};
    if (used(body, body.inputs[0])) bound[0] = rw.add_constant(prefix + "iteration", TensorData::from_int64(DType::i64, {}, {k}));
    bound.insert(bound.end(), state.begin(), state.end());
    const auto targets = k + 1 == trips ? last_targets(op, 1, carried, body.outputs.size()) : std::vector<TensorId>(body.outputs.size(), kNoTensor);
    const std::vector<TensorId> out = rw.splice(body, bound, prefix, targets);
    cond = out[0];
    std::copy(out.begin() + 1, out.begin() + 1 + static_cast<std::ptrdiff_t>(carried), state.begin());
    for (std::size_t s = 0; s < scans; ++s) rows[s].push_back(out[1 + carried + s]);
  }
  for (std::size_t s = 0; s < scans; ++s) rw.stack(rows[s], 0, op.outputs[carried + s], false);
  return std::move(rw).finish();
}

Graph unroll_scan(const Reached& r) {
  const Op& op = r.base.ops[r.o];
  if (r.base.opset < 9) refuse(op, "Scan of opset 8 (batched, with sequence lengths) is not supported");
  const Graph& body = subgraph(op, "body");
  const std::int64_t m = op.attr_int("num_scan_inputs", 0);
  if (m < 1 || static_cast<std::size_t>(m) > op.inputs.size())
    fail(ErrorKind::invalid_graph, op_where(op) + ": num_scan_inputs " + std::to_string(m) + " does not fit its " +
                                       std::to_string(op.inputs.size()) + " inputs");
  const std::size_t states = op.inputs.size() - static_cast<std::size_t>(m);
  check_arity(op, body, op.inputs.size(), states);
  const std::size_t scans = body.outputs.size() - states;
  if (op.outputs.size() != states + scans)
    fail(ErrorKind::invalid_graph, op_where(op) + ": has " + std::to_string(op.outputs.size()) + " outputs, its body makes " +
                                       std::to_string(states + scans));
  std::vector<std::int64_t> axis;
  const std::int64_t length = scan_length(r, op, states, axis);
  check_unroll_size(op, length, body);
  Rewrite rw(r.base, r.o);
  std::vector<TensorId> state(op.inputs.begin(), op.inputs.begin() + static_cast<std::ptrdiff_t>(states));
  if (length == 0) return zero_trips(rw, state, scans);
  const auto in_dirs = op.attr_ints("scan_input_directions");
  std::vector<std::vector<TensorId>> rows(scans);
  for (std::int64_t k = 0; k < length; ++k) {
    const std::string prefix = op.name + "/iter" + std::to_string(k) + "/";
    std::vector<TensorId> bound = state;
    for (std::size_t j = 0; j < axis.size(); ++j) {
      const bool reverse = j < in_dirs.size() && in_dirs[j] == 1;
      const TensorId at = rw.add_constant(prefix + "index", TensorData::from_int64(DType::i64, {}, {reverse ? length - 1 - k : k}));
      const TensorId slice = rw.add_tensor(prefix + "slice" + std::to_string(j));
      rw.add_op("Gather", {op.inputs[states + j], at}, {slice}, {{"axis", Attribute{.kind = Attribute::Kind::i, .i = axis[j]}}});
      bound.push_back(slice);
    }
    const auto targets = k + 1 == length ? last_targets(op, 0, states, body.outputs.size()) : std::vector<TensorId>(body.outputs.size(), kNoTensor);
    const std::vector<TensorId> out = rw.splice(body, bound, prefix, targets);
    std::copy(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(states), state.begin());
    for (std::size_t s = 0; s < scans; ++s) rows[s].push_back(out[states + s]);
  }
  const auto out_axes = op.attr_ints("scan_output_axes");
  const auto out_dirs = op.attr_ints("scan_output_directions");
  for (std::size_t s = 0; s < scans; ++s)
    rw.stack(rows[s], s < out_axes.size() ? out_axes[s] : 0, op.outputs[states + s], s < out_dirs.size() && out_dirs[s] == 1);
  return std::move(rw).finish();
}

}  // namespace memplan::analysis::control_flow
