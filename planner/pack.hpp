// Arena packers: offsets for buffers with fixed sizes and lifetimes (a dynamic storage allocation problem).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/liveness.hpp"

namespace memplan::planner {

// What a packer sees of a buffer: its aligned size and the steps it is live (inclusive).
struct PackItem {
  std::uint64_t size = 0;
  analysis::Interval interval;
};

struct Packing {
  std::vector<std::uint64_t> offsets;  // per item
  std::uint64_t arena_bytes = 0;
};

// Packer names, in name order: "best_fit", "greedy_by_breadth", "greedy_by_size", "sweep".
const std::vector<std::string>& packer_names();

// Packs `items` over `num_steps` steps. The first three place buffers one at a time, in an order of their
// own, at an offset that clears every already placed buffer live at an overlapping step:
//  greedy_by_size    Pisarchyk & Lee 2020 "Greedy by Size": largest first, lowest offset that fits.
//  best_fit          largest first, the tightest gap that fits (the paper's offset rule), else the top.
//  greedy_by_breadth Pisarchyk & Lee 2020 "Greedy by Breadth": buffers live at the step with the most
//                    live bytes first (then size), lowest offset that fits.
// Their overlap queries go through a segment tree over steps, and each placement sorts the spans it
// meets: O(n log n + sum over buffers of k log k), k the buffers placed so far that overlap it. That is
// quadratic where most lifetimes overlap (the saved activations of a training step).
//  sweep             walks the schedule like an allocator: at each step the buffers born there (longest
//                    lived, then largest first) take the tightest free range, else the top, and the buffers that die there
//                    return theirs, coalesced. O(n log n) whatever the overlap.
// Offsets are multiples of `alignment` when every size is.
// An unknown name is ErrorKind::usage.
Packing pack(const std::string& packer, const std::vector<PackItem>& items, std::uint32_t num_steps);

// Pairs of items whose lifetimes overlap, in O(n log n): the work the placing packers do beyond n log n.
std::uint64_t overlapping_pairs(const std::vector<PackItem>& items);

// Above this many overlapping pairs the "best" choice runs the sweep alone (about a second of placing
// work on one core), so that planning stays O(n log n) on the path every command takes.
inline constexpr std::uint64_t kMaxPlacingPairs = 20'000'000;

// Most bytes live at one step: no packing of `items` is smaller.
std::uint64_t max_live_bytes(const std::vector<PackItem>& items, std::uint32_t num_steps);

// The search stops at whichever limit comes first. The node limit makes the result the same on every
// machine; the time limit only caps a slow one (the default nodes take well under it on one core).
struct ExactPackOptions {
  double seconds = 2.0;                 // search time for one packing; 0: none (only the bound check)
  std::size_t max_items = 4000;         // beyond this many items the start packing is kept as it is
  std::uint64_t max_nodes = 2'000'000;  // search work for one packing (buffers examined, about 1-2 s); 0: none
};

struct ExactPacking {
  Packing packing;                // never larger than the start packing
  std::uint64_t lower_bound = 0;  // proven: no packing of the items is smaller (max_live_bytes or above)
  bool optimal = false;           // packing.arena_bytes == lower_bound
  double seconds = 0.0;
};

// Improves `start` (a packing of `items`, e.g. the best greedy one) towards the least arena by branch and
// bound over canonical packings, after minimalloc (pack_exact.cpp): each group of buffers whose lifetimes
// chain together that the start packs above max_live_bytes is searched alone, bisecting its height, until
// `o.max_nodes` or `o.seconds` is spent. Offsets stay sums of item sizes (aligned when the sizes are).
ExactPacking exact_packing(const std::vector<PackItem>& items, std::uint32_t num_steps, const Packing& start, const ExactPackOptions& o = {});

}  // namespace memplan::planner
