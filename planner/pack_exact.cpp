// Exact offset assignment: branch and bound over canonical (gravity) packings, after minimalloc's idea.
//
// Idea from Moffitt, "MiniMalloc: A Lightweight Memory Allocator for Hardware-Accelerated Machine Learning"
// (ASPLOS 2023): every packing can be lowered until each buffer rests on the top of one it overlaps in time
// (or on 0); taken in order of offset, each such buffer sits exactly on the skyline (the highest top placed
// so far over its lifetime). A search that places buffers in nondecreasing (offset, rank) order, each on its
// skyline, therefore meets every packing worth finding. Pruning: a buffer whose skyline plus size passes
// the capacity can never fit (skylines only rise); at each step the skyline plus the unplaced bytes live
// there must fit, and so must the unplaced bytes live at a step above the lowest point any of them can still
// take (its skyline, at least the last offset placed). Buffers live in disjoint time ranges pack independently,
// so each such component is solved alone, and only components the greedy packed above the lower bound are
// searched.
#include <algorithm>
#include <chrono>
#include <numeric>

#include "analysis/error.hpp"
#include "planner/pack.hpp"

namespace memplan::planner {
namespace {

using Clock = std::chrono::steady_clock;

enum class Found : std::uint8_t { yes, no, gave_up };  // gave_up: out of search nodes or time

// One component of buffers whose lifetimes chain together, steps compressed to the starts among them.
class Component {
 public:
  Component(const std::vector<PackItem>& items, std::vector<std::uint32_t> ids) : ids_(std::move(ids)) {
    std::vector<std::uint32_t> starts;
    for (auto i : ids_) starts.push_back(items[i].interval.first);
    std::sort(starts.begin(), starts.end());
    starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
    steps_ = static_cast<std::uint32_t>(starts.size());
    for (auto i : ids_) {
      const auto f = static_cast<std::uint32_t>(std::lower_bound(starts.begin(), starts.end(), items[i].interval.first) - starts.begin());
      const auto l = static_cast<std::uint32_t>(std::upper_bound(starts.begin(), starts.end(), items[i].interval.last) - starts.begin()) - 1;
      first_.push_back(f);
      last_.push_back(l);
      size_.push_back(items[i].size);
    }
    // Canonical tie order at one offset: larger first, then longer lived, then by id.
    rank_.resize(ids_.size());
    std::vector<std::uint32_t> by(ids_.size());
    std::iota(by.begin(), by.end(), 0u);
    std::sort(by.begin(), by.end(), [&](auto a, auto b) {
      if (size_[a] != size_[b]) return size_[a] > size_[b];
      if (last_[a] - first_[a] != last_[b] - first_[b]) return last_[a] - first_[a] > last_[b] - first_[b];
      return a < b;
    });
    for (std::uint32_t r = 0; r < by.size(); ++r) rank_[by[r]] = r;
  }

  // A packing of height at most `cap` (offsets per local item), searched until `deadline` or until the
  // work `nodes_left` (buffers examined, shared by every search of one exact_packing call) runs out.
  Found solve(std::uint64_t cap, Clock::time_point deadline, std::uint64_t& nodes_left, std::vector<std::uint64_t>& offsets) {
    cap_ = cap;
    deadline_ = deadline;
    nodes_left_ = &nodes_left;
    const std::size_t n = ids_.size();
    floor_.assign(steps_, 0);
    unplaced_.assign(steps_, 0);
    placed_.assign(n, false);
    offset_.assign(n, 0);
    for (std::size_t i = 0; i < n; ++i)
      for (std::uint32_t s = first_[i]; s <= last_[i]; ++s) unplaced_[s] += size_[i];
    for (std::uint32_t s = 0; s < steps_; ++s)
      if (unplaced_[s] > cap) return Found::no;
    const Found f = search(0, 0, UINT32_MAX, n);
    if (f == Found::yes) offsets = offset_;
    return f;
  }

  const std::vector<std::uint32_t>& ids() const { return ids_; }

 private:
  std::uint64_t skyline(std::size_t i) const {
    std::uint64_t m = 0;
    for (std::uint32_t s = first_[i]; s <= last_[i]; ++s) m = std::max(m, floor_[s]);
    return m;
  }

  Found search(std::uint64_t last_offset, std::uint32_t last_rank, std::uint32_t last_item, std::size_t left) {
    if (left == 0) return Found::yes;
    // A node's work: one skyline per unplaced buffer (the loop below).
    const std::uint64_t work = left + 1;
    if (*nodes_left_ < work) return Found::gave_up;
    *nodes_left_ -= work;
    if ((++visits_ & 255u) == 0 && Clock::now() > deadline_) return Found::gave_up;
    std::vector<std::pair<std::uint64_t, std::uint32_t>> children;  // (skyline, item)
    lowest_.assign(steps_, UINT64_MAX);
    for (std::uint32_t i = 0; i < ids_.size(); ++i) {
      if (placed_[i]) continue;
      const std::uint64_t at = skyline(i);
      if (at + size_[i] > cap_) return Found::no;
      const bool after = at > last_offset || (at == last_offset && (last_item == UINT32_MAX || rank_[i] > last_rank));
      if (after) children.emplace_back(at, i);
      // Placed later, the buffer rests at least on its skyline (skylines only rise) and, in offset order, at or above
      // last_offset.
      const std::uint64_t least = std::max(at, last_offset);
      for (std::uint32_t s = first_[i]; s <= last_[i]; ++s) lowest_[s] = std::min(lowest_[s], least);
    }
    // The unplaced buffers live at a step are disjoint there, all above the lowest of them: a step whose unplaced bytes
    // do not fit above that point refutes the node (the floor check below misses buffers each raised by a different
    // buffer placed at other steps, e.g. three residuals each above a wide buffer that another of them overlaps).
    for (std::uint32_t s = 0; s < steps_; ++s)
      if (lowest_[s] != UINT64_MAX && lowest_[s] + unplaced_[s] > cap_) return Found::no;
    std::sort(children.begin(), children.end(), [&](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : rank_[a.second] < rank_[b.second];
    });
    std::vector<std::uint64_t> saved;
    for (const auto& [at, i] : children) {
      saved.assign(floor_.begin() + first_[i], floor_.begin() + last_[i] + 1);
      bool fits = true;
      for (std::uint32_t s = first_[i]; s <= last_[i]; ++s) {
        floor_[s] = at + size_[i];
        unplaced_[s] -= size_[i];
        fits = fits && floor_[s] + unplaced_[s] <= cap_;
      }
      placed_[i] = true;
      offset_[i] = at;
      Found f = fits ? search(at, rank_[i], i, left - 1) : Found::no;
      placed_[i] = false;
      for (std::uint32_t s = first_[i]; s <= last_[i]; ++s) {
        floor_[s] = saved[s - first_[i]];
        unplaced_[s] += size_[i];
      }
      if (f != Found::no) return f;
    }
    return Found::no;
  }

