// Host swap points whose transfers hide under compute: one copy link each way, reserved on a timeline.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "planner/remat.hpp"

namespace memplan::planner {

struct SwapLinks {
  double host_to_device_bytes_per_s = 0.0;
  double device_to_host_bytes_per_s = 0.0;
};

// Places swaps on the timeline of `schedule`, whose step s runs for op_seconds[schedule[s]]. A swap
// of X starts copying out once X is made and frees X only after the copy has finished (and after X's
// last forward use); its copy back starts at a step boundary early enough to finish before the first
// backward use. Copies in one direction never overlap. A swap that cannot hide is refused.
class SwapPlanner {
 public:
  SwapPlanner(const Graph& g, const std::vector<OpId>& schedule, const std::vector<double>& op_seconds, SwapLinks links);
  // Adds a swap of `t` to `choice` when it hides and frees `t` over original step `must_free_at`
  // (pass UINT32_MAX for no such condition). Returns whether it did.
  bool try_swap(TensorId t, RematChoice& choice, std::uint32_t must_free_at);
  double step_start(std::uint32_t step) const { return start_[step]; }

 private:
  const Graph& g_;
  std::vector<std::uint32_t> step_;
  std::vector<double> start_;  // per step, plus the end
  SwapLinks links_;
  std::vector<std::pair<double, double>> out_busy_, in_busy_;  // sorted reservations
};

// Adds swaps (largest tensors live at the peak first) until the activation lower bound of the
// transformed graph is at most `arena_budget` or no swap that hides remains.
RematChoice swap_to_budget(const Graph& g, const std::vector<OpId>& schedule, RematChoice start,
                           const std::vector<double>& op_seconds, SwapLinks links, std::uint64_t arena_budget,
                           std::uint64_t alignment);

}  // namespace memplan::planner
