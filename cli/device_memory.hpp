// The total device memory of a plan, part by part, and whether it fits a budget: analyze and plan print it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "planner/plan.hpp"

namespace memplan::cli {

// Peak = weights + optimizer state + other persistent + inputs + arena (what the plan holds at once);
// total = peak + libraries. Convolution scratch is planned inside the arena and is not added again.
struct DeviceMemory {
  std::uint64_t weights = 0;
  std::uint64_t optimizer_state = 0;
  std::uint64_t other_persistent = 0;  // persistent bytes that are neither weights nor optimizer state
  std::uint64_t inputs = 0;
  std::uint64_t arena = 0;
  std::uint64_t scratch = 0;  // the largest convolution scratch region (part of the arena)
  std::uint64_t library = 0;  // --library-bytes
  std::optional<std::uint64_t> budget;
  std::uint64_t peak() const;
  std::uint64_t total() const;
  std::optional<bool> fits() const;  // none without a budget
};

// The largest scratch (workspace) region of the plan.
std::uint64_t largest_scratch(const planner::Plan& plan);

// "device memory ..." and one line per part, each ending in '\n'.
std::string device_memory_text(const DeviceMemory& m);
// The parts as keys of `j`: weights_bytes, optimizer_state_bytes, other_persistent_bytes, input_bytes,
// activation_arena_bytes, scratch_bytes, scratch_in_arena, library_bytes, peak_bytes, total_device_bytes,
// budget_bytes and fits (null without a budget).
void add_device_memory_json(nlohmann::json& j, const DeviceMemory& m);

}  // namespace memplan::cli
