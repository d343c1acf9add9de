// Shape inference driver: binds symbolic dims, visits ops in topological order, folds constant ops.
#include "analysis/shapes.hpp"

#include <algorithm>

#include "analysis/control_flow.hpp"
#include "analysis/liveness.hpp"
#include "analysis/ops.hpp"
#include "analysis/shape_rules.hpp"

namespace memplan::analysis {

using shape_detail::OpContext;
using shape_detail::OpRule;
using shape_detail::Shape;
using shape_detail::Values;

namespace {

// Integer values up to this many elements are tracked (not folded) even when fold_max_elements is
// smaller, so that shape arithmetic still resolves.
constexpr std::uint64_t kTrackElements = 4096;
constexpr std::int64_t kMaxBoundDim = std::int64_t{1} << 40;

// Values of these dtypes can be folded: whole bytes, and numbers TensorData can read and write.
bool foldable(DType t) {
  const std::uint32_t bits = dtype_bits(t);
  return bits > 0 && bits % 8 == 0 && t != DType::c64 && t != DType::c128 && !(bits == 8 && dtype_is_float(t));
}

bool is_default_domain(const Op& op) { return op.domain.empty() || op.domain == "ai.onnx"; }

void check_bindings(const ShapeOptions& opts) {
  for (const auto& [name, value] : opts.dims)
    if (value < 1 || value > kMaxBoundDim)
      fail(ErrorKind::usage, "dim '" + name + "' is bound to " + std::to_string(value) + ", outside 1 .. 2^40");
}

// Graph inputs get concrete dims from the bindings; weights and constants must already have them.
void bind_sources(Graph& g, const ShapeOptions& opts) {
  for (auto& t : g.tensors) {
    if (t.producer != kNoOp) continue;
    if (!t.rank_known)
      fail(ErrorKind::shape, "tensor '" + t.name + "' (" + role_name(t.role) + ") has no declared rank");
    for (std::size_t k = 0; k < t.dims.size(); ++k) {
      Dim& d = t.dims[k];
      if (d.known()) continue;
      if (d.value < -1 && d.symbol.empty())
        fail(ErrorKind::overflow, "dim " + std::to_string(k) + " of '" + t.name + "' is negative (" + std::to_string(d.value) + ")");
      if (d.symbol.empty())
        fail(ErrorKind::shape, "dim " + std::to_string(k) + " of '" + t.name + "' is unknown and has no symbol to bind");
      auto it = opts.dims.find(d.symbol);
      if (it == opts.dims.end())
        fail(ErrorKind::shape, "symbolic dim '" + d.symbol + "' of input '" + t.name + "' is not bound (pass --dim " +
                                   d.symbol + "=N)");
      d = Dim::of(it->second);
    }
    if (t.dtype == DType::undefined) fail(ErrorKind::shape, "tensor '" + t.name + "' has no dtype");
    if (t.data && (t.data->dtype != t.dtype || t.data->dims != t.shape() ||
                   t.data->bytes.size() * 8 < checked_mul(t.element_count(), dtype_bits(t.dtype), t.name)))
      fail(ErrorKind::malformed, "the value of '" + t.name + "' does not match its dtype and shape");
    (void)t.element_count();  // overflow check on the bound shape
    if (dtype_bits(t.dtype) > 0) (void)t.bytes();
  }
}

[[noreturn]] void schema_error(const std::string& where, const std::string& what) {
  fail(ErrorKind::invalid_graph, where + ": " + what);
}

std::string typed_shape(const Tensor& t) {
  std::string s = std::string(dtype_name(t.dtype)) + " [";
  for (std::size_t k = 0; k < t.dims.size(); ++k)
    s += (k ? "," : "") + (t.dims[k].known() ? std::to_string(t.dims[k].value) : t.dims[k].symbol.empty() ? "?" : t.dims[k].symbol);
  return s + "]";
}

// The operand slots of a memplan op against its schema (OpInfo::arity).
void check_slots(const Op& op, const OpArity& a, const std::string& where) {
  if (op.inputs.size() > a.max_inputs)
    schema_error(where, "has " + std::to_string(op.inputs.size()) + " inputs, at most " + std::to_string(a.max_inputs) + " expected");
  if (op.outputs.size() > a.max_outputs)
    schema_error(where, "has " + std::to_string(op.outputs.size()) + " outputs, at most " + std::to_string(a.max_outputs) + " expected");
  for (std::size_t i = 0; i < 32; ++i) {
    if (((a.required_inputs >> i) & 1u) && op.input(i) == kNoTensor)
      schema_error(where, "required input " + std::to_string(i) + " is missing (" + std::to_string(op.inputs.size()) + " inputs given)");
    if (((a.required_outputs >> i) & 1u) && op.output(i) == kNoTensor) schema_error(where, "required output " + std::to_string(i) + " is missing");
  }
}

// Fails unless every tensor of `ts` has a known shape and dtype; the message is `before`, the tensor's name quoted,
// then `after`.
void require_typed(const Graph& g, const std::vector<TensorId>& ts, ErrorKind kind, const std::string& before,
                   const std::string& after) {
  for (TensorId t : ts)
    if (t != kNoTensor && (!g.tensors[t].shape_known() || g.tensors[t].dtype == DType::undefined))
      fail(kind, before + "'" + g.tensors[t].name + "' " + after);
}

// A computed output against what the file declared for it (`d`): the same dtype where declared, the same rank and
// dims where declared.
bool agrees_with_declared(const Tensor& d, const Tensor& x) {
  bool agrees = d.dtype == DType::undefined || d.dtype == x.dtype;
  if (d.rank_known) {
    agrees = agrees && d.dims.size() == x.dims.size();
    for (std::size_t j = 0; agrees && j < d.dims.size(); ++j) agrees = !d.dims[j].known() || d.dims[j].value == x.dims[j].value;
  }
  return agrees;
}

// The outputs the schema computed against those declared (`declared`, per output); an output it does not compute
// keeps its declared shape, which it must have.
void check_declared_outputs(Graph& g, const Op& op, const std::vector<Tensor>& declared, const std::string& where) {
  for (std::size_t k = 0; k < op.outputs.size(); ++k) {
    const TensorId t = op.outputs[k];
    if (t == kNoTensor) continue;
    const Tensor& x = g.tensors[t];
    const Tensor& d = declared[k];
    if (!x.shape_known() || x.dtype == DType::undefined) {
      if (!d.shape_known() || d.dtype == DType::undefined)
        fail(ErrorKind::shape, where + ": output '" + x.name + "' has no declared shape");
      continue;  // an optional output the schema does not compute keeps its declared shape
    }
    if (!agrees_with_declared(d, x))
      schema_error(where, "output '" + x.name + "' is declared " + typed_shape(d) + ", but the op computes " + typed_shape(x) +
                              " from its inputs");
  }
}

// memplan's own ops are trusted by no stage as declared: the op must be one memplan knows, its operand slots those of
// its schema, and where the registry has a schema rule, its outputs are computed from the inputs (attributes, ranks and
// dtypes checked) and must agree with any shape or dtype the file declared; an output declared without a shape takes
// the computed one. Every failure is ErrorKind::invalid_graph naming the op (attribute types stay malformed).
void check_memplan_op(Graph& g, OpId o, const Values& values) {
  const Op& op = g.ops[o];
  const std::string where = "op '" + op.name + "' (memplan::" + op.type + ")";
  const OpInfo* info = op_registry().find(op);
  if (!info) fail(ErrorKind::unsupported, where + ": memplan has no op of this type");
  if (info->arity.known) check_slots(op, info->arity, where);
  require_typed(g, op.inputs, ErrorKind::shape, where + ": input ", "has no known shape");
  if (!info->schema) {
    require_typed(g, op.outputs, ErrorKind::shape, where + ": output ", "has no declared shape");
    return;
  }
  std::vector<Tensor> declared;
  for (TensorId t : op.outputs) declared.push_back(t == kNoTensor ? Tensor{} : g.tensors[t]);
  try {
    OpContext c(g, o, values);
    info->schema->shape(c);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::shape && e.kind() != ErrorKind::unsupported) throw;
    const std::string m = e.what();
    fail(ErrorKind::invalid_graph, m.rfind("op '", 0) == 0 ? m : where + ": " + m);
  }
  check_declared_outputs(g, op, declared, where);
}

// The op's outputs inferred by its rule (declared dims of intermediates are only hints: always inferred), each with a
// shape and dtype. Returns the most elements of an output, and in `evaluable` whether every output's dtype folds.
std::uint64_t infer_outputs(Graph& g, const Op& op, const OpRule& rule, OpContext& c, const std::string& where, bool& evaluable) {
  for (TensorId t : op.inputs)
    if (t != kNoTensor && !g.tensors[t].shape_known())
      fail(ErrorKind::shape, where + ": input '" + g.tensors[t].name + "' has no known shape");
  for (TensorId t : op.outputs)
    if (t != kNoTensor) {
      g.tensors[t].rank_known = false;
      g.tensors[t].dims.clear();
      g.tensors[t].dtype = DType::undefined;
    }
  rule.shape(c);
  std::uint64_t largest = 0;
  evaluable = true;
  for (TensorId t : op.outputs) {
    if (t == kNoTensor) continue;
    const Tensor& x = g.tensors[t];
    if (!x.shape_known() || x.dtype == DType::undefined)
      fail(ErrorKind::shape, where + ": the shape of output '" + x.name + "' cannot be derived");
    if (dtype_bits(x.dtype) > 0) (void)x.bytes();
    largest = std::max(largest, x.element_count());
    evaluable = evaluable && foldable(x.dtype);
  }
  return largest;
}

// The op's output values by its rule's evaluator, where every input value it needs is known; false where one is not.
bool evaluate_outputs(const Graph& g, const Op& op, const OpRule& rule, OpContext& c, Values& values, const std::string& where) {
  if (rule.eval_needs_data)
    for (TensorId t : op.inputs)
      if (t != kNoTensor && (!values[t] || !foldable(g.tensors[t].dtype))) return false;
  std::vector<TensorData> out = rule.eval(c);
  for (std::size_t k = 0; k < op.outputs.size(); ++k) {
    const TensorId t = op.outputs[k];
    if (t == kNoTensor) continue;
    if (k >= out.size() || out[k].dims != g.tensors[t].shape() || out[k].dtype != g.tensors[t].dtype)
      fail(ErrorKind::shape, where + ": evaluated value of '" + g.tensors[t].name + "' disagrees with its shape");
    values[t] = std::make_shared<const TensorData>(std::move(out[k]));
  }
  return true;
}

// Runs one op's rule; returns true when its outputs were evaluated and may be folded.
bool visit(Graph& g, OpId o, Values& values, const ShapeOptions& opts) {
  const Op& op = g.ops[o];
  const std::string where = "op '" + op.name + "' (" + op.type + ")";
  if (op.type == "SequenceMap") fail(ErrorKind::unsupported, where + ": sequences are not supported");
  if (op.domain == kMemplanDomain) {
    check_memplan_op(g, o, values);
    return false;
  }
  if (!is_default_domain(op)) {
    // Ops of other domains carry their output shapes; nothing to infer from.
    require_typed(g, op.outputs, ErrorKind::unsupported, where + " of domain '" + op.domain + "' has no shape rule and output ",
                  "has no declared shape");
    return false;
  }
  const OpInfo* info = op_registry().find(op);
  if (!info || !info->shape) fail(ErrorKind::unsupported, where + ": unknown op type");
  const OpRule& rule = *info->shape;
  OpContext c(g, o, values);
  bool evaluable = true;
  const std::uint64_t largest = infer_outputs(g, op, rule, c, where, evaluable);
  if (!rule.eval || !evaluable || largest > std::max(opts.fold_max_elements, kTrackElements)) return false;
  if (!evaluate_outputs(g, op, rule, c, values, where)) return false;
  return largest <= opts.fold_max_elements;
}

// Drops folded ops and the tensors only they touched; keeps the order of everything else.
Graph compact(Graph g, const std::vector<bool>& folded) {
  const std::size_t nt = g.tensors.size();
  std::vector<bool> used(nt, false), touched_by_folded(nt, false);
  for (TensorId t : g.inputs) used[t] = true;
  for (TensorId t : g.outputs) used[t] = true;
  for (OpId o = 0; o < g.ops.size(); ++o)
    for (const auto* list : {&g.ops[o].inputs, &g.ops[o].outputs})
      for (TensorId t : *list)
        if (t != kNoTensor) (folded[o] ? touched_by_folded : used)[t] = true;
  std::vector<TensorId> remap(nt, kNoTensor);
  std::vector<Tensor> kept;
  for (TensorId t = 0; t < nt; ++t) {
    if (!used[t] && touched_by_folded[t]) continue;
    remap[t] = static_cast<TensorId>(kept.size());
    kept.push_back(std::move(g.tensors[t]));
  }
  std::vector<Op> ops;
  for (OpId o = 0; o < g.ops.size(); ++o) {
    if (folded[o]) continue;
    Op op = std::move(g.ops[o]);
    for (auto* list : {&op.inputs, &op.outputs})
      for (TensorId& t : *list)
        if (t != kNoTensor) t = remap[t];
    ops.push_back(std::move(op));
  }
  for (TensorId& t : g.inputs) t = remap[t];
  for (TensorId& t : g.outputs) t = remap[t];
  g.tensors = std::move(kept);
  g.ops = std::move(ops);
  g.relink();
  return g;
}

// One inference pass over `base`, up to the first control-flow op it reaches (kNoOp: none, the pass is complete).
struct Pass {
  Graph g;
  Values values;
  std::vector<bool> folded;
  OpId control_flow = kNoOp;
};

Pass infer_pass(const Graph& base, const ShapeOptions& opts) {
  Pass p{base, {}, std::vector<bool>(base.ops.size(), false)};
  Graph& g = p.g;
  g.relink();
  bind_sources(g, opts);
  p.values.resize(g.tensors.size());
  for (TensorId t = 0; t < g.tensors.size(); ++t) p.values[t] = g.tensors[t].data;
  for (OpId o : topological_order(g)) {
    if (control_flow::is_control_flow(g.ops[o])) {
      p.control_flow = o;
      return p;
    }
    if (!visit(g, o, p.values, opts)) continue;
    p.folded[o] = true;
    for (TensorId t : g.ops[o].outputs) {
      if (t == kNoTensor) continue;
      g.tensors[t].data = p.values[t];
      g.tensors[t].role = TensorRole::weight;
    }
  }
  return p;
}

Graph shape_graph(const Graph& in, const ShapeOptions& opts, bool measuring, std::vector<std::string>& notes);

// The shaped graph with If `o`'s branch inlined and the lower bound of its live bytes; an Error when it does not infer.
struct Candidate {
  std::uint64_t peak = 0;
  std::optional<Error> error;
};

Candidate measure_branch(const Graph& base, OpId o, bool then_branch, const ShapeOptions& opts) {
  try {
    std::vector<std::string> ignored;
    const Graph s = shape_graph(control_flow::inline_if(base, o, then_branch), opts, true, ignored);
    return {analyze_liveness(s, topological_order(s)).lower_bound_bytes, std::nullopt};
  } catch (const Error& e) {
    return {0, e};
  }
}

// An If whose condition is not known at planning time: both branches are shaped and the one whose inlined graph
// needs more memory is planned (the then branch on a tie), so the plan holds whichever runs; a branch that does
// not infer for these shapes is never chosen. Later unknown Ifs take their then branch while measuring.
Graph inline_larger_branch(const Graph& base, OpId o, const ShapeOptions& opts, std::vector<std::string>& notes) {
  const Op& op = base.ops[o];
  const Candidate a = measure_branch(base, o, true, opts), b = measure_branch(base, o, false, opts);
  if (a.error && b.error) throw *a.error;
  const bool then_branch = !a.error && (b.error || a.peak >= b.peak);
  const Candidate& other = then_branch ? b : a;
  std::string why = other.error ? std::string("the ") + (then_branch ? "else" : "then") + " branch does not infer here (" +
                                      other.error->what() + ")"
                                : "it is the larger in memory (" + std::to_string((then_branch ? a : b).peak) + " bytes live at the peak, against " +
                                      std::to_string(other.peak) + " with the " + (then_branch ? "else" : "then") + " branch)";
  notes.push_back("op '" + op.name + "' (If): its condition '" + base.tensors[op.inputs[0]].name +
                  "' is not known at planning time; planned with its " + (then_branch ? "then" : "else") + " branch: " + why);
  return control_flow::inline_if(base, o, then_branch);
}

Graph expand_control_flow(const Graph& base, const Pass& p, const ShapeOptions& opts, bool measuring,
                          std::vector<std::string>& notes) {
  const control_flow::Reached r{base, p.control_flow, p.g, p.values};
  const Op& op = base.ops[r.o];
  if (op.type == "Loop") return control_flow::unroll_loop(r);
  if (op.type == "Scan") return control_flow::unroll_scan(r);
  if (control_flow::is_recurrent(op)) return control_flow::unroll_recurrent(r);
  if (const auto cond = control_flow::if_condition(r)) return control_flow::inline_if(base, r.o, *cond);
  if (measuring) return control_flow::inline_if(base, r.o, true);
  return inline_larger_branch(base, r.o, opts, notes);
}

// Passes over the graph until no control flow is left (each expands the first If, Loop or Scan reached, whose
// inputs the pass has shaped), then the folded ops are dropped.
Graph shape_graph(const Graph& in, const ShapeOptions& opts, bool measuring, std::vector<std::string>& notes) {
  Graph base = in;
  for (std::size_t expanded = 0;; ++expanded) {
    Pass p = infer_pass(base, opts);
    if (p.control_flow == kNoOp) return compact(std::move(p.g), p.folded);
    // Each expansion costs a pass over the graph: nested loops could otherwise multiply both without bound.
    if (expanded == control_flow::kMaxExpansions || base.ops.size() > in.ops.size() + control_flow::kMaxUnrolledOps)
      fail(ErrorKind::unsupported, "op '" + base.ops[p.control_flow].name + "' (" + base.ops[p.control_flow].type +
                                       "): the graph's control flow expands into more than " + std::to_string(control_flow::kMaxExpansions) +
                                       " If/Loop/Scan ops or " + std::to_string(control_flow::kMaxUnrolledOps) + " added ops");
    base = expand_control_flow(base, p, opts, measuring, notes);
  }
}

}  // namespace

Graph infer_shapes(const Graph& in, const ShapeOptions& opts) {
  check_bindings(opts);
  std::vector<std::string> notes = in.notes;
  Graph out = shape_graph(in, opts, false, notes);
  // The shape rules' notes (NonZero planned at its upper bound) are on the graph they shaped, beside a copy of in's.
  for (auto& n : out.notes)
    if (std::find(notes.begin(), notes.end(), n) == notes.end()) notes.push_back(std::move(n));
  out.notes = std::move(notes);
  shape_detail::lower_legacy_normalizers(out);
  shape_detail::raise_group_norms(out);
  for (const auto& t : out.tensors)
    if (!t.shape_known() || t.dtype == DType::undefined)
      fail(ErrorKind::shape, "tensor '" + t.name + "' has no inferred shape (no op produces it)");
  return out;
}

}  // namespace memplan::analysis
