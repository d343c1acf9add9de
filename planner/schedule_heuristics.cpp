// Schedule heuristics after PyTorch inductor's reorder_for_peak_memory: least peak first, BFS, DFS.
#include <algorithm>
#include <queue>
#include <set>
#include <tuple>

#include "planner/schedule.hpp"

namespace memplan::planner {

namespace {

constexpr std::uint32_t kNone = UINT32_MAX;
// Ready ops examined, by least bytes left behind, for one that stays under the peak so far.
constexpr int kScanUnderPeak = 64;

std::vector<std::uint32_t> positions(const std::vector<OpId>& file) {
  std::vector<std::uint32_t> pos(file.size(), 0);
  for (std::uint32_t i = 0; i < file.size(); ++i) pos[file[i]] = i;
  return pos;
}

}  // namespace

// The DAC'06 greedy inductor calls LPMF: among the ready ops, one whose bytes while it runs stay under the
// peak so far and that leaves the fewest bytes live after it; when none stays under, the one needing least
// while it runs. Keys change only when a value is down to its last reader, so ready ops sit in two ordered
// sets and are re-keyed then: O((n + e) log n).
std::vector<OpId> ScheduleModel::least_peak_first(const std::vector<OpId>& file) const {
  const std::size_t n = size();
  const auto pos = positions(file);
  std::vector<std::uint32_t> remaining(values_.size()), indeg(n);
  for (std::uint32_t v = 0; v < values_.size(); ++v) remaining[v] = values_[v].readers;
  for (OpId o = 0; o < n; ++o) indeg[o] = static_cast<std::uint32_t>(preds_[o].size());
  using ByAfter = std::tuple<std::uint32_t, std::int64_t, std::uint64_t, std::uint32_t>;  // tier, after, during, file position
  using ByDuring = std::tuple<std::uint32_t, std::uint64_t, std::uint32_t>;              // tier, during, file position
  std::set<ByAfter> by_after;
  std::set<ByDuring> by_during;
  std::vector<Step> key(n);
  std::vector<bool> ready(n, false), done(n, false);
  auto insert = [&](OpId o) {
    key[o] = step(o, remaining);
    by_after.emplace(ops_[o].tier, key[o].after, key[o].during, pos[o]);
    by_during.emplace(ops_[o].tier, key[o].during, pos[o]);
    ready[o] = true;
  };
  auto erase = [&](OpId o) {
    by_after.erase({ops_[o].tier, key[o].after, key[o].during, pos[o]});
    by_during.erase({ops_[o].tier, key[o].during, pos[o]});
    ready[o] = false;
  };
  for (OpId o : file)
    if (indeg[o] == 0) insert(o);
  std::vector<OpId> order;
  order.reserve(n);
  std::uint64_t cur = 0, peak = 0;
  while (!by_during.empty()) {
    const std::uint32_t tier = std::get<0>(*by_during.begin());
    const std::uint64_t room = peak > cur ? peak - cur : 0;
    std::uint32_t pick = kNone;
    int scanned = 0;
    for (auto it = by_after.begin(); it != by_after.end() && std::get<0>(*it) == tier && scanned < kScanUnderPeak; ++it, ++scanned)
      if (std::get<2>(*it) <= room) {
        pick = std::get<3>(*it);
        break;
      }
    if (pick == kNone) pick = std::get<2>(*by_during.begin());
    const OpId o = file[pick];
    const Step s = key[o];
    erase(o);
    done[o] = true;
    order.push_back(o);
    peak = std::max(peak, cur + s.during);
    cur = static_cast<std::uint64_t>(static_cast<std::int64_t>(cur) + s.after);
    for (std::uint32_t v : ops_[o].inputs)
      if (--remaining[v] == 1)
        for (OpId r : readers_[v])
          if (!done[r] && ready[r]) {
            erase(r);
            insert(r);
          }
    for (OpId c : succs_[o])
      if (--indeg[c] == 0) insert(c);
  }
  return order;
}

// Inductor's BFS: ops in the order they became ready (then file order).
std::vector<OpId> ScheduleModel::breadth_first(const std::vector<OpId>& file) const {
  const std::size_t n = size();
  const auto pos = positions(file);
  std::vector<std::uint32_t> indeg(n);
  using Key = std::tuple<std::uint32_t, std::uint32_t, std::uint32_t>;  // tier, step it became ready, file position
  std::priority_queue<Key, std::vector<Key>, std::greater<>> heap;
  for (OpId o = 0; o < n; ++o) indeg[o] = static_cast<std::uint32_t>(preds_[o].size());
  for (OpId o : file)
    if (indeg[o] == 0) heap.emplace(ops_[o].tier, 0u, pos[o]);
  std::vector<OpId> order;
  order.reserve(n);
  while (!heap.empty()) {
    const OpId o = file[std::get<2>(heap.top())];
    heap.pop();
    order.push_back(o);
    for (OpId c : succs_[o])
      if (--indeg[c] == 0) heap.emplace(ops_[c].tier, static_cast<std::uint32_t>(order.size()), pos[c]);
  }
  return order;
}

// Inductor's DFS: ops by (bytes they allocate, file order), each after its predecessors visited in the
// same order (post-order), so that a small consumer pulls its producers in just before it.
std::vector<OpId> ScheduleModel::depth_first(const std::vector<OpId>& file) const {
  const std::size_t n = size();
  const auto pos = positions(file);
  std::vector<std::uint64_t> bytes(n, 0);
  for (OpId o = 0; o < n; ++o)
    for (std::uint32_t v : ops_[o].born) bytes[o] += values_[v].bytes;
  auto before = [&](OpId a, OpId b) {
    return std::tie(ops_[a].tier, bytes[a], pos[a]) < std::tie(ops_[b].tier, bytes[b], pos[b]);
  };
  std::vector<OpId> roots(file);
  std::stable_sort(roots.begin(), roots.end(), before);
  std::vector<std::vector<OpId>> sorted_preds(n);
  for (OpId o = 0; o < n; ++o) {
    sorted_preds[o] = preds_[o];
    std::sort(sorted_preds[o].begin(), sorted_preds[o].end(), before);
  }
  std::vector<OpId> order;
  order.reserve(n);
  std::vector<bool> seen(n, false);
  std::vector<std::pair<OpId, std::size_t>> stack;  // op, next predecessor to visit
  for (OpId root : roots) {
    if (seen[root]) continue;
    seen[root] = true;
    stack.emplace_back(root, 0);
    while (!stack.empty()) {
      auto& [o, next] = stack.back();
      if (next < sorted_preds[o].size()) {
        const OpId p = sorted_preds[o][next++];
        if (!seen[p]) {
          seen[p] = true;
          stack.emplace_back(p, 0);
        }
        continue;
      }
      order.push_back(o);
      stack.pop_back();
    }
  }
  return order;
}

}  // namespace memplan::planner
