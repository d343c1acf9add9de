// Replacing subgraphs: one rebuild applies every removal and addition, then a stable topological sort.
#include "planner/graph_rewrite.hpp"

#include <algorithm>
#include <cmath>
#include <queue>
#include <tuple>

namespace memplan::planner {

using analysis::Graph;
using analysis::kNoOp;
using analysis::kNoTensor;
using analysis::Op;
using analysis::OpId;
using analysis::Tensor;
using analysis::TensorId;

GraphRewrite::GraphRewrite(const Graph& g) : src_(g), removed_(g.ops.size(), false), redirect_(g.tensors.size(), kNoTensor) {}

TensorId GraphRewrite::add_tensor(Tensor t) {
  std::string base = t.name, name = base;
  auto taken = [&](const std::string& n) {
    if (src_.find(n) != kNoTensor) return true;
    return std::any_of(added_tensors_.begin(), added_tensors_.end(), [&](const Tensor& x) { return x.name == n; });
  };
  for (int k = 1; taken(name); ++k) name = base + "#" + std::to_string(k);
  t.name = name;
  t.producer = kNoOp;
  t.consumers.clear();
  t.is_graph_output = false;
  added_tensors_.push_back(std::move(t));
  redirect_.push_back(kNoTensor);
  return static_cast<TensorId>(src_.tensors.size() + added_tensors_.size() - 1);
}

const Tensor& GraphRewrite::tensor(TensorId t) const {
  return t < src_.tensors.size() ? src_.tensors[t] : added_tensors_.at(t - src_.tensors.size());
}

void GraphRewrite::remove(OpId op) { removed_.at(op) = true; }

void GraphRewrite::add(Op op, OpId near) { added_ops_.emplace_back(std::move(op), near); }

void GraphRewrite::replace_uses(TensorId from, TensorId to) { redirect_.at(from) = to; }

namespace {

// An op of the new graph with its order key: (source position, sequence among added ops).
struct KeyedOp {
  Op op;
  std::uint64_t key;
};

// Per op, the ops reading its outputs, and per op how many of its inputs other ops make. ErrorKind::invalid_graph
// where an op reads a source tensor whose producer was removed.
struct OpEdges {
  std::vector<std::vector<OpId>> readers;
  std::vector<std::size_t> waiting;
};
OpEdges op_edges(const GraphRewrite& rw, const std::vector<KeyedOp>& ops, std::size_t nt) {
  const Graph& src = rw.source();
  std::vector<OpId> producer(nt, kNoOp);
  for (OpId i = 0; i < ops.size(); ++i)
    for (TensorId t : ops[i].op.outputs)
      if (t != kNoTensor) {
        if (producer[t] != kNoOp)
          fail(ErrorKind::verification, "graph rewrite: tensor '" + rw.tensor(t).name + "' has two producers");
        producer[t] = i;
      }
  OpEdges e{std::vector<std::vector<OpId>>(ops.size()), std::vector<std::size_t>(ops.size(), 0)};
  for (OpId i = 0; i < ops.size(); ++i)
    for (TensorId t : ops[i].op.inputs) {
      if (t == kNoTensor) continue;
      if (producer[t] != kNoOp) {
        e.readers[producer[t]].push_back(i);
        ++e.waiting[i];
        continue;
      }
      if (t < src.tensors.size() && src.tensors[t].producer != kNoOp)
        fail(ErrorKind::invalid_graph,
             "graph rewrite: op '" + ops[i].op.name + "' reads '" + rw.tensor(t).name + "', whose producer was replaced");
    }
  return e;
}

// Stable topological sort: Kahn's algorithm taking the smallest key among the ready ops.
std::vector<OpId> stable_order(const GraphRewrite& rw, const std::vector<KeyedOp>& ops, std::size_t nt) {
  OpEdges e = op_edges(rw, ops, nt);
  using Item = std::pair<std::uint64_t, OpId>;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> ready;
  for (OpId i = 0; i < ops.size(); ++i)
    if (e.waiting[i] == 0) ready.emplace(ops[i].key, i);
  std::vector<OpId> order;
  while (!ready.empty()) {
    const OpId i = ready.top().second;
    ready.pop();
    order.push_back(i);
    for (OpId r : e.readers[i])
      if (--e.waiting[r] == 0) ready.emplace(ops[r].key, r);
  }
  if (order.size() != ops.size()) fail(ErrorKind::verification, "graph rewrite: the rewritten graph has a cycle");
  return order;
}

// The new graph: the used tensors (ids compacted in order), the ops in `order`, the graph's inputs and outputs.
Graph compacted_graph(const GraphRewrite& rw, std::vector<KeyedOp>& ops, const std::vector<OpId>& order,
                      const std::vector<bool>& used, const std::vector<TensorId>& inputs, const std::vector<TensorId>& outputs) {
  const Graph& src = rw.source();
  Graph out;
  out.name = src.name;
  out.ir_version = src.ir_version;
  out.opset = src.opset;
  std::vector<TensorId> remap(used.size(), kNoTensor);
  for (TensorId t = 0; t < used.size(); ++t) {
    if (!used[t]) continue;
    Tensor copy = rw.tensor(t);
    copy.producer = kNoOp;
    copy.consumers.clear();
    copy.is_graph_output = false;
    remap[t] = static_cast<TensorId>(out.tensors.size());
    out.tensors.push_back(std::move(copy));
  }
  for (OpId i : order) {
    Op op = std::move(ops[i].op);
    for (auto& t : op.inputs)
      if (t != kNoTensor) t = remap[t];
    for (auto& t : op.outputs)
      if (t != kNoTensor) t = remap[t];
    out.ops.push_back(std::move(op));
  }
  for (TensorId t : inputs) out.inputs.push_back(remap[t]);
  for (TensorId t : outputs) {
    out.outputs.push_back(remap[t]);
    out.tensors[remap[t]].is_graph_output = true;
  }
  out.relink();
  return out;
}

}  // namespace

Graph GraphRewrite::apply() const {
  const std::size_t nt = src_.tensors.size() + added_tensors_.size();
  auto resolve = [&](TensorId t) {
    for (int hops = 0; t != kNoTensor && redirect_[t] != kNoTensor; ++hops) {
      if (hops > static_cast<int>(nt)) fail(ErrorKind::verification, "graph rewrite: a cycle of replaced tensors");
      t = redirect_[t];
    }
    return t;
  };
  std::vector<KeyedOp> ops;
  for (OpId o = 0; o < src_.ops.size(); ++o)
    if (!removed_[o]) ops.push_back({src_.ops[o], static_cast<std::uint64_t>(o) << 20});
  for (std::size_t k = 0; k < added_ops_.size(); ++k)
    ops.push_back({added_ops_[k].first, (static_cast<std::uint64_t>(added_ops_[k].second) << 20) + 1 + k});
  std::vector<bool> used(nt, false);
  for (auto& e : ops) {
    for (auto& t : e.op.inputs)
      if (t != kNoTensor) used[t = resolve(t)] = true;
    for (auto t : e.op.outputs)
      if (t != kNoTensor) used[t] = true;
  }
  std::vector<TensorId> inputs, outputs;
  for (TensorId t : src_.inputs) used[t] = true, inputs.push_back(t);
  for (TensorId t : src_.outputs) used[t = resolve(t)] = true, outputs.push_back(t);
  const std::vector<OpId> order = stable_order(*this, ops, nt);
  return compacted_graph(*this, ops, order, used, inputs, outputs);
}

std::optional<double> scalar_constant(const Graph& g, TensorId t) {
  if (t == kNoTensor || !g.tensors[t].data) return std::nullopt;
  const auto& d = *g.tensors[t].data;
  if (d.element_count() == 0) return std::nullopt;
  std::vector<double> v;
  try {
    v = d.as_double();
  } catch (const Error&) {
    return std::nullopt;
  }
  for (double x : v)
    if (!(x == v[0]) && !(std::isnan(x) && std::isnan(v[0]))) return std::nullopt;
  return v[0];
}

bool is_scalar_constant(const Graph& g, TensorId t, double v, double tol) {
  const auto c = scalar_constant(g, t);
  return c && std::abs(*c - v) <= tol * std::max(1.0, std::abs(v));
}

TensorId new_activation(GraphRewrite& rw, const std::string& base, analysis::DType dt, const std::vector<std::int64_t>& shape) {
  Tensor t;
  t.name = base;
  t.dtype = dt;
  t.rank_known = true;
  for (auto d : shape) t.dims.push_back(analysis::Dim::of(d));
  return rw.add_tensor(std::move(t));
}

TensorId new_constant(GraphRewrite& rw, const std::string& base, analysis::TensorData value) {
  Tensor t;
  t.name = base;
  t.dtype = value.dtype;
  t.rank_known = true;
  for (auto d : value.dims) t.dims.push_back(analysis::Dim::of(d));
  t.role = analysis::TensorRole::weight;
  t.data = std::make_shared<analysis::TensorData>(std::move(value));
  return rw.add_tensor(std::move(t));
}

}  // namespace memplan::planner
