// The recorded step and its plan as a JSON trace file, which `memplan viz --trace FILE` draws.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "torch_allocator/recording.hpp"
#include "torch_allocator/step_plan.hpp"

namespace memplan::torch_allocator {

inline constexpr const char* kTraceFormat = "memplan-allocation-trace";
inline constexpr int kTraceVersion = 1;

struct Trace {
  RecordedStep step;
  StepPlan plan;
  int device = 0;
  std::uint64_t caching_reserved_bytes = 0;       // caching_allocator_estimate of the step
  std::uint64_t caching_max_allocated_bytes = 0;
};

// The trace of a planned step, with the caching allocator's estimate for it.
Trace make_trace(const RecordedStep& step, const StepPlan& plan, int device);
// docs/torch-allocator.md describes the fields. Streams are written as integers.
nlohmann::json trace_json(const Trace& t);
// Errors: ErrorKind::malformed naming the field for anything missing, mistyped or inconsistent (an event
// naming no block, a block's events out of order, an offset count that is not one per block).
Trace read_trace(const nlohmann::json& j);

}  // namespace memplan::torch_allocator
