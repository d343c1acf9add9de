// Arena packers: greedy by size, best fit, greedy by breadth (over a segment tree of placed lifetimes)
// and a sweep over the schedule with a free list.
#include "planner/pack.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <utility>

#include "analysis/error.hpp"

namespace memplan::planner {
namespace {

// Placed buffers by lifetime. An interval overlapping [a, b] either contains a (found by walking the
// segment tree's canonical cover lists from leaf a to the root) or starts in (a, b] (found through the
// ordered set of start steps); the two sets are disjoint, so nothing is reported twice.
class PlacedIndex {
 public:
  explicit PlacedIndex(std::uint32_t num_steps) {
    while (leaves_ < std::max<std::uint32_t>(num_steps, 1)) leaves_ *= 2;
    cover_.resize(2 * static_cast<std::size_t>(leaves_));
    starts_.resize(leaves_);
  }

  void insert(std::uint32_t id, analysis::Interval iv) {
    for (std::uint32_t l = iv.first + leaves_, r = iv.last + leaves_ + 1; l < r; l >>= 1, r >>= 1) {
      if (l & 1) cover_[l++].push_back(id);
      if (r & 1) cover_[--r].push_back(id);
    }
    starts_[iv.first].push_back(id);
    start_steps_.insert(iv.first);
  }

  void overlapping(analysis::Interval iv, std::vector<std::uint32_t>& out) const {
    out.clear();
    for (std::uint32_t node = iv.first + leaves_; node >= 1; node >>= 1)
      out.insert(out.end(), cover_[node].begin(), cover_[node].end());
    for (auto it = start_steps_.upper_bound(iv.first); it != start_steps_.end() && *it <= iv.last; ++it)
      out.insert(out.end(), starts_[*it].begin(), starts_[*it].end());
  }

 private:
  std::uint32_t leaves_ = 1;
  std::vector<std::vector<std::uint32_t>> cover_;
  std::vector<std::vector<std::uint32_t>> starts_;
  std::set<std::uint32_t> start_steps_;
};

// Lowest offset whose gap below the next placed span holds `size` (first fit), or the tightest such
// gap (best fit, ties to the lower offset); the top of the placed spans when no gap fits.
std::uint64_t choose_offset(std::vector<std::pair<std::uint64_t, std::uint64_t>>& spans, std::uint64_t size, bool tightest) {
  std::sort(spans.begin(), spans.end());
  std::uint64_t cursor = 0, best = 0, best_gap = UINT64_MAX;
  for (const auto& [begin, end] : spans) {
    if (begin > cursor && begin - cursor >= size) {
      if (!tightest) return cursor;
      if (begin - cursor < best_gap) {
        best_gap = begin - cursor;
        best = cursor;
      }
    }
    cursor = std::max(cursor, end);
  }
  return best_gap != UINT64_MAX ? best : cursor;
}

std::vector<std::uint32_t> by_size(const std::vector<PackItem>& items) {
  std::vector<std::uint32_t> order(items.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    const auto& x = items[a];
    const auto& y = items[b];
    if (x.size != y.size) return x.size > y.size;
    const auto lx = x.interval.last - x.interval.first, ly = y.interval.last - y.interval.first;
    if (lx != ly) return lx > ly;
    return x.interval.first < y.interval.first;
  });
  return order;
}

// Breadth of a buffer: the most live bytes at any step of its lifetime (range maximum by sparse table).
std::vector<std::uint32_t> by_breadth(const std::vector<PackItem>& items, std::uint32_t num_steps) {
  std::vector<std::uint64_t> live(static_cast<std::size_t>(num_steps) + 1, 0);
  for (const auto& it : items) {
    live[it.interval.first] += it.size;
    live[it.interval.last + 1] -= it.size;  // wraps and unwraps: the running sum stays exact
  }
  std::vector<std::vector<std::uint64_t>> table(1, std::vector<std::uint64_t>(num_steps, 0));
  std::uint64_t running = 0;
  for (std::uint32_t s = 0; s < num_steps; ++s) table[0][s] = running += live[s];
  for (std::uint32_t w = 1; 2 * w <= num_steps; w *= 2) {
    const auto& prev = table.back();
    std::vector<std::uint64_t> next(num_steps - 2 * w + 1);
    for (std::uint32_t s = 0; s < next.size(); ++s) next[s] = std::max(prev[s], prev[s + w]);
    table.push_back(std::move(next));
  }
  auto range_max = [&](analysis::Interval iv) {
    std::uint32_t level = 0;
    while ((2u << level) <= iv.last - iv.first + 1) ++level;
    return std::max(table[level][iv.first], table[level][iv.last + 1 - (1u << level)]);
  };
  std::vector<std::uint64_t> breadth(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) breadth[i] = range_max(items[i].interval);
  std::vector<std::uint32_t> order = by_size(items);
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) { return breadth[a] > breadth[b]; });
  return order;
}

Packing place_in_order(const std::vector<PackItem>& items, const std::vector<std::uint32_t>& order,
                       std::uint32_t num_steps, bool tightest) {
  Packing p;
  p.offsets.assign(items.size(), 0);
  PlacedIndex placed(num_steps);
  std::vector<std::uint32_t> hits;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
  for (std::uint32_t i : order) {
    const PackItem& it = items[i];
    placed.overlapping(it.interval, hits);
    spans.clear();
    for (std::uint32_t h : hits) spans.emplace_back(p.offsets[h], p.offsets[h] + items[h].size);
    const std::uint64_t at = choose_offset(spans, it.size, tightest);
    p.offsets[i] = at;
    p.arena_bytes = std::max(p.arena_bytes, checked_add(at, it.size, "arena size"));
    placed.insert(i, it.interval);
  }
  return p;
}

