// Replacing one control-flow op by ordinary ops: subgraphs spliced in under fresh names, outer reads resolved.
#include "analysis/control_flow_splice.hpp"

#include <algorithm>
#include <functional>

namespace memplan::analysis::control_flow {

namespace {

using Renamed = std::function<const std::string*(const std::string&)>;

// A tensor a subgraph reads from an enclosing scope (import_onnx: role input, no producer, not a formal input).
bool reads_outer(const Graph& sub, TensorId t) {
  const Tensor& x = sub.tensors[t];
  return x.producer == kNoOp && x.role == TensorRole::input && !x.data &&
         std::find(sub.inputs.begin(), sub.inputs.end(), t) == sub.inputs.end();
}

// `sub` with its reads of enclosing scopes (at any depth) renamed where `renamed` says; the same pointer when
// nothing changes.
std::shared_ptr<const Graph> rebind(const std::shared_ptr<const Graph>& sub, const Renamed& renamed) {
  Graph copy = *sub;
  bool changed = false;
  for (TensorId t = 0; t < copy.tensors.size(); ++t) {
    if (!reads_outer(copy, t)) continue;
    const std::string* name = renamed(copy.tensors[t].name);
    if (name && *name != copy.tensors[t].name) {
      copy.tensors[t].name = *name;
      changed = true;
    }
  }
  for (Op& op : copy.ops)
    for (auto& [key, a] : op.attrs) {
      if (a.kind != Attribute::Kind::graph || !a.graph) continue;
      auto inner = rebind(a.graph, renamed);
      changed = changed || inner != a.graph;
      a.graph = std::move(inner);
    }
  if (!changed) return sub;
  copy.relink();
  return std::make_shared<const Graph>(std::move(copy));
}

Attribute int_attr(std::int64_t v) { return Attribute{.kind = Attribute::Kind::i, .i = v}; }

}  // namespace

const Graph& subgraph(const Op& op, const std::string& key) {
  const Attribute* a = op.attr(key);
  if (!a || a->kind != Attribute::Kind::graph || !a->graph)
    fail(ErrorKind::invalid_graph, op_where(op) + ": has no subgraph attribute '" + key + "'");
  return *a->graph;
}

std::string op_where(const Op& op) { return "op '" + op.name + "' (" + op.type + ")"; }

Rewrite::Rewrite(const Graph& base, OpId replaced) : g_(base), replaced_(replaced) {
  for (const Op& op : g_.ops) op_names_.insert(op.name);
}

std::string Rewrite::fresh_tensor_name(const std::string& want) const {
  std::string name = want;
  for (int k = 1; g_.find(name) != kNoTensor; ++k) name = want + "~" + std::to_string(k);
  return name;
}

std::string Rewrite::fresh_op_name(const std::string& want) {
  std::string name = want;
  for (int k = 1; op_names_.count(name); ++k) name = want + "~" + std::to_string(k);
  op_names_.insert(name);
  return name;
}

TensorId Rewrite::add_tensor(const std::string& want) { return g_.add_tensor(Tensor{.name = fresh_tensor_name(want)}); }

TensorId Rewrite::add_constant(const std::string& want, TensorData value) {
  Tensor t{.name = fresh_tensor_name(want), .dtype = value.dtype, .rank_known = true, .role = TensorRole::weight};
  for (auto d : value.dims) t.dims.push_back(Dim::of(d));
  t.data = std::make_shared<const TensorData>(std::move(value));
  return g_.add_tensor(std::move(t));
}

void Rewrite::add_op(const std::string& type, std::vector<TensorId> inputs, std::vector<TensorId> outputs,
                     std::map<std::string, Attribute> attrs, const std::string& label) {
  Op op{.name = fresh_op_name(replaced().name + "/" + (label.empty() ? type : label)), .type = type, .inputs = std::move(inputs),
        .outputs = std::move(outputs), .attrs = std::move(attrs), .phase = replaced().phase};
  ops_.push_back(std::move(op));
}

// The tensor of the rewritten graph each tensor of `body` is: bound formal inputs, claimed targets, fresh copies
// of what the body makes and of its constants, and the enclosing graph's tensors for its outer reads.
std::vector<TensorId> Rewrite::map_body_tensors(const Graph& body, const std::vector<TensorId>& bound,
                                                const std::string& prefix, const std::vector<TensorId>& targets) {
  std::vector<TensorId> map(body.tensors.size(), kNoTensor);
  for (std::size_t j = 0; j < body.inputs.size(); ++j) map[body.inputs[j]] = bound[j];
  for (std::size_t k = 0; k < body.outputs.size(); ++k) {
    const TensorId bt = body.outputs[k];
    if (targets[k] != kNoTensor && body.tensors[bt].producer != kNoOp && map[bt] == kNoTensor) map[bt] = targets[k];
  }
  for (TensorId bt = 0; bt < body.tensors.size(); ++bt) {
    if (map[bt] != kNoTensor || std::find(body.inputs.begin(), body.inputs.end(), bt) != body.inputs.end()) continue;
    const Tensor& x = body.tensors[bt];
    if (x.producer != kNoOp) {
      map[bt] = add_tensor(prefix + x.name);
    } else if (reads_outer(body, bt)) {
      map[bt] = g_.find(x.name);
      if (map[bt] == kNoTensor)
        fail(ErrorKind::invalid_graph, op_where(replaced()) + ": its subgraph reads '" + x.name + "', which no enclosing graph defines");
    } else {  // an initializer or Constant of the body
      Tensor copy = x;
      copy.name = fresh_tensor_name(prefix + x.name);
      copy.consumers.clear();
      copy.is_graph_output = false;
      map[bt] = g_.add_tensor(std::move(copy));
    }
  }
  return map;
}

std::vector<TensorId> Rewrite::splice(const Graph& body, const std::vector<TensorId>& bound, const std::string& prefix,
                                      const std::vector<TensorId>& targets) {
  const std::vector<TensorId> map = map_body_tensors(body, bound, prefix, targets);
  const Renamed renamed = [&](const std::string& name) -> const std::string* {
    const TensorId bt = body.find(name);
    return bt == kNoTensor || map[bt] == kNoTensor ? nullptr : &g_.tensors[map[bt]].name;
  };
  for (const Op& bop : body.ops) {
    Op op = bop;
    op.name = fresh_op_name(prefix + bop.name);
    op.phase = replaced().phase;
    for (auto* list : {&op.inputs, &op.outputs})
      for (TensorId& t : *list)
        if (t != kNoTensor) t = map[t];
    for (auto& [key, a] : op.attrs)
      if (a.kind == Attribute::Kind::graph && a.graph) a.graph = rebind(a.graph, renamed);
    ops_.push_back(std::move(op));
  }
  std::vector<TensorId> out;
  for (std::size_t k = 0; k < body.outputs.size(); ++k) {
    const TensorId now = map[body.outputs[k]];
    if (targets[k] == kNoTensor || now == targets[k]) {
      out.push_back(now);
      continue;
    }
    add_op("Identity", {now}, {targets[k]});
    out.push_back(targets[k]);
  }
  return out;
}

void Rewrite::stack(std::vector<TensorId> parts, std::int64_t axis, TensorId target, bool reverse) {
  if (reverse) std::reverse(parts.begin(), parts.end());
  const std::string base = g_.tensors[target].name;
  std::map<std::string, Attribute> unsqueeze_attrs;
  TensorId axes = kNoTensor;
  if (g_.opset >= 13)
    axes = add_constant(base + "/axes", TensorData::from_int64(DType::i64, {1}, {axis}));
  else
    unsqueeze_attrs["axes"] = Attribute{.kind = Attribute::Kind::ints, .ints = {axis}};
  std::vector<TensorId> rows;
  for (TensorId p : parts) {
    const TensorId row = parts.size() == 1 ? target : add_tensor(base + "/row");
    add_op("Unsqueeze", axes == kNoTensor ? std::vector<TensorId>{p} : std::vector<TensorId>{p, axes}, {row}, unsqueeze_attrs);
    rows.push_back(row);
  }
  if (parts.size() > 1) add_op("Concat", std::move(rows), {target}, {{"axis", int_attr(axis)}});
}

Graph Rewrite::finish() && {
  std::vector<Op> ops;
  ops.reserve(g_.ops.size() + ops_.size());
  for (OpId o = 0; o < g_.ops.size(); ++o) {
    if (o != replaced_) {
      ops.push_back(std::move(g_.ops[o]));
      continue;
    }
    for (Op& op : ops_) ops.push_back(std::move(op));
  }
  g_.ops = std::move(ops);
  g_.relink();
  return std::move(g_);
}

}  // namespace memplan::analysis::control_flow
