// Periodic region layouts: first fit / best fit over two-piece lifetimes, in several orders.
#include "torch_allocator/periodic_region.hpp"

#include <algorithm>
#include <utility>

#include "analysis/liveness.hpp"
#include "planner/plan.hpp"

namespace memplan::torch_allocator {

namespace {
// A block's lifetime in op steps of step_graph (op e + 1 is event e): one piece, or two for a periodic block.
struct Lifetime {
  analysis::Interval piece[2];
  int pieces = 1;
  bool overlaps(const Lifetime& o) const noexcept {
    for (int i = 0; i < pieces; ++i)
      for (int j = 0; j < o.pieces; ++j)
        if (piece[i].overlaps(o.piece[j])) return true;
    return false;
  }
};

Lifetime lifetime(const RecordedStep& step, std::size_t k) {
  const RecordedBlock& b = step.blocks[k];
  if (!step.periodic(k)) return Lifetime{{analysis::Interval{b.alloc_event + 1, b.free_event + 1}, {}}, 1};
  return Lifetime{{analysis::Interval{0, b.next_free_event + 1}, analysis::Interval{b.alloc_event + 1, step.event_count()}}, 2};
}

enum class Fit { lowest, tightest };

// Blocks placed one after another, each where it overlaps (in address) no placed block it overlaps in
// time, ending at most at `limit`: the lowest such offset, or the start of the tightest gap it fits.
class Placer {
 public:
  Placer(const RecordedStep& step, std::vector<Lifetime> lives) : step_(step), lives_(std::move(lives)) {}
  bool place(std::size_t k, std::uint64_t limit, Fit fit, std::vector<std::uint64_t>& offsets) {
    const std::uint64_t bytes = step_.blocks[k].bytes;
    taken_.clear();
    for (std::size_t j : placed_)
      if (lives_[k].overlaps(lives_[j])) taken_.emplace_back(offsets[j], offsets[j] + step_.blocks[j].bytes);
    std::sort(taken_.begin(), taken_.end());
    std::uint64_t at = 0, best = UINT64_MAX, best_gap = UINT64_MAX;
    for (const auto& [from, to] : taken_) {
      if (from >= at + bytes) {
        if (fit == Fit::lowest) break;
        if (from - at < best_gap) best = at, best_gap = from - at;
      }
      at = std::max(at, to);
    }
    if (fit == Fit::tightest && best != UINT64_MAX) at = best;  // else: the top, after every taken range
    if (at + bytes > limit) return false;
    offsets[k] = at;
    extent_ = std::max(extent_, at + bytes);
    placed_.push_back(k);
    return true;
  }
  std::uint64_t extent() const noexcept { return extent_; }

 private:
  const RecordedStep& step_;
  std::vector<Lifetime> lives_;
  std::vector<std::size_t> placed_;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> taken_;
  std::uint64_t extent_ = 0;
};

template <class Key>
std::vector<std::size_t> sorted_by(std::vector<std::size_t> ks, Key key) {
  std::stable_sort(ks.begin(), ks.end(), [&](std::size_t a, std::size_t b) { return key(a) < key(b); });
  return ks;
}

// Most bytes of the blocks `in` marks live at one event (a periodic block: over both its pieces).
std::uint64_t peak_of(const RecordedStep& step, const std::vector<bool>& in) {
  const std::uint32_t n = step.event_count();
  std::vector<std::int64_t> delta(n + 2, 0);
  auto add = [&](std::uint32_t from, std::uint32_t to, std::int64_t b) { delta[from] += b, delta[to + 1] -= b; };
  for (std::size_t k = 0; k < step.blocks.size(); ++k) {
    if (!in[k]) continue;
    const RecordedBlock& b = step.blocks[k];
    const auto bytes = static_cast<std::int64_t>(b.bytes);
    if (!step.periodic(k)) {
      add(b.alloc_event, b.free_event, bytes);
    } else {
      add(0, b.next_free_event, bytes);
      add(b.alloc_event, n == 0 ? 0 : n - 1, bytes);
    }
  }
  std::int64_t live = 0, peak = 0;
  for (std::int64_t d : delta) peak = std::max(peak, live += d);
  return static_cast<std::uint64_t>(peak);
}

struct Candidates {
  const RecordedStep& step;
  std::vector<Lifetime> lives;
  std::vector<bool> transient;  // arena blocks that are not periodic
  std::vector<RegionLayout> made;
  std::uint64_t lower_bound = 0;  // the most arena bytes live at one event: a layout with this bound ends the search
  bool done() const noexcept { return !made.empty() && std::any_of(made.begin(), made.end(), [&](const RegionLayout& m) { return m.bound <= lower_bound; }); }

