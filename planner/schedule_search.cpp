// Schedule search: a local search of single-op moves across the peak, and an exact DP over frontiers.
#include <algorithm>
#include <chrono>
#include <unordered_map>

#include "planner/schedule.hpp"

namespace memplan::planner {

namespace {

constexpr std::uint32_t kNone = UINT32_MAX;
// Ops examined on each side of the peak step for a move across it.
constexpr std::uint32_t kMoveWindow = 48;

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Peak first, then how many steps reach it: a move that clears one of several equal peaks is progress.
struct Objective {
  std::uint64_t peak = 0;
  std::size_t at_peak = 0;
  std::uint32_t first_peak = 0;
  bool operator<(const Objective& o) const { return peak != o.peak ? peak < o.peak : at_peak < o.at_peak; }
};

Objective objective(const std::vector<std::uint64_t>& profile) {
  Objective o;
  for (std::uint32_t i = 0; i < profile.size(); ++i) {
    if (profile[i] > o.peak) o.peak = profile[i], o.at_peak = 0, o.first_peak = i;
    if (profile[i] == o.peak) ++o.at_peak;
  }
  return o;
}

// Moves the op at `from` to index `to`, the others keeping their relative order.
void move_op(std::vector<OpId>& order, std::uint32_t from, std::uint32_t to) {
  if (to < from) std::rotate(order.begin() + to, order.begin() + from, order.begin() + from + 1);
  else if (to > from) std::rotate(order.begin() + from, order.begin() + from + 1, order.begin() + to + 1);
}

struct FrontierHash {
  std::size_t operator()(const std::vector<std::uint64_t>& k) const noexcept {
    std::uint64_t h = 1469598103934665603ull;
    for (std::uint64_t w : k) h = (h ^ w) * 1099511628211ull;
    return static_cast<std::size_t>(h);
  }
};

using Move = std::pair<std::uint32_t, std::uint32_t>;  // (from, to) positions

// Candidate moves across the peak at position p: ops after the peak that may run at or before it, ops before it that
// may run after. A forward op stays before the first backward one (none may move when the order starts with one).
std::vector<Move> moves_across_peak(const ScheduleModel& m, const std::vector<OpId>& order, std::uint32_t p) {
  const auto n = static_cast<std::uint32_t>(order.size());
  std::vector<std::uint32_t> pos(n);
  for (std::uint32_t i = 0; i < n; ++i) pos[order[i]] = i;
  std::uint32_t last_tier0 = 0, first_tier1 = n;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (m.op(order[i]).tier == 0)
      last_tier0 = i;
    else
      first_tier1 = std::min(first_tier1, i);
  }
  std::vector<Move> moves;
  for (std::uint32_t i = p; i < n && i <= p + kMoveWindow; ++i) {
    std::uint32_t e = m.op(order[i]).tier > 0 && first_tier1 < n ? last_tier0 + 1 : 0;
    for (OpId q : m.preds(order[i])) e = std::max(e, pos[q] + 1);
    if (e < i && e <= p) {
      moves.emplace_back(i, std::min(p, i));
      if (e != p) moves.emplace_back(i, e);
    }
  }
  for (std::uint32_t i = p > kMoveWindow ? p - kMoveWindow : 0; i <= p; ++i) {
    std::uint32_t l = n - 1;
    if (m.op(order[i]).tier == 0 && first_tier1 < n) l = first_tier1 == 0 ? 0 : first_tier1 - 1;
    for (OpId s : m.succs(order[i])) l = std::min(l, pos[s] - 1);
    if (l > i && l >= p) {
      moves.emplace_back(i, std::max(p, i));
      if (l != p) moves.emplace_back(i, l);
    }
  }
  return moves;
}

// The exact DP's search (ScheduleModel::exact): frontiers layer by layer, each keeping its least peak and how it was
// reached.
class FrontierSearch {
 public:
  FrontierSearch(const ScheduleModel& m, const std::vector<OpId>& file)
      : m_(m), file_(file), n_(m.size()), words_((n_ + 63) / 64), remaining_(m.value_count()) {
    for (OpId o = 0; o < n_; ++o) tier0_ += m.op(o).tier == 0 ? 1 : 0;
    layers_.resize(1);
    layers_[0].push_back(State{std::vector<std::uint64_t>(words_, 0), 0, kNone, analysis::kNoOp});
  }

  // Every frontier of k + 1 ops from those of k; false past a limit.
  bool expand(std::size_t k, Clock::time_point t0, double seconds, std::uint32_t max_states, std::uint64_t max_work) {
    std::vector<State> next;
    std::unordered_map<std::vector<std::uint64_t>, std::uint32_t, FrontierHash> index;
    for (std::uint32_t si = 0; si < layers_[k].size(); ++si) {
      if ((si & 63u) == 0 && since(t0) > seconds) return false;
      if ((work_ += n_) > max_work) return false;
      if (!expand_state(layers_[k][si], si, next, index, max_states)) return false;
    }
    layers_.push_back(std::move(next));
    return true;
  }