  std::vector<std::uint32_t> ids_, first_, last_, rank_;
  std::vector<std::uint64_t> size_;
  std::uint32_t steps_ = 0;
  std::uint64_t cap_ = 0;
  Clock::time_point deadline_;
  std::uint64_t* nodes_left_ = nullptr;
  std::uint64_t visits_ = 0;
  std::vector<std::uint64_t> floor_, unplaced_, offset_, lowest_;
  std::vector<bool> placed_;
};

// Items split where no lifetime crosses from one step to the next.
std::vector<std::vector<std::uint32_t>> components(const std::vector<PackItem>& items) {
  std::vector<std::uint32_t> by(items.size());
  std::iota(by.begin(), by.end(), 0u);
  std::stable_sort(by.begin(), by.end(), [&](auto a, auto b) { return items[a].interval.first < items[b].interval.first; });
  std::vector<std::vector<std::uint32_t>> out;
  std::uint32_t reach = 0;
  for (auto i : by) {
    if (out.empty() || items[i].interval.first > reach) out.emplace_back();
    out.back().push_back(i);
    reach = out.back().size() == 1 ? items[i].interval.last : std::max(reach, items[i].interval.last);
  }
  return out;
}

}  // namespace

std::uint64_t max_live_bytes(const std::vector<PackItem>& items, std::uint32_t steps) {
  std::vector<std::uint64_t> add(static_cast<std::size_t>(steps) + 1, 0), drop(static_cast<std::size_t>(steps) + 1, 0);
  for (const auto& it : items) {
    add[it.interval.first] = checked_add(add[it.interval.first], it.size, "live bytes");
    drop[it.interval.last + 1] = checked_add(drop[it.interval.last + 1], it.size, "live bytes");
  }
  std::uint64_t live = 0, peak = 0;
  for (std::uint32_t s = 0; s < steps; ++s) {
    live = checked_add(live - drop[s], add[s], "live bytes");
    peak = std::max(peak, live);
  }
  return peak;
}

ExactPacking exact_packing(const std::vector<PackItem>& items, std::uint32_t num_steps, const Packing& start, const ExactPackOptions& o) {
  const auto t0 = Clock::now();
  ExactPacking r;
  r.packing = start;
  r.lower_bound = max_live_bytes(items, num_steps);
  auto finish = [&] {
    r.optimal = r.packing.arena_bytes <= r.lower_bound;
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return r;
  };
  if (start.arena_bytes <= r.lower_bound || items.size() > o.max_items || o.seconds <= 0.0 || o.max_nodes == 0) return finish();
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  std::uint64_t unit = 0;
  for (const auto& it : items) unit = std::gcd(unit, it.size);
  unit = std::max<std::uint64_t>(unit, 1);
  std::uint64_t proven = r.lower_bound;  // no packing is smaller
  std::uint64_t nodes_left = o.max_nodes;
  for (const auto& ids : components(items)) {
    std::uint64_t height = 0;
    for (auto i : ids) height = std::max(height, start.offsets[i] + items[i].size);
    if (height <= r.lower_bound) continue;
    // Bisect the component's height between the bound (lo: not yet refuted) and the greedy's (hi: reached).
    Component c(items, ids);
    std::uint64_t lo = r.lower_bound, hi = height;
    std::vector<std::uint64_t> best, trial;
    bool gave_up = false;
    while (lo < hi && !gave_up) {
      const std::uint64_t mid = lo + (hi - lo) / unit / 2 * unit;
      switch (c.solve(mid, deadline, nodes_left, trial)) {
        case Found::yes: hi = mid, best = trial; break;
        case Found::no: lo = mid + unit; break;
        case Found::gave_up: gave_up = true; break;
      }
    }
    proven = std::max(proven, lo);  // every height below lo is refuted (lo == hi when the search finished)
    if (!best.empty())
      for (std::size_t k = 0; k < ids.size(); ++k) r.packing.offsets[ids[k]] = best[k];
  }
  r.packing.arena_bytes = 0;
  for (std::size_t i = 0; i < items.size(); ++i) r.packing.arena_bytes = std::max(r.packing.arena_bytes, r.packing.offsets[i] + items[i].size);
  r.lower_bound = std::max(r.lower_bound, std::min(proven, r.packing.arena_bytes));
  return finish();
}

}  // namespace memplan::planner
