// Arena assignment for a scheduled graph: view and in-place aliasing, then offsets from the packers.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "analysis/liveness.hpp"
#include "planner/plan.hpp"

namespace memplan::planner {

// The workspace a backend's library asks for an op (the bytes of the algorithm it would run given room, e.g.
// cuDNN's first-ranked convolution algorithm on this device); nullopt: no answer, the sizing rule of
// scratch_request applies. Asked on the graph being planned (the training graph: backward ops included).
using WorkspaceQuery = std::function<std::optional<std::uint64_t>(const Graph&, OpId)>;

struct AssignOptions {
  std::uint64_t alignment = 256;  // every buffer offset and size is a multiple of this
  bool views = true;              // Reshape/Flatten/Squeeze/Unsqueeze/Identity outputs alias their input
  bool inplace = true;            // elementwise outputs overwrite an input that dies at that op
  bool concat_in_place = true;    // Concat inputs written straight into slices of its output (concat_in_place.hpp)
  std::string packer = "best";    // a name from packer_names(), or "best": all (only "sweep" beyond
                                  // kMaxPlacingPairs overlapping lifetimes), smallest arena kept
  // Most scratch bytes planned for one op (a convolution's workspace, see scratch_request); 0: none.
  std::uint64_t workspace_limit_bytes = kDefaultWorkspaceLimit;
  // When set (a run on a device), each workspace op's sure scratch is what the device asks for, up to the limit.
  WorkspaceQuery workspace_query;
  // The exact packer (pack.hpp, exact_packing) after the greedy ones: its search nodes and time limit (0:
  // greedy only, the optimality verdict from the lower bound alone) and the most buffers it searches.
  double exact_pack_seconds = 2.0;
  std::size_t exact_pack_max_items = 4000;
  std::uint64_t exact_pack_nodes = 2'000'000;
  static constexpr std::uint64_t kDefaultWorkspaceLimit = 256ull << 20;
};

// Scratch bytes op `id` of `g` is sure to get (before alignment; assign may grow them into free space up
// to `limit`): for a convolution (Conv, ConvGradInput, ConvGradWeight) the larger of its input and output
// activation, at most `limit` and kSureScratchCap; 0 for every other op.
inline constexpr std::uint64_t kSureScratchCap = 64ull << 20;
// The CUDA backend runs the fastest cuDNN algorithm whose workspace fits (one needing none always
// exists), so the size trades arena bytes against algorithm choice: Winograd and FFT transforms need
// buffers of about the activation's size, implicit GEMM next to none. With `query` answering for the op, its
// answer replaces the rule (at most `limit`; kSureScratchCap does not apply: the device asked for it).
std::uint64_t scratch_request(const Graph& g, OpId id, std::uint64_t limit, const WorkspaceQuery& query = {});

// Ops whose output 0 is its input 0 reinterpreted (same bytes, no copy).
bool is_view_op(const analysis::Op& op) noexcept;
// Inputs whose buffer op's output 0 may overwrite: the positions an elementwise kernel reads at the
// same index it writes (empty for every other op, and for BatchNormalization in training mode).
std::vector<std::size_t> inplace_candidates(const analysis::Op& op);

// Plans the arena for `g` on `l`'s schedule (l from analyze_liveness on the same graph):
// 1. a view of an arena tensor shares its buffer (chains of views reach the root); a view of a tensor
//    outside the arena (graph input, weight) takes no arena bytes at all;
// 2. an elementwise op writes output 0 into an input's buffer when every tensor bound to that buffer
//    has its last use at this op, the byte size matches (and the dtype, except for Cast), and the
//    buffer holds no graph output (graph inputs and weights have no buffer);
// 2b. with o.concat_in_place, each tensor with a concat_slots slot is bound inside its group's buffer (the outermost
//    Concat output's, live from the first producer on) at its slot's offset (AliasKind::slice); a Concat whose inputs
//    already lie in order inside such a buffer gets its output bound over them (a slice too: nothing to copy).
//    Group buffers are never overwritten in place;
// 3. every op with a scratch_request gets a scratch region live at its step alone;
// 4. buffers and scratch are packed together by o.packer, then by the exact packer within its limits
//    (Plan::arena_optimal, arena_gap);
// 5. each scratch region moves into the largest gap the buffers leave at its step when that gap is
//    larger, grown to it up to o.workspace_limit_bytes: free bytes cost no arena.
// The Plan is complete (see plan.hpp) but not verified.
// Errors: ErrorKind::usage for alignment 0 or an unknown packer.
Plan assign(const Graph& g, const analysis::Liveness& l, const AssignOptions& o = {});

}  // namespace memplan::planner
