// Random plain forward stages (no cheap or partial options) for the exact remat tests: bytes, FLOPs, loose
// boundaries and backward bytes drawn from `rng`; some stages save only their boundary.
#pragma once

#include <random>

#include "planner/remat_segments.hpp"

namespace memplan::planner::testing {

inline ForwardStages random_stages(std::mt19937& rng, std::size_t m) {
  std::uniform_int_distribution<int> kb(1, 64), small(0, 8), coin(0, 3);
  ForwardStages s;
  for (std::size_t i = 0; i < m; ++i) {
    const bool last = i + 1 == m;
    s.boundary.push_back(last ? analysis::kNoTensor : static_cast<analysis::TensorId>(i));
    s.saved_bytes.push_back(coin(rng) == 0 ? 0 : static_cast<std::uint64_t>(kb(rng)) * 1024);
    s.boundary_bytes.push_back(last ? 0 : static_cast<std::uint64_t>(kb(rng)) * 1024);
    s.loose_bytes.push_back(!last && coin(rng) == 0 ? s.boundary_bytes.back() : 0);
    s.backward_bytes.push_back(static_cast<std::uint64_t>(small(rng)) * 1024);
    s.flops.push_back(1e6 * kb(rng));
    s.boundary_flops.push_back(last || coin(rng) == 0 ? 0.0 : s.flops.back() / 4);
  }
  return s;
}

}  // namespace memplan::planner::testing
