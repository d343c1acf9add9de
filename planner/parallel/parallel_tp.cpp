// Tensor parallelism (Megatron-LM): column/row-parallel weight matmul pairs found on the forward graph, sharded.
#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "analysis/autodiff.hpp"
#include "analysis/ops.hpp"
#include "planner/parallel/parallel.hpp"

namespace memplan::planner {

using analysis::Graph;
using analysis::kMemplanDomain;
using analysis::Op;
using analysis::OpKind;
using analysis::TensorRole;
namespace mops = analysis::memplan_ops;

namespace {

bool is_weight(const Graph& g, TensorId t) {
  return t != analysis::kNoTensor && g.tensors[t].role == TensorRole::weight && g.tensors[t].producer == analysis::kNoOp;
}
int rank_of(const Graph& g, TensorId t) { return static_cast<int>(g.tensors[t].dims.size()); }
std::int64_t dim(const Graph& g, TensorId t, int a) { return g.tensors[t].dims[static_cast<std::size_t>(a)].value; }

// A matmul by a 2-D weight (input 1): the weight's axis holding the output features, or -1 when `op` is not one.
int weight_out_axis(const Graph& g, const Op& op) {
  if (!is_weight(g, op.input(1)) || rank_of(g, op.input(1)) != 2) return -1;
  if (op.domain.empty() && op.type == "MatMul") return 1;
  if (op.domain.empty() && op.type == "Gemm") return op.attr_int("transA", 0) ? -1 : (op.attr_int("transB", 0) ? 0 : 1);
  if (op.domain == kMemplanDomain && op.type == mops::kMatMulT) return op.attr_int("trans_a", 0) ? -1 : (op.attr_int("trans_b", 0) ? 0 : 1);
  return -1;
}

// One column/row group: the tensors split by tp (axis each), the ops inside, the rows that end it.
struct Region {
  std::map<TensorId, int> axis;
  std::vector<OpId> ops, columns, rows;
  std::vector<std::pair<OpId, int>> reshapes, splits;  // ops whose shape/split operand changes, at this axis
  int ax(TensorId t) const {
    auto it = axis.find(t);
    return it == axis.end() ? -1 : it->second;
  }
};

// A non-split operand of an op whose output is split at `out_axis`: broadcast along it (fine), a weight split
// with it (a bias), or anything else (the op cannot be split).
bool take_operand(const Graph& g, TensorId t, int out_axis, int out_rank, std::int64_t full, Region& r) {
  const int a = out_axis - (out_rank - rank_of(g, t));
  if (a < 0 || dim(g, t, a) == 1) return true;
  if (!is_weight(g, t) || dim(g, t, a) != full) return false;
  r.axis[t] = a;
  return true;
}

bool set_outputs(const Graph& g, const Op& op, int a, int rank, Region& r) {
  for (TensorId o : op.outputs) {
    if (o == analysis::kNoTensor) continue;
    if (rank_of(g, o) != rank) return false;
    r.axis[o] = a;
  }
  return true;
}

// propagate's cases: elementwise ops (and fused chains, softmax off its axis, dropout), views, matmuls of two
// activations, attention (split over heads), slices.
bool propagate_elementwise(const Graph& g, [[maybe_unused]] OpId id, const Op& op, Region& r, [[maybe_unused]] int R, [[maybe_unused]] TensorId y) {
  const bool softmax = op.domain.empty() && (op.type == "Softmax" || op.type == "LogSoftmax");
  int ao = -1;
  for (TensorId t : op.inputs)
    if (t != analysis::kNoTensor && r.ax(t) >= 0) {
      const int a = r.ax(t) + R - rank_of(g, t);
      if (ao >= 0 && a != ao) return false;
      ao = a;
    }
  if (softmax && (op.attr_int("axis", -1) + R) % R == ao) return false;
  for (TensorId t : op.inputs)
    if (t != analysis::kNoTensor && r.ax(t) < 0 && !take_operand(g, t, ao, R, dim(g, y, ao), r)) return false;
  return set_outputs(g, op, ao, R, r);
}

bool propagate_view(const Graph& g, [[maybe_unused]] OpId id, const Op& op, Region& r, [[maybe_unused]] int R, [[maybe_unused]] TensorId y) {
  const TensorId x = op.input(0);
  // The split axis of the output starts where the input's did: the same product of the dims before it.
  if (r.ax(x) < 0) return false;
  const auto& in = g.tensors[x].dims;
  std::int64_t prefix = 1, acc = 1;
  for (int k = 0; k < r.ax(x); ++k) prefix *= in[static_cast<std::size_t>(k)].value;
  for (int j = 0; j < R; ++j) {
    if (acc == prefix && dim(g, y, j) != 1) {
      if (op.domain.empty() && op.type == "Reshape") r.reshapes.emplace_back(id, j);
      return set_outputs(g, op, j, R, r);
    }
    acc *= dim(g, y, j);
  }
  return false;
}

bool propagate_matmul(const Graph& g, [[maybe_unused]] OpId id, const Op& op, Region& r, [[maybe_unused]] int R, [[maybe_unused]] TensorId y) {
  // Two activations (Q K^T, P V): split along a batch axis (the heads) of both.
  int ao = -1;
  for (TensorId t : {op.input(0), op.input(1)}) {
    const int a = r.ax(t);
    if (a < 0) {
      if (ao < 0 || !take_operand(g, t, ao, R, dim(g, y, ao), r) || r.ax(t) >= 0) return false;
      continue;
    }
    if (a >= rank_of(g, t) - 2 || (ao >= 0 && a + R - rank_of(g, t) != ao)) return false;
    ao = a + R - rank_of(g, t);
  }
  return set_outputs(g, op, ao, R, r);
}

bool propagate_attention(const Graph& g, [[maybe_unused]] OpId id, const Op& op, Region& r, [[maybe_unused]] int R, [[maybe_unused]] TensorId y) {
  auto head_axis = [&](const char* attr) {
    const std::string l = op.attr_string(attr, "bhsd");
    return l == "bshd" ? 2 : l == "packed" ? 3 : 1;  // packed: [B, S, 3, H, D]
  };
  if (r.ax(op.input(0)) != head_axis("q_layout") || r.ax(op.input(1)) != head_axis("k_layout") || r.ax(op.input(2)) != head_axis("v_layout"))
    return false;
  if (op.input(3) != analysis::kNoTensor && !take_operand(g, op.input(3), 1, 4, -1, r)) return false;
  r.axis[y] = head_axis("o_layout");
  if (op.output(1) != analysis::kNoTensor) r.axis[op.output(1)] = 1;
  return true;
}

bool propagate_slice(const Graph& g, [[maybe_unused]] OpId id, const Op& op, Region& r, [[maybe_unused]] int R, [[maybe_unused]] TensorId y) {
  const TensorId x = op.input(0);
  // Rotary embeddings slice the head dim: fine along any axis but the split one.
  const TensorId axes = op.input(3), starts = op.input(1);
  if (r.ax(x) < 0) return false;
  if (axes == analysis::kNoTensor) {
    if (starts == analysis::kNoTensor || !g.tensors[starts].data || r.ax(x) < static_cast<int>(g.tensors[starts].data->element_count())) return false;
  } else {
    if (!g.tensors[axes].data) return false;
    for (std::int64_t a : g.tensors[axes].data->as_int64())
      if ((a + R) % R == r.ax(x)) return false;
  }
  return set_outputs(g, op, r.ax(x), R, r);
}

bool propagate_transpose(const Graph& g, [[maybe_unused]] OpId id, const Op& op, Region& r, int R, [[maybe_unused]] TensorId y) {
  const auto perm = op.attr_ints("perm");
  for (int j = 0; j < static_cast<int>(perm.size()); ++j)
    if (perm[static_cast<std::size_t>(j)] == r.ax(op.input(0))) return set_outputs(g, op, j, R, r);
  return false;
}

// repeat_kv of grouped-query attention: the kv heads stay on their axis, the shape operand follows.
bool propagate_expand(const Graph& g, OpId id, const Op& op, Region& r, int R, TensorId y) {
  const TensorId x = op.input(0);
  if (r.ax(x) < 0) return false;
  const int a = r.ax(x) + R - rank_of(g, x);
  if (dim(g, y, a) != dim(g, x, r.ax(x))) return false;
  r.reshapes.emplace_back(id, a);
  return set_outputs(g, op, a, R, r);
}

bool propagate_concat(const Graph& g, [[maybe_unused]] OpId id, const Op& op, Region& r, int R, [[maybe_unused]] TensorId y) {
  const int a = r.ax(op.input(0));
  if (a < 0 || (op.attr_int("axis", 0) + R) % R == a) return false;
  for (TensorId t : op.inputs)
    if (r.ax(t) != a) return false;
  return set_outputs(g, op, a, R, r);
}

bool propagate_split(const Graph& g, OpId id, const Op& op, Region& r, int R, [[maybe_unused]] TensorId y) {
  const TensorId x = op.input(0);
  const int a = (static_cast<int>(op.attr_int("axis", 0)) + rank_of(g, x)) % rank_of(g, x);
  if (a == r.ax(x)) r.splits.emplace_back(id, a);
  return set_outputs(g, op, r.ax(x), R, r);
}

// The ops propagate splits by their type (beyond the elementwise and view kinds of the op registry).
using PropagateRule = bool (*)(const Graph&, OpId, const Op&, Region&, int, TensorId);
struct TypedRule {
  std::string_view domain, type;
  PropagateRule rule;
};
constexpr TypedRule kTypedRules[] = {
    {"", "Transpose", propagate_transpose},
    {"", "MatMul", propagate_matmul},
    {kMemplanDomain, mops::kMatMulT, propagate_matmul},
    {kMemplanDomain, mops::kFusedAttention, propagate_attention},
    {"", "Expand", propagate_expand},
    {"", "Slice", propagate_slice},
    {"", "Concat", propagate_concat},
    {"", "Split", propagate_split},
};

// Whether the op splits like an elementwise one: elementwise kinds, fused chains, softmax (off its axis), dropout.
bool splits_elementwise(const Op& op, const analysis::OpInfo& info) {
  const bool fused = op.domain == kMemplanDomain && op.type == mops::kFusedElementwise;
  const bool softmax = op.domain.empty() && (op.type == "Softmax" || op.type == "LogSoftmax");
  return info.kind == OpKind::elementwise || fused || softmax || (info.kind == OpKind::random && op.type == "Dropout");
}

// Where an op inside a pair splits its outputs, given its split inputs; false when it cannot be split.
bool propagate(const Graph& g, OpId id, Region& r) {
  const Op& op = g.ops[id];
  const auto* info = analysis::op_registry().find(op);
  if (!info || op.outputs.empty() || op.output(0) == analysis::kNoTensor) return false;
  const TensorId y = op.output(0);
  const int R = rank_of(g, y);
  if (splits_elementwise(op, *info)) return propagate_elementwise(g, id, op, r, R, y);
  if (info->kind == OpKind::view) return propagate_view(g, id, op, r, R, y);
  for (const TypedRule& t : kTypedRules)
    if (op.domain == t.domain && op.type == t.type) return t.rule(g, id, op, r, R, y);
  return false;
}

// The column matmuls of a pair: the weight matmuls reading `x` (their weights split by output features); false when
// one cannot be split (a tied weight, a Gemm bias that does not follow).
bool take_columns(const Graph& g, TensorId x, const std::vector<bool>& claimed, Region& r) {
  for (OpId o : g.tensors[x].consumers) {
    const int wa = weight_out_axis(g, g.ops[o]);
    if (wa < 0 || claimed[o] || g.ops[o].input(0) != x) continue;
    const TensorId w = g.ops[o].input(1);
    if (g.tensors[w].consumers.size() != 1) return false;  // a tied weight stays whole
    r.columns.push_back(o);
    r.axis[w] = wa;
    const TensorId y = g.ops[o].output(0);
    r.axis[y] = rank_of(g, y) - 1;
    if (g.ops[o].type == "Gemm" && g.ops[o].input(2) != analysis::kNoTensor &&
        !take_operand(g, g.ops[o].input(2), r.axis[y], rank_of(g, y), dim(g, y, r.axis[y]), r))
      return false;
  }
  return true;
}

// The ops after the columns reading what the region splits: row matmuls (reading the split features, their weights
// split by input features) end it, every other op must split (propagate). False where one cannot.
bool take_inner_ops(const Graph& g, Region& r, std::set<OpId>& in_region) {
  for (OpId o = r.columns.front() + 1; o < g.ops.size(); ++o) {
    const Op& op = g.ops[o];
    if (in_region.count(o)) continue;
    const bool reads = std::any_of(op.inputs.begin(), op.inputs.end(),
                                   [&](TensorId t) { return t != analysis::kNoTensor && r.ax(t) >= 0 && !is_weight(g, t); });
    if (!reads) continue;
    const int wa = weight_out_axis(g, op);
    if (wa >= 0 && r.ax(op.input(0)) == rank_of(g, op.input(0)) - 1 && g.tensors[op.input(1)].consumers.size() == 1) {
      r.rows.push_back(o);
      r.axis[op.input(1)] = 1 - wa;  // the input features
    } else if (!propagate(g, o, r)) {
      return false;
    }
    r.ops.push_back(o);
    in_region.insert(o);
  }
  return true;
}

// Closed: what the pair splits is read inside it only (the rows' outputs leave whole).
bool closed(const Graph& g, const Region& r, const std::set<OpId>& in_region) {
  for (const auto& [t, a] : r.axis) {
    if (is_weight(g, t)) continue;
    if (g.tensors[t].is_graph_output) return false;
    for (OpId c : g.tensors[t].consumers)
      if (!in_region.count(c)) return false;
  }
  return true;
}

// The pair (or pairs) starting at the weight matmuls that read `x`; nullopt when it is not one.
std::optional<Region> find_region(const Graph& g, TensorId x, const std::vector<bool>& claimed) {
  Region r;
  if (!take_columns(g, x, claimed, r) || r.columns.empty()) return std::nullopt;
  std::set<OpId> in_region(r.columns.begin(), r.columns.end());
  if (!take_inner_ops(g, r, in_region) || r.rows.empty() || !closed(g, r, in_region)) return std::nullopt;
  r.ops.insert(r.ops.end(), r.columns.begin(), r.columns.end());
  return r;
}

void divide(Graph& g, TensorId t, int a, int tp) {
  auto& d = g.tensors[t].dims[static_cast<std::size_t>(a)];
  if (d.value % tp != 0)
    fail(ErrorKind::usage, "--tp " + std::to_string(tp) + " does not divide dimension " + std::to_string(a) + " (" + std::to_string(d.value) + ") of '" +
                               g.tensors[t].name + "' in a tensor-parallel block: the attention heads, kv heads and hidden features must be multiples of --tp");
  d = analysis::Dim::of(d.value / tp);
  if (is_weight(g, t)) g.tensors[t].data.reset();
}

// A new int64 constant replacing input `slot` of op `o` with its value at `k` divided by tp.
void divide_operand(Graph& g, OpId o, std::size_t slot, std::size_t k, int tp) {
  const TensorId c = g.ops[o].input(slot);
  if (c == analysis::kNoTensor || !g.tensors[c].data) return;
  std::vector<std::int64_t> v = g.tensors[c].data->as_int64();
  if (k >= v.size() || v[k] <= 1 || v[k] % tp != 0) return;  // 0 copies, -1 infers, 1 broadcasts (Expand)
  v[k] /= tp;
  analysis::Tensor t = g.tensors[c];
  t.name = analysis::autodiff::unique_name(g, g.tensors[c].name + "/tp");
  t.consumers.clear();
  t.data = std::make_shared<analysis::TensorData>(analysis::TensorData::from_int64(analysis::DType::i64, {static_cast<std::int64_t>(v.size())}, v));
  g.ops[o].inputs[slot] = g.add_tensor(std::move(t));
}

// The tensors shaped like the residual stream (`stream`: its dims; the sequence at axis rank - 2).
struct StreamShape {
  const Graph& g;
  const std::vector<std::int64_t>& stream;
  std::size_t axis() const { return stream.size() - 2; }
  bool like(TensorId t) const {
    return t != analysis::kNoTensor && g.tensors[t].dims.size() == stream.size() &&
           g.tensors[t].dims[axis()].value == stream[axis()];
  }
};

// An op outside the pairs that works row by row on the stream (elementwise, fused chains, dropout, norms over the
// features), all its outputs shaped like the stream.
bool rowwise_on_stream(const StreamShape& s, const std::set<OpId>& paired, OpId o) {
  const Op& op = s.g.ops[o];
  const auto* info = analysis::op_registry().find(op);
  if (!info || paired.count(o)) return false;
  const auto rank = static_cast<std::int64_t>(s.stream.size());
  const bool norm = (op.domain.empty() && op.type == "LayerNormalization") ||
                    (op.domain == kMemplanDomain && op.type == mops::kRMSNormalization);
  const bool rowwise = info->kind == OpKind::elementwise || (op.domain == kMemplanDomain && op.type == mops::kFusedElementwise) ||
                       (op.type == "Dropout" && info->kind == OpKind::random) ||
                       (norm && static_cast<std::size_t>((op.attr_int("axis", -1) + rank) % rank) > s.axis());
  if (!rowwise) return false;
  return std::all_of(op.outputs.begin(), op.outputs.end(), [&](TensorId t) { return t == analysis::kNoTensor || s.like(t); });
}

// With sequence parallelism: the ops between pairs that work row by row (norms, dropout, residual adds, biases),
// reached from the pairs' inputs and outputs through tensors shaped like the residual stream.
std::set<OpId> sequence_region(const Graph& g, const std::set<OpId>& paired, const std::vector<TensorId>& seeds, const std::vector<std::int64_t>& stream) {
  const StreamShape s{g, stream};
  std::set<OpId> ops;
  std::set<TensorId> seen;
  std::vector<TensorId> work(seeds.begin(), seeds.end());
  while (!work.empty()) {
    const TensorId t = work.back();
    work.pop_back();
    if (!seen.insert(t).second) continue;
    std::vector<OpId> near(g.tensors[t].consumers.begin(), g.tensors[t].consumers.end());
    if (g.tensors[t].producer != analysis::kNoOp) near.push_back(g.tensors[t].producer);
    for (OpId o : near) {
      if (!rowwise_on_stream(s, paired, o) || !ops.insert(o).second) continue;
      for (TensorId u : g.ops[o].inputs)
        if (s.like(u) && !is_weight(g, u)) work.push_back(u);
      for (TensorId u : g.ops[o].outputs)
        if (u != analysis::kNoTensor) work.push_back(u);
    }
  }
  return ops;
}

// The pairs of the graph, in op order, each op in one at most; `seeds`: their inputs and row outputs (where the
// sequence-parallel region is searched from).
std::vector<Region> find_regions(const Graph& g, std::vector<TensorId>& seeds, TensorParallelReport& report) {
  std::vector<bool> claimed(g.ops.size(), false);
  std::vector<Region> regions;
  for (OpId o = 0; o < g.ops.size(); ++o) {
    if (claimed[o] || weight_out_axis(g, g.ops[o]) < 0) continue;
    const TensorId x = g.ops[o].input(0);
    std::optional<Region> r = find_region(g, x, claimed);
    if (!r) continue;
    for (OpId k : r->ops) claimed[k] = true;
    if (report.stream_dims.empty()) report.stream_dims = g.tensors[x].shape();
    seeds.push_back(x);
    for (OpId row : r->rows) seeds.push_back(g.ops[row].output(0));
    regions.push_back(std::move(*r));
  }
  return regions;
}

// The report's counts of the pairs; returns the ops inside them.
std::set<OpId> report_pairs(const Graph& g, const std::vector<Region>& regions, TensorParallelReport& report) {
  std::set<OpId> paired;
  for (const Region& r : regions) {
    report.column_ops += r.columns.size();
    report.row_ops += r.rows.size();
    for (OpId o : r.ops) {
      paired.insert(o);
      report.tensor_parallel_ops.push_back(g.ops[o].name);
    }
    for (OpId row : r.rows) report.all_reduce_bytes += g.tensors[g.ops[row].output(0)].bytes();
  }
  // A layer: its attention pair and its MLP pair.
  for (std::size_t k = 0; k < std::min<std::size_t>(2, regions.size()); ++k)
    for (OpId row : regions[k].rows) report.all_reduce_bytes_per_layer += g.tensors[g.ops[row].output(0)].bytes();
  return paired;
}

// The replicated weights: every weight no pair splits (its bytes on every rank), and the matmuls outside the pairs.
void report_replicated(const Graph& g, const std::vector<Region>& regions, const std::set<OpId>& paired,
                       const std::vector<bool>& trains, TensorParallelReport& report) {
  std::set<TensorId> split_weights;
  for (const Region& r : regions)
    for (const auto& [t, a] : r.axis)
      if (is_weight(g, t)) split_weights.insert(t);
  for (OpId o = 0; o < g.ops.size(); ++o)
    if (!paired.count(o) && weight_out_axis(g, g.ops[o]) >= 0) {
      ++report.replicated_matmuls;
      if (report.replicated.size() < 16) report.replicated.push_back(g.ops[o].name);
    }
  for (TensorId t = 0; t < g.tensors.size(); ++t)
    if (trains[t] && !split_weights.count(t)) report.replicated_weight_bytes += g.tensors[t].bytes();
}

// Divides a Split's sizes (attribute or constant operand) by tp.
void divide_split_sizes(Graph& g, OpId o, int tp) {
  Op& op = g.ops[o];
  if (const auto* s = op.attr("split"); s && !s->ints.empty()) {
    std::vector<std::int64_t> v = s->ints;
    for (auto& e : v) e /= tp;
    op.attrs["split"] = analysis::autodiff::attr_ints(v);
  } else if (op.input(1) != analysis::kNoTensor && g.tensors[op.input(1)].data) {
    for (std::size_t k = 0; k < g.tensors[op.input(1)].data->element_count(); ++k) divide_operand(g, o, 1, k, tp);
  }
}

// Divides every split tensor of the region along its axis, and the Reshape shapes and Split sizes that name those dims.
void divide_region(Graph& g, const Region& r, int tp, const std::vector<bool>& trains, TensorParallelReport& report) {
  for (const auto& [o, a] : r.reshapes) divide_operand(g, o, 1, static_cast<std::size_t>(a), tp);
  for (const auto& [o, a] : r.splits) divide_split_sizes(g, o, tp);
  for (const auto& [t, a] : r.axis) {
    divide(g, t, a, tp);
    ++report.sharded_tensors;
    if (is_weight(g, t) && trains[t]) report.sharded_weight_bytes += g.tensors[t].bytes();
  }
}

}  // namespace

analysis::Graph shard_tensor_parallel(const analysis::Graph& forward, int tp, bool sequence_parallel,
                                      TensorParallelReport& report) {
  Graph g = forward;
  report = TensorParallelReport{};
  std::vector<TensorId> seeds;
  const std::vector<Region> regions = find_regions(g, seeds, report);
  const std::set<OpId> paired = report_pairs(g, regions, report);
  const std::vector<bool> trains = analysis::trainable_weights(g);
  report_replicated(g, regions, paired, trains, report);
  if (sequence_parallel && !report.stream_dims.empty()) {
    if (report.stream_dims.size() < 2 || report.stream_dims[report.stream_dims.size() - 2] % tp != 0)
      fail(ErrorKind::usage, "--sequence-parallel: --tp " + std::to_string(tp) + " does not divide the sequence of the residual stream");
    for (OpId o : sequence_region(g, paired, seeds, report.stream_dims)) report.sequence_parallel_ops.push_back(g.ops[o].name);
  }
  for (const Region& r : regions) divide_region(g, r, tp, trains, report);
  g.relink();
  return g;
}

}  // namespace memplan::planner
