// The total device memory of a plan (planner::DeviceMemory), part by part, and whether it fits a budget, as analyze
// and plan print it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "planner/step.hpp"

namespace memplan::cli {

using planner::DeviceMemory;
using planner::largest_scratch;

// "device memory ..." and one line per part, each ending in '\n'.
std::string device_memory_text(const DeviceMemory& m);
// The parts as keys of `j`: weights_bytes, optimizer_state_bytes, other_persistent_bytes, input_bytes,
// activation_arena_bytes, scratch_bytes, scratch_in_arena, library_bytes, peak_bytes, total_device_bytes,
// budget_bytes and fits (null without a budget).
void add_device_memory_json(nlohmann::json& j, const DeviceMemory& m);

}  // namespace memplan::cli
