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

}  // namespace

std::vector<OpId> ScheduleModel::local_search(std::vector<OpId> order, double seconds, std::uint32_t evaluations) const {
  const auto t0 = Clock::now();
  const auto n = static_cast<std::uint32_t>(order.size());
  if (n < 2) return order;
  Objective best = objective(profile(order));
  std::vector<std::uint32_t> pos(n);
  std::uint32_t used = 0;
  bool improved = true;
  while (improved && used < evaluations && since(t0) < seconds) {
    improved = false;
    for (std::uint32_t i = 0; i < n; ++i) pos[order[i]] = i;
    std::uint32_t last_tier0 = 0, first_tier1 = n;
    for (std::uint32_t i = 0; i < n; ++i) {
      if (ops_[order[i]].tier == 0) last_tier0 = i;
      else first_tier1 = std::min(first_tier1, i);
    }
    const std::uint32_t p = best.first_peak;
    // (from, to) candidates: ops after the peak that may run at or before it, ops before it that may run after.
    std::vector<std::pair<std::uint32_t, std::uint32_t>> moves;
    for (std::uint32_t i = p; i < n && i <= p + kMoveWindow; ++i) {
      std::uint32_t e = ops_[order[i]].tier > 0 && first_tier1 < n ? last_tier0 + 1 : 0;
      for (OpId q : preds_[order[i]]) e = std::max(e, pos[q] + 1);
      if (e < i && e <= p) {
        moves.emplace_back(i, std::min(p, i));
        if (e != p) moves.emplace_back(i, e);
      }
    }
    for (std::uint32_t i = p > kMoveWindow ? p - kMoveWindow : 0; i <= p; ++i) {
      // A forward op stays before the first backward one (none may move when the order starts with one).
      std::uint32_t l = n - 1;
      if (ops_[order[i]].tier == 0 && first_tier1 < n) l = first_tier1 == 0 ? 0 : first_tier1 - 1;
      for (OpId s : succs_[order[i]]) l = std::min(l, pos[s] - 1);
      if (l > i && l >= p) {
        moves.emplace_back(i, std::max(p, i));
        if (l != p) moves.emplace_back(i, l);
      }
    }
    for (const auto& mv : moves) {
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
  const std::size_t n = size(), words = (n + 63) / 64;
  std::vector<std::uint32_t> pos(n);
  for (std::uint32_t i = 0; i < n; ++i) pos[file[i]] = i;
  std::size_t tier0 = 0;
  for (const OpFacts& f : ops_) tier0 += f.tier == 0 ? 1 : 0;
  struct State {
    std::vector<std::uint64_t> set;
    std::uint64_t peak = 0;
    std::uint32_t parent = kNone;
    OpId op = analysis::kNoOp;
  };
  std::vector<std::vector<State>> layers(1);
  layers[0].push_back(State{std::vector<std::uint64_t>(words, 0), 0, kNone, analysis::kNoOp});
  std::size_t states = 1;
  std::uint64_t work = 0;  // ops walked: each frontier expanded walks every op
  std::vector<std::uint32_t> remaining(values_.size());
  auto has = [](const std::vector<std::uint64_t>& s, OpId o) { return (s[o / 64] >> (o % 64)) & 1u; };
  for (std::size_t k = 0; k < n; ++k) {
    std::vector<State> next;
    std::unordered_map<std::vector<std::uint64_t>, std::uint32_t, FrontierHash> index;
    for (std::uint32_t si = 0; si < layers[k].size(); ++si) {
      const State& st = layers[k][si];
      if ((si & 63u) == 0 && since(t0) > seconds) return std::nullopt;
      if ((work += n) > max_work) return std::nullopt;
      std::size_t run0 = 0;
      for (std::uint32_t v = 0; v < values_.size(); ++v) remaining[v] = values_[v].readers;
      for (OpId o = 0; o < n; ++o)
        if (has(st.set, o)) {
          run0 += ops_[o].tier == 0 ? 1 : 0;
          for (std::uint32_t v : ops_[o].inputs) --remaining[v];
        }
      std::uint64_t cur = 0;
      for (OpId o = 0; o < n; ++o)
        if (has(st.set, o))
          for (std::uint32_t v : ops_[o].born)
            if (values_[v].pinned || remaining[v] > 0) cur += values_[v].bytes;
      for (OpId o : file) {
        if (has(st.set, o) || (ops_[o].tier > 0 && run0 < tier0)) continue;
        if (!std::all_of(preds_[o].begin(), preds_[o].end(), [&](OpId q) { return has(st.set, q); })) continue;
        const std::uint64_t peak = std::max(st.peak, cur + step(o, remaining).during);
        std::vector<std::uint64_t> set = st.set;
        set[o / 64] |= 1ull << (o % 64);
        auto [it, fresh] = index.emplace(std::move(set), static_cast<std::uint32_t>(next.size()));
        if (fresh) {
          next.push_back(State{it->first, peak, si, o});
          if (++states > max_states) return std::nullopt;
        } else if (peak < next[it->second].peak) {
          next[it->second].peak = peak, next[it->second].parent = si, next[it->second].op = o;
        }
      }
    }
    layers.push_back(std::move(next));
  }
  std::vector<OpId> order(n);
  std::uint32_t at = 0;
  for (std::size_t k = n; k > 0; --k) {
    const State& st = layers[k][at];
    order[k - 1] = st.op;
    at = st.parent;
  }
  return order;
}

}  // namespace memplan::planner
