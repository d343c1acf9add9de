// Tensor parallelism in a rank's training graph: Megatron's f/g collectives, sequence-parallel regions divided.
#include <algorithm>
#include <unordered_map>

#include "planner/parallel/parallel.hpp"
#include "planner/parallel/parallel_edit.hpp"

namespace memplan::planner {

using analysis::Graph;
using analysis::Op;
using analysis::Phase;
namespace mops = analysis::memplan_ops;

namespace {

enum class Side : std::uint8_t { replicated, paired, sequence };

// The side of a training-graph op: its forward op's (backward ops are named "FWD/grad/...", autocast's casts of
// activations "READER/autocast/...").
Side side_of(const std::unordered_map<std::string, Side>& forward, const std::string& name) {
  if (auto it = forward.find(name); it != forward.end()) return it->second;
  for (const char* mark : {"/grad/", "/autocast/"})
    if (const auto k = name.find(mark); k != std::string::npos)
      if (auto it = forward.find(name.substr(0, k)); it != forward.end()) return it->second;
  return Side::replicated;
}

bool forward_like(Phase p) { return p == Phase::forward || p == Phase::recompute; }

}  // namespace

CommunicationBytes insert_tensor_parallel_collectives(analysis::TrainingGraph& tg, const TensorParallelReport& report, int tp, bool sequence_parallel) {
  CommunicationBytes c;
  Graph& g = tg.graph;
  const std::vector<std::int64_t>& stream = report.stream_dims;
  if (tp <= 1 || stream.size() < 2) return c;
  std::unordered_map<std::string, Side> forward;
  for (const auto& n : report.tensor_parallel_ops) forward[n] = Side::paired;
  if (sequence_parallel)
    for (const auto& n : report.sequence_parallel_ops) forward[n] = Side::sequence;
  std::vector<Side> side(g.ops.size());
  for (OpId o = 0; o < g.ops.size(); ++o) side[o] = side_of(forward, g.ops[o].name);
  const std::size_t axis = stream.size() - 2;
  auto stream_like = [&](TensorId t) { return g.tensors[t].shape_known() && g.tensors[t].shape() == stream; };
  auto seq_like = [&](TensorId t) { return g.tensors[t].dims.size() == stream.size() && g.tensors[t].dims[axis].value == stream[axis]; };
  auto read_by = [&](TensorId t, Side s) {
    return std::any_of(g.tensors[t].consumers.begin(), g.tensors[t].consumers.end(), [&](OpId o) { return side[o] == s; });
  };
  const std::size_t n = g.tensors.size();
  // Sequence parallel: what the sequence-parallel ops make, and the graph inputs they read, hold s/tp rows.
  std::vector<bool> divided(n, false);
  if (sequence_parallel)
    for (TensorId t = 0; t < n; ++t) {
      const OpId p = g.tensors[t].producer;
      const bool made = p != analysis::kNoOp ? side[p] == Side::sequence
                                              : g.tensors[t].role != analysis::TensorRole::weight && read_by(t, Side::sequence);
      if (made && seq_like(t)) {
        divided[t] = true;
        g.tensors[t].dims[axis] = analysis::Dim::of(stream[axis] / tp);
      }
    }
  parallel_edit::Insertions ins(g.ops.size());
  auto readers = [&](TensorId t, auto&& keep) {
    std::vector<OpId> v;
    for (OpId o : g.tensors[t].consumers)
      if (keep(o) && std::find(v.begin(), v.end(), o) == v.end()) v.push_back(o);
    return v;
  };
  auto scatter = [&](TensorId t, const std::vector<OpId>& into) {  // t (whole) -> its rows of this rank
    const TensorId part = parallel_edit::add_like(g, t, "/tp_scattered", g.tensors[t].role);
    g.tensors[part].dims[axis] = analysis::Dim::of(stream[axis] / tp);
    const OpId p = g.tensors[t].producer;
    ins.before[p + 1].push_back(parallel_edit::collective("tp/reduce_scatter/" + g.tensors[t].name, mops::kReduceScatter, g.ops[p].phase, {t}, {part}, tp));
    parallel_edit::redirect(g, t, part, into);
    c.reduce_scatter += ring_shard_bytes(g.tensors[t].bytes(), tp);
  };
  for (TensorId t = 0; t < n; ++t) {
    const OpId p = g.tensors[t].producer;
    if (p != analysis::kNoOp && side[p] == Side::paired && stream_like(t)) {
      // A partial sum over the ranks (a row output, or a column input's gradient): reduced where it leaves.
      const auto seq = readers(t, [&](OpId o) { return side[o] == Side::sequence; });
      const auto rest = readers(t, [&](OpId o) { return side[o] == Side::replicated; });
      if (!seq.empty()) scatter(t, seq);
      if (!rest.empty()) {
        const TensorId sum = parallel_edit::add_like(g, t, "/tp_all_reduced", g.tensors[t].role);
        ins.before[p + 1].push_back(parallel_edit::collective("tp/all_reduce/" + g.tensors[t].name, mops::kAllReduce, g.ops[p].phase, {t}, {sum}, tp));
        parallel_edit::redirect(g, t, sum, rest);
        c.all_reduce += ring_all_reduce_bytes(g.tensors[t].bytes(), tp);
      }
    } else if (divided[t]) {
      // Read whole outside the sequence-parallel region: gathered before the first such reader, per pass.
      for (bool fwd : {true, false}) {
        const auto out = readers(t, [&](OpId o) { return side[o] != Side::sequence && forward_like(g.ops[o].phase) == fwd; });
        if (out.empty()) continue;
        const TensorId whole = parallel_edit::add_like(g, t, fwd ? "/tp_gathered" : "/tp_gathered_bwd", analysis::TensorRole::activation);
        g.tensors[whole].dims[axis] = analysis::Dim::of(stream[axis]);
        const OpId first = *std::min_element(out.begin(), out.end());
        ins.before[first].push_back(parallel_edit::collective("tp/all_gather/" + g.tensors[t].name, mops::kAllGather, g.ops[first].phase, {t}, {whole}, tp));
        parallel_edit::redirect(g, t, whole, out);
        c.all_gather += ring_shard_bytes(g.tensors[whole].bytes(), tp);
      }
    } else if (sequence_parallel && p != analysis::kNoOp && side[p] == Side::replicated && seq_like(t)) {
      // Whole rows entering the region (an embedding's output, the loss gradient): each rank keeps its own.
      const auto seq = readers(t, [&](OpId o) { return side[o] == Side::sequence; });
      if (!seq.empty()) scatter(t, seq);
    }
  }
  ins.apply(g);
  return c;
}

}  // namespace memplan::planner
