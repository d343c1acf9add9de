// Concat in place: the producers of a Concat's inputs write straight into slices of its output (DenseNet's
// shared-memory concatenation), so the inputs need no buffers of their own and the Concat copies nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "analysis/liveness.hpp"
#include "planner/plan.hpp"

namespace memplan::planner {

// Slices start at multiples of this (or of the plan's alignment when smaller): vector loads of 16 bytes stay aligned.
inline constexpr std::uint64_t kSliceAlignment = 16;

// The byte offset of each input of Concat `op` inside its output when each input is one contiguous byte range of
// it (axis 0, or every dim before the axis is 1) and all shapes are known; nullopt otherwise (or not a Concat).
std::optional<std::vector<std::uint64_t>> concat_input_offsets(const Graph& g, const analysis::Op& op);

// Where a tensor is written: into Concat `op`'s output `whole` at byte `offset`.
struct ConcatSlot {
  TensorId whole = analysis::kNoTensor;
  std::uint64_t offset = 0;
  OpId op = analysis::kNoOp;
};

// Per tensor of `g`, its slot (whole == kNoTensor: none). Concats are taken latest first, all inputs or none: every
// input of a Concat with contiguous slices (offsets multiples of min(alignment, kSliceAlignment)) is an activation
// in the arena made by an op that is not a view, listed once, in no other slot, no graph output and no gradient.
// A Concat output may itself sit in a later Concat's slot (nested slots). Whether the slots pay (the output's
// buffer lives from the first input's producer on) is assign's choice: it keeps them when the aliased lower bound
// is not higher with them than without.
std::vector<ConcatSlot> concat_slots(const Graph& g, const analysis::Liveness& l, std::uint64_t alignment);

}  // namespace memplan::planner
