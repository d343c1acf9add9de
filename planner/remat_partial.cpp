// Partial recomputation inside one stage: which of its saved tensors to keep, as Pareto options.
#include <algorithm>

#include "planner/remat_segments.hpp"

namespace memplan::planner {

using analysis::kNoTensor;

namespace {

constexpr std::int32_t kNotSaved = -1;

// One stage's saved tensors and the FLOPs of the cone that rebuilds a subset of them. Inside a stage
// only its own tensors and the boundary before it (kept: it ends the previous segment) are forward
// activations, so the cone stops at kept saved tensors, the stage's own boundary, and anything made
// outside the stage; the ops of the unsaved tensors in between are cloned with it.
class StageCones {
 public:
  StageCones(const Graph& g, const ForwardStages& s, const std::vector<double>& op_flops)
      : g_(g), s_(s), op_flops_(op_flops), index_(g.tensors.size(), kNotSaved), mark_(g.ops.size(), 0) {}

  void reset(std::uint32_t stage, const std::vector<TensorId>& saved) {
    for (TensorId t : saved_) index_[t] = kNotSaved;
    stage_ = stage;
    saved_ = saved;
    for (std::size_t i = 0; i < saved_.size(); ++i) index_[saved_[i]] = static_cast<std::int32_t>(i);
  }

  // Also says whether the cone reads the boundary before the stage.
  double flops(const std::vector<char>& dropped, bool* reads_input = nullptr) {
    ++stamp_;
    const TensorId input = stage_ > 0 ? s_.boundary[stage_ - 1] : kNoTensor;
    if (reads_input) *reads_input = false;
    stack_.clear();
    for (std::size_t i = 0; i < saved_.size(); ++i)
      if (dropped[i]) stack_.push_back(saved_[i]);
    double f = 0.0;
    while (!stack_.empty()) {
      const TensorId x = stack_.back();
      stack_.pop_back();
      if (source(x, dropped)) {  // never a dropped one
        if (reads_input && x == input) *reads_input = true;
        continue;
      }
      const OpId p = g_.tensors[x].producer;
      if (mark_[p] == stamp_) continue;
      mark_[p] = stamp_;
      f += op_flops_[p];
      for (TensorId in : g_.ops[p].inputs)
        if (in != kNoTensor) stack_.push_back(in);
    }
    return f;
  }

 private:
  bool source(TensorId x, const std::vector<char>& dropped) const {
    if (index_[x] != kNotSaved) return dropped[static_cast<std::size_t>(index_[x])] == 0;
    if (x == s_.boundary[stage_] || !is_forward_activation(g_, x)) return true;
    return s_.stage_of_op[g_.tensors[x].producer] != stage_;
  }

  const Graph& g_;
  const ForwardStages& s_;
  const std::vector<double>& op_flops_;
  std::vector<std::int32_t> index_;  // per tensor: its index among the stage's saved tensors
  std::vector<std::uint32_t> mark_;  // per op: the last cone (stamp) that took it
  std::uint32_t stamp_ = 0, stage_ = 0;
  std::vector<TensorId> saved_, stack_;
};

struct Candidate {
  std::uint64_t kept = 0;  // the stage's saved tensors kept, and its boundary if held
  double flops = 0.0;
  std::vector<char> dropped;
  bool reads_input = false;
};

// Every non-empty subset dropped.
std::vector<Candidate> all_subsets(StageCones& cones, const std::vector<std::uint64_t>& bytes, std::uint64_t all) {
  const std::size_t n = bytes.size();
  std::vector<Candidate> out;
  for (std::uint32_t mask = 1; mask < (1u << n); ++mask) {
    Candidate c{all, 0.0, std::vector<char>(n, 0)};
    for (std::size_t i = 0; i < n; ++i)
      if (mask >> i & 1u) {
        c.dropped[i] = 1;
        c.kept -= bytes[i];
      }
    c.flops = cones.flops(c.dropped, &c.reads_input);
    out.push_back(std::move(c));
  }
  return out;
}

// Drops one tensor at a time, the one with the most bytes per FLOP added to the cone (ties: lower index).
std::vector<Candidate> greedy_drops(StageCones& cones, const std::vector<std::uint64_t>& bytes, std::uint64_t all) {
  const std::size_t n = bytes.size();
  std::vector<Candidate> out;
  Candidate cur{all, 0.0, std::vector<char>(n, 0)};
  for (std::size_t step = 0; step < n; ++step) {
    std::size_t best = n;
    double best_delta = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      if (cur.dropped[i]) continue;
      cur.dropped[i] = 1;
      const double delta = std::max(0.0, cones.flops(cur.dropped) - cur.flops);
      cur.dropped[i] = 0;
      // bytes[i] / delta > bytes[best] / best_delta, without dividing by zero.
      if (best == n || static_cast<double>(bytes[i]) * best_delta > static_cast<double>(bytes[best]) * delta) {
        best = i;
        best_delta = delta;
      }
    }
    cur.dropped[best] = 1;
    cur.kept -= bytes[best];
    cur.flops = cones.flops(cur.dropped, &cur.reads_input);
    out.push_back(cur);
  }
  return out;
}

// The Pareto front over (kept bytes, FLOPs), thinned evenly to at most kMaxStageOptions. A rebuild that
// reads the loose boundary before the stage holds it too (`input` bytes).
std::vector<StageOption> front(std::vector<Candidate> cands, const std::vector<TensorId>& saved, std::uint64_t input) {
  for (auto& c : cands)
    if (c.reads_input) c.kept += input;
  std::stable_sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) {
    return a.kept != b.kept ? a.kept < b.kept : a.flops < b.flops;
  });
  std::vector<const Candidate*> pareto;
  for (const auto& c : cands)
    if (pareto.empty() || c.flops < pareto.back()->flops) pareto.push_back(&c);
  std::vector<StageOption> out;
  const std::size_t n = pareto.size(), k = std::min(n, kMaxStageOptions);
  for (std::size_t j = 0; j < k; ++j) {
    const Candidate& c = *pareto[k == 1 ? 0 : j * (n - 1) / (k - 1)];
    StageOption o{c.kept, c.flops, c.reads_input, {}};
    for (std::size_t i = 0; i < saved.size(); ++i)
      if (c.dropped[i]) o.dropped.push_back(saved[i]);
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace

ForwardStages with_partial_options(const Graph& g, const ForwardStages& s, const std::vector<double>& op_flops,
                                   std::uint64_t alignment) {
  ForwardStages out = s;
  out.partial.assign(s.size(), {});
  std::vector<std::vector<TensorId>> saved(s.size());
  for (TensorId t : find_saved_for_backward(g)) {
    const std::uint32_t st = s.stage_of_op[g.tensors[t].producer];
    if (st < s.size() && t != s.boundary[st]) saved[st].push_back(t);
  }
  StageCones cones(g, s, op_flops);
  for (std::uint32_t st = 0; st < s.size(); ++st) {
    const auto& ts = saved[st];
    if (ts.empty() || ts.size() > kMaxPartialTensors) continue;
    std::vector<std::uint64_t> bytes;
    std::uint64_t all = s.held_boundary(st);
    for (TensorId t : ts) {
      bytes.push_back(align_up(g.tensors[t].bytes(), alignment));
      all = checked_add(all, bytes.back(), "saved bytes");
    }
    cones.reset(st, ts);
    std::vector<Candidate> cands =
        ts.size() <= kExhaustivePartial ? all_subsets(cones, bytes, all) : greedy_drops(cones, bytes, all);
    out.partial[st] = front(std::move(cands), ts, s.input_loose(st));
  }
  return out;
}

}  // namespace memplan::planner
