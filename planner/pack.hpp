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

// Packer names, in name order: "best_fit", "greedy_by_breadth", "greedy_by_size".
const std::vector<std::string>& packer_names();

// Packs `items` over `num_steps` steps. Every packer places buffers one at a time at an offset that
// clears every already placed buffer live at an overlapping step; they differ in order and gap choice:
//  greedy_by_size    Pisarchyk & Lee 2020 "Greedy by Size": largest first, lowest offset that fits.
//  best_fit          largest first, the tightest gap that fits (the paper's offset rule), else the top.
//  greedy_by_breadth Pisarchyk & Lee 2020 "Greedy by Breadth": buffers live at the step with the most
//                    live bytes first (then size), lowest offset that fits.
// Offsets are multiples of `alignment` when every size is. Overlap queries go through a segment tree
// over steps, so a packer costs O(n log n + sum of overlaps) rather than all pairs.
// An unknown name is ErrorKind::usage.
Packing pack(const std::string& packer, const std::vector<PackItem>& items, std::uint32_t num_steps);

}  // namespace memplan::planner
