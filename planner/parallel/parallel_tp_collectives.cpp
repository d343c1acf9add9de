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

// The collectives of one rank's training graph, inserted tensor by tensor (insert_tensor_parallel_collectives).
class CollectiveInserter {
 public:
  CollectiveInserter(Graph& g, const TensorParallelReport& report, int tp, bool sequence_parallel)
      : g_(g),
        stream_(report.stream_dims),
        tp_(tp),
        sequence_parallel_(sequence_parallel),
        axis_(stream_.size() - 2),
        ins_(g.ops.size()) {
    std::unordered_map<std::string, Side> forward;
    for (const auto& n : report.tensor_parallel_ops) forward[n] = Side::paired;
    if (sequence_parallel)
      for (const auto& n : report.sequence_parallel_ops) forward[n] = Side::sequence;
    side_.resize(g.ops.size());
    for (OpId o = 0; o < g.ops.size(); ++o) side_[o] = side_of(forward, g.ops[o].name);
  }

  CommunicationBytes run() {
    const std::size_t n = g_.tensors.size();
    const std::vector<bool> divided = divide_sequence_tensors();
    for (TensorId t = 0; t < n; ++t) {
      const OpId p = g_.tensors[t].producer;
      if (p != analysis::kNoOp && side_[p] == Side::paired && stream_like(t)) {
        reduce_partial_sum(t);
      } else if (divided[t]) {
        gather_for_whole_readers(t);
      } else if (sequence_parallel_ && p != analysis::kNoOp && side_[p] == Side::replicated && seq_like(t)) {
        // Whole rows entering the region (an embedding's output, the loss gradient): each rank keeps its own.
        const auto seq = readers(t, [&](OpId o) { return side_[o] == Side::sequence; });
        if (!seq.empty()) scatter(t, seq);
      }
    }
    ins_.apply(g_);
    return c_;
  }

 private:
  bool stream_like(TensorId t) const { return g_.tensors[t].shape_known() && g_.tensors[t].shape() == stream_; }
  bool seq_like(TensorId t) const {
    return g_.tensors[t].dims.size() == stream_.size() && g_.tensors[t].dims[axis_].value == stream_[axis_];
  }
  bool read_by(TensorId t, Side s) const {
    return std::any_of(g_.tensors[t].consumers.begin(), g_.tensors[t].consumers.end(), [&](OpId o) { return side_[o] == s; });
  }
  // The ops reading `t` that `keep` takes, each once, in consumer order.
  template <class Keep>
  std::vector<OpId> readers(TensorId t, Keep&& keep) const {
    std::vector<OpId> v;
    for (OpId o : g_.tensors[t].consumers)
      if (keep(o) && std::find(v.begin(), v.end(), o) == v.end()) v.push_back(o);
    return v;
  }

  // Sequence parallel: what the sequence-parallel ops make, and the graph inputs they read, hold s/tp rows.
  std::vector<bool> divide_sequence_tensors() {
    std::vector<bool> divided(g_.tensors.size(), false);
    if (!sequence_parallel_) return divided;
    for (TensorId t = 0; t < g_.tensors.size(); ++t) {
      const OpId p = g_.tensors[t].producer;
      const bool made = p != analysis::kNoOp ? side_[p] == Side::sequence
                                             : g_.tensors[t].role != analysis::TensorRole::weight && read_by(t, Side::sequence);
      if (made && seq_like(t)) {
        divided[t] = true;
        g_.tensors[t].dims[axis_] = analysis::Dim::of(stream_[axis_] / tp_);
      }
    }
    return divided;
  }

  // t (whole) -> its rows of this rank, for the readers `into`.
  void scatter(TensorId t, const std::vector<OpId>& into) {
    const TensorId part = parallel_edit::add_like(g_, t, "/tp_scattered", g_.tensors[t].role);
    g_.tensors[part].dims[axis_] = analysis::Dim::of(stream_[axis_] / tp_);
    const OpId p = g_.tensors[t].producer;
    ins_.before[p + 1].push_back(parallel_edit::collective("tp/reduce_scatter/" + g_.tensors[t].name, mops::kReduceScatter,
                                                           g_.ops[p].phase, {t}, {part}, tp_));
    parallel_edit::redirect(g_, t, part, into);
    c_.reduce_scatter += ring_shard_bytes(g_.tensors[t].bytes(), tp_);
  }

  // A partial sum over the ranks (a row output, or a column input's gradient): reduced where it leaves, scattered
  // into the sequence-parallel region and all-reduced for the replicated ops.
  void reduce_partial_sum(TensorId t) {
    const OpId p = g_.tensors[t].producer;
    const auto seq = readers(t, [&](OpId o) { return side_[o] == Side::sequence; });
    const auto rest = readers(t, [&](OpId o) { return side_[o] == Side::replicated; });
    if (!seq.empty()) scatter(t, seq);
    if (rest.empty()) return;
    const TensorId sum = parallel_edit::add_like(g_, t, "/tp_all_reduced", g_.tensors[t].role);
    ins_.before[p + 1].push_back(
        parallel_edit::collective("tp/all_reduce/" + g_.tensors[t].name, mops::kAllReduce, g_.ops[p].phase, {t}, {sum}, tp_));
    parallel_edit::redirect(g_, t, sum, rest);
    c_.all_reduce += ring_all_reduce_bytes(g_.tensors[t].bytes(), tp_);
  }

  // A divided tensor read whole outside the sequence-parallel region: gathered before the first such reader, per pass.
  void gather_for_whole_readers(TensorId t) {
    for (bool fwd : {true, false}) {
      const auto out = readers(t, [&](OpId o) { return side_[o] != Side::sequence && forward_like(g_.ops[o].phase) == fwd; });
      if (out.empty()) continue;
      const TensorId whole =
          parallel_edit::add_like(g_, t, fwd ? "/tp_gathered" : "/tp_gathered_bwd", analysis::TensorRole::activation);
      g_.tensors[whole].dims[axis_] = analysis::Dim::of(stream_[axis_]);
      const OpId first = *std::min_element(out.begin(), out.end());
      ins_.before[first].push_back(parallel_edit::collective("tp/all_gather/" + g_.tensors[t].name, mops::kAllGather,
                                                             g_.ops[first].phase, {t}, {whole}, tp_));
      parallel_edit::redirect(g_, t, whole, out);
      c_.all_gather += ring_shard_bytes(g_.tensors[whole].bytes(), tp_);
    }
  }

  Graph& g_;
  const std::vector<std::int64_t>& stream_;
  int tp_;
  bool sequence_parallel_;
  std::size_t axis_;
  std::vector<Side> side_;
  parallel_edit::Insertions ins_;
  CommunicationBytes c_;
};

}  // namespace

CommunicationBytes insert_tensor_parallel_collectives(analysis::TrainingGraph& tg, const TensorParallelReport& report, int tp,
                                                      bool sequence_parallel) {
  if (tp <= 1 || report.stream_dims.size() < 2) return {};
  return CollectiveInserter(tg.graph, report, tp, sequence_parallel).run();
}

}  // namespace memplan::planner