  // The order reaching the full frontier with the least peak.
  std::vector<OpId> order() const {
    std::vector<OpId> order(n_);
    std::uint32_t at = 0;
    for (std::size_t k = n_; k > 0; --k) {
      const State& st = layers_[k][at];
      order[k - 1] = st.op;
      at = st.parent;
    }
    return order;
  }

 private:
  struct State {
    std::vector<std::uint64_t> set;
    std::uint64_t peak = 0;
    std::uint32_t parent = kNone;
    OpId op = analysis::kNoOp;
  };
  using Index = std::unordered_map<std::vector<std::uint64_t>, std::uint32_t, FrontierHash>;

  static bool has(const std::vector<std::uint64_t>& s, OpId o) { return (s[o / 64] >> (o % 64)) & 1u; }

  // The bytes live after the ops of `set` ran (remaining_: each value's readers yet to run), and how many forward
  // ops it holds.
  std::uint64_t live_after(const std::vector<std::uint64_t>& set, std::size_t& run0) {
    for (std::uint32_t v = 0; v < remaining_.size(); ++v) remaining_[v] = m_.value(v).readers;
    run0 = 0;
    for (OpId o = 0; o < n_; ++o)
      if (has(set, o)) {
        run0 += m_.op(o).tier == 0 ? 1 : 0;
        for (std::uint32_t v : m_.op(o).inputs) --remaining_[v];
      }
    std::uint64_t cur = 0;
    for (OpId o = 0; o < n_; ++o)
      if (has(set, o))
        for (std::uint32_t v : m_.op(o).born)
          if (m_.value(v).pinned || remaining_[v] > 0) cur += m_.value(v).bytes;
    return cur;
  }

  // The frontiers one ready op past `st` (backward ops only once every forward op ran), into `next`.
  bool expand_state(const State& st, std::uint32_t si, std::vector<State>& next, Index& index, std::uint32_t max_states) {
    std::size_t run0 = 0;
    const std::uint64_t cur = live_after(st.set, run0);
    for (OpId o : file_) {
      if (has(st.set, o) || (m_.op(o).tier > 0 && run0 < tier0_)) continue;
      if (!std::all_of(m_.preds(o).begin(), m_.preds(o).end(), [&](OpId q) { return has(st.set, q); })) continue;
      const std::uint64_t peak = std::max(st.peak, cur + m_.step(o, remaining_).during);
      std::vector<std::uint64_t> set = st.set;
      set[o / 64] |= 1ull << (o % 64);
      auto [it, fresh] = index.emplace(std::move(set), static_cast<std::uint32_t>(next.size()));
      if (fresh) {
        next.push_back(State{it->first, peak, si, o});
        if (++states_ > max_states) return false;
      } else if (peak < next[it->second].peak) {
        next[it->second].peak = peak, next[it->second].parent = si, next[it->second].op = o;
      }
    }
    return true;
  }

  const ScheduleModel& m_;
  const std::vector<OpId>& file_;
  std::size_t n_, words_;
  std::vector<std::uint32_t> remaining_;
  std::size_t tier0_ = 0, states_ = 1;
  std::uint64_t work_ = 0;  // ops walked: each frontier expanded walks every op
  std::vector<std::vector<State>> layers_;
};

}  // namespace

std::vector<OpId> ScheduleModel::local_search(std::vector<OpId> order, double seconds, std::uint32_t evaluations) const {
  const auto t0 = Clock::now();
  if (order.size() < 2) return order;
  Objective best = objective(profile(order));
  std::uint32_t used = 0;
  bool improved = true;
  while (improved && used < evaluations && since(t0) < seconds) {
    improved = false;
    for (const Move& mv : moves_across_peak(*this, order, best.first_peak)) {
      if (mv.first == mv.second) continue;
      if (used >= evaluations || since(t0) >= seconds) break;
      ++used;
      std::vector<OpId> trial = order;
      move_op(trial, mv.first, mv.second);
      const Objective o = objective(profile(trial));
      if (o < best) {
        best = o;
        order = std::move(trial);
        improved = true;
        break;
      }
    }
  }
  return order;
}

// Frontiers are the sets of ops already run (down-sets of the DAG); the bytes live after a frontier depend on
// the set alone (an in-place pair shares bytes only across the step where the source dies), so the least
// peak of reaching each frontier is a DP, layer by layer (frontiers of k ops make those of k + 1).
std::optional<std::vector<OpId>> ScheduleModel::exact(const std::vector<OpId>& file, std::uint32_t max_states, double seconds,
                                                      std::uint64_t max_work) const {
  const auto t0 = Clock::now();
  FrontierSearch search(*this, file);
  for (std::size_t k = 0; k < size(); ++k)
    if (!search.expand(k, t0, seconds, max_states, max_work)) return std::nullopt;
  return search.order();
}

}  // namespace memplan::planner
