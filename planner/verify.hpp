// An independent check of a Plan against its graph: lifetimes recomputed, alias claims proven, no overlap.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/plan.hpp"

namespace memplan::planner {

struct VerifyReport {
  bool valid = true;
  std::vector<std::string> problems;  // the first problems found (at most 64), each naming tensors/ops
  std::uint64_t peak_bytes = 0;       // highest arena byte any tensor of the plan occupies
};

// Shares no code with the packers or the aliasing pass. From the graph and the plan's schedule alone it
// recomputes every tensor's lifetime, then checks that
//  - the schedule is a topological order of every op, the plan is for this graph (fingerprint),
//  - every tensor that needs arena memory has an aligned offset with its bytes inside the arena, and its
//    buffer (tensor_buffer, buffers[].tensors) agrees with it and is large enough and long-lived enough;
//  - each view alias names a view op (Reshape, Flatten, Squeeze, Unsqueeze, Identity) reading the source
//    and writing the tensor, with the same bytes at the same offset (or both outside the arena);
//  - each in-place alias names an op that reads the source and writes the tensor, the source dies at that
//    op and is no graph output, both have the same bytes at the same offset;
//  - no op reads storage after an op overwrote it in place (an update its record declares, OpInfo::rewrites, or
//    an in-place alias), directly or through the plan's views of it;
//  - each scratch region names an op (one region per op), is aligned and lies inside the arena;
//  - no two tensors live at a common step overlap in bytes unless they share data: views of one value
//    at any step, or the source and result of an in-place alias at exactly that op's step; a scratch
//    region, live at its op's step, overlaps nothing live then.
// The overlap proof is a sweep over steps with the live values ordered by offset: O(n log n).
VerifyReport verify_plan(const Graph& g, const Plan& p);

// Throws ErrorKind::verification listing the first problems when the plan is not valid.
void require_valid(const Graph& g, const Plan& p);

}  // namespace memplan::planner