  // The blocks of `order` placed one by one below `limit`, where they fit. A layout where a periodic block
  // does not fit is dropped. The region is the extent of what was placed: at least the periodic blocks'
  // bytes (all live at the step's end).
  void make(const std::vector<std::size_t>& order, std::uint64_t limit, Fit fit, std::string name) {
    if (made.size() >= 2 && done()) return;
    RegionLayout l;
    l.offsets.assign(step.blocks.size(), planner::kNotInArena);
    l.rest = transient;
    Placer p(step, lives);
    for (std::size_t k : order) {
      const bool placed = p.place(k, limit, fit, l.offsets);
      if (!placed && step.periodic(k)) return;
      if (placed) l.rest[k] = false;
    }
    l.region = p.extent();
    l.bound = l.region + peak_of(step, l.rest);
    l.order = std::move(name);
    for (std::size_t i = 2; i < made.size(); ++i)  // the first two (legacy) are kept as they are
      if (made[i].offsets == l.offsets) return;
    made.push_back(std::move(l));
  }
};

std::vector<std::size_t> joined(std::vector<std::size_t> a, const std::vector<std::size_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
}  // namespace

std::uint32_t region_open_event(const RecordedStep& step) {
  std::uint32_t last_prefix_free = 0, first_alloc = UINT32_MAX;
  bool any = false;
  for (std::size_t k = 0; k < step.blocks.size(); ++k) {
    if (!step.in_arena(k) || !step.periodic(k)) continue;
    any = true;
    last_prefix_free = std::max(last_prefix_free, step.blocks[k].next_free_event);
    first_alloc = std::min(first_alloc, step.blocks[k].alloc_event);
  }
  return any ? std::min(last_prefix_free, first_alloc) : 0;
}

namespace {

// The step's arena blocks by role: periodic; transient ones that may enter the region (allocated after it opens;
// `early` those that may not); legacy fillers (allocated after every previous-step instance is freed). Each block's
// lifetime and transience go into `c`.
struct BlockSets {
  std::vector<std::size_t> periodic, fillers, legacy_fillers;
  std::vector<bool> arena, early;
};
BlockSets classify_blocks(const RecordedStep& step, Candidates& c) {
  const std::size_t n = step.blocks.size();
  const std::uint32_t open = region_open_event(step);
  std::uint32_t last_prefix_free = 0;  // the legacy layout's threshold: every previous-step instance freed
  for (std::size_t k = 0; k < n; ++k)
    if (step.in_arena(k) && step.periodic(k)) last_prefix_free = std::max(last_prefix_free, step.blocks[k].next_free_event);
  BlockSets s{{}, {}, {}, std::vector<bool>(n, false), std::vector<bool>(n, false)};
  for (std::size_t k = 0; k < n; ++k) {
    c.lives.push_back(lifetime(step, k));
    if (!step.in_arena(k)) continue;
    s.arena[k] = true;
    if (step.periodic(k)) {
      s.periodic.push_back(k);
      continue;
    }
    c.transient[k] = true;
    if (step.blocks[k].alloc_event > open)
      s.fillers.push_back(k);
    else
      s.early[k] = true;
    if (step.blocks[k].alloc_event > last_prefix_free) s.legacy_fillers.push_back(k);
  }
  return s;
}

// Region sizes: the periodic blocks' bytes (no smaller region holds them), that plus one or two of the largest blocks
// that may enter it (room for the backward's first temporaries beside the gradients), the room the bound leaves above
// the blocks that may not enter the region, and the most bytes of blocks that may enter it live at once.
std::vector<std::uint64_t> region_limits(const RecordedStep& step, const BlockSets& s, const std::vector<std::size_t>& f_size,
                                         std::uint64_t periodic_bytes, std::uint64_t bound) {
  std::vector<bool> may_enter(step.blocks.size(), false);
  for (std::size_t k : joined(s.periodic, s.fillers)) may_enter[k] = true;
  const std::uint64_t early_peak = peak_of(step, s.early);
  const auto& b = step.blocks;
  const std::uint64_t first = f_size.empty() ? 0 : b[f_size[0]].bytes, second = f_size.size() < 2 ? 0 : b[f_size[1]].bytes;
  std::vector<std::uint64_t> limits = {periodic_bytes};
  for (const std::uint64_t l : {periodic_bytes + first, periodic_bytes + first + second,
                                bound > early_peak ? bound - early_peak : 0, peak_of(step, may_enter)})
    if (l > periodic_bytes && std::find(limits.begin(), limits.end(), l) == limits.end()) limits.push_back(l);
  return limits;
}

}  // namespace

std::vector<RegionLayout> region_layouts(const RecordedStep& step) {
  Candidates c{step, {}, std::vector<bool>(step.blocks.size(), false), {}, 0};
  const BlockSets s = classify_blocks(step, c);
  const auto& b = step.blocks;
  auto largest = [&](std::size_t k) { return std::make_pair(~b[k].bytes, k); };
  auto longest = [&](std::size_t k) {
    const std::uint32_t from = step.periodic(k) ? 0 : b[k].alloc_event, to = step.periodic(k) ? b[k].next_free_event : b[k].free_event;
    return std::make_tuple(~(to - from), ~b[k].bytes, k);
  };
  std::uint64_t periodic_bytes = 0;  // stacked: all live at the step's end
  for (std::size_t k : s.periodic) periodic_bytes += b[k].bytes;
  c.lower_bound = peak_of(step, s.arena);
  const auto p_size = sorted_by(s.periodic, largest);
  c.make(joined(p_size, sorted_by(s.legacy_fillers, largest)), periodic_bytes, Fit::lowest,
         "periodic by size, gaps by size first fit");
  c.make(p_size, periodic_bytes, Fit::lowest, "periodic by size");
  if (s.periodic.empty()) return std::move(c.made);  // both layouts are the same: no region
  const auto f_size = sorted_by(s.fillers, largest);
  const std::pair<std::vector<std::size_t>, std::string> porders[] = {{s.periodic, "periodic by allocation"},
                                                                      {p_size, "periodic by size"}};
  const std::pair<std::vector<std::size_t>, std::string> forders[] = {{f_size, "gaps by size"},
                                                                      {sorted_by(s.fillers, longest), "gaps by lifetime"}};
  const std::pair<std::vector<std::size_t>, std::string> jorders[] = {
      {sorted_by(joined(s.periodic, s.fillers), largest), "all by size"}};
  for (const std::uint64_t limit : region_limits(step, s, f_size, periodic_bytes, c.lower_bound)) {
    const std::string region = limit == periodic_bytes ? "" : " in " + std::to_string(limit) + " bytes";
    for (const Fit fit : {Fit::lowest, Fit::tightest}) {
      const std::string how = (fit == Fit::lowest ? " first fit" : " best fit") + region;
      for (const auto& [po, pn] : porders)
        for (const auto& [fo, fn] : forders) c.make(joined(po, fo), limit, fit, pn + ", " + fn + how);
      for (const auto& [jo, jn] : jorders) c.make(jo, limit, fit, jn + how);
    }
  }
  std::stable_sort(c.made.begin() + 2, c.made.end(), [](const RegionLayout& x, const RegionLayout& y) { return x.bound < y.bound; });
  return std::move(c.made);
}

}  // namespace memplan::torch_allocator