// Free byte ranges of the arena below its top, by offset and by (size, offset), coalesced on release.
class FreeList {
 public:
  // The tightest free range that holds `size` (lowest offset among equals), else the top: a free range
  // reaching the top grows with it. Returns the offset.
  std::uint64_t take(std::uint64_t size) {
    auto fit = by_size_.lower_bound({size, 0});
    if (fit == by_size_.end()) {
      std::uint64_t at = top_;
      if (!by_offset_.empty() && std::prev(by_offset_.end())->second == top_) {
        at = std::prev(by_offset_.end())->first;
        erase(at, top_);
      }
      top_ = checked_add(at, size, "arena size");
      return at;
    }
    const auto [have, at] = *fit;
    erase(at, at + have);
    if (have > size) insert(at + size, at + have);
    return at;
  }

  void release(std::uint64_t begin, std::uint64_t end) {
    auto next = by_offset_.lower_bound(begin);
    if (next != by_offset_.end() && next->first == end) {
      end = next->second;
      erase(next->first, next->second);
    }
    next = by_offset_.lower_bound(begin);
    if (next != by_offset_.begin() && std::prev(next)->second == begin) {
      const auto [below, below_end] = *std::prev(next);
      erase(below, below_end);
      begin = below;
    }
    insert(begin, end);
  }

  std::uint64_t top() const { return top_; }

 private:
  void insert(std::uint64_t begin, std::uint64_t end) {
    by_offset_.emplace(begin, end);
    by_size_.emplace(end - begin, begin);
  }
  void erase(std::uint64_t begin, std::uint64_t end) {
    by_offset_.erase(begin);
    by_size_.erase({end - begin, begin});
  }

  std::map<std::uint64_t, std::uint64_t> by_offset_;           // begin -> end
  std::set<std::pair<std::uint64_t, std::uint64_t>> by_size_;  // (size, begin)
  std::uint64_t top_ = 0;
};

// Steps through the schedule as an allocator would: at each step the buffers born there take the tightest
// free range (longest-lived first, so that short-lived ones sit above them and leave no hole below; then
// largest first), then the buffers that die there give theirs back. O(n log n).
Packing sweep(const std::vector<PackItem>& items, std::uint32_t num_steps) {
  std::vector<std::uint32_t> born = by_size(items), dying(items.size());
  std::stable_sort(born.begin(), born.end(), [&](std::uint32_t a, std::uint32_t b) {
    const auto &x = items[a].interval, &y = items[b].interval;
    return x.first != y.first ? x.first < y.first : x.last > y.last;
  });
  std::iota(dying.begin(), dying.end(), 0u);
  std::stable_sort(dying.begin(), dying.end(), [&](std::uint32_t a, std::uint32_t b) { return items[a].interval.last < items[b].interval.last; });
  Packing p;
  p.offsets.assign(items.size(), 0);
  FreeList free;
  std::size_t b = 0, d = 0;
  for (std::uint32_t s = 0; s < num_steps; ++s) {
    for (; b < born.size() && items[born[b]].interval.first == s; ++b) p.offsets[born[b]] = free.take(items[born[b]].size);
    for (; d < dying.size() && items[dying[d]].interval.last == s; ++d)
      free.release(p.offsets[dying[d]], p.offsets[dying[d]] + items[dying[d]].size);
  }
  p.arena_bytes = free.top();
  return p;
}

}  // namespace

std::uint64_t overlapping_pairs(const std::vector<PackItem>& items) {
  // Item i overlaps every item but those that end before it starts or start after it ends.
  std::vector<std::uint32_t> firsts, lasts;
  for (const auto& it : items) {
    firsts.push_back(it.interval.first);
    lasts.push_back(it.interval.last);
  }
  std::sort(firsts.begin(), firsts.end());
  std::sort(lasts.begin(), lasts.end());
  std::uint64_t pairs = 0;
  for (const auto& it : items) {
    const auto ended = std::lower_bound(lasts.begin(), lasts.end(), it.interval.first) - lasts.begin();
    const auto later = firsts.end() - std::upper_bound(firsts.begin(), firsts.end(), it.interval.last);
    pairs += items.size() - 1 - static_cast<std::uint64_t>(ended + later);
  }
  return pairs / 2;
}

const std::vector<std::string>& packer_names() {
  static const std::vector<std::string> names = {"best_fit", "greedy_by_breadth", "greedy_by_size", "sweep"};
  return names;
}

Packing pack(const std::string& packer, const std::vector<PackItem>& items, std::uint32_t num_steps) {
  for (const auto& it : items)
    if (it.interval.first > it.interval.last || it.interval.last >= num_steps)
      fail(ErrorKind::invalid_graph, "a buffer lifetime lies outside the " + std::to_string(num_steps) + "-step schedule");
  if (packer == "greedy_by_size") return place_in_order(items, by_size(items), num_steps, false);
  if (packer == "best_fit") return place_in_order(items, by_size(items), num_steps, true);
  if (packer == "greedy_by_breadth") return place_in_order(items, by_breadth(items, num_steps), num_steps, false);
  if (packer == "sweep") return sweep(items, num_steps);
  fail(ErrorKind::usage, "unknown packer '" + packer + "' (expected greedy_by_size, best_fit, greedy_by_breadth, sweep or best)");
}

}  // namespace memplan::planner
