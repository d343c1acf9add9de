// The Plan: the contract between planner and runtime (schedule, arena buffers, aliases), and its JSON.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/graph.hpp"
#include "analysis/liveness.hpp"

namespace memplan::planner {

using analysis::Graph;
using analysis::Interval;
using analysis::OpId;
using analysis::TensorId;

inline constexpr std::uint64_t kNotInArena = std::numeric_limits<std::uint64_t>::max();

// One region of the arena. Several tensors may be bound to it over time: a view and its source, an
// in-place output and the input it overwrites. `interval` covers all of them.
struct Buffer {
  std::uint64_t offset = 0;
  std::uint64_t size = 0;  // aligned
  Interval interval;
  std::vector<TensorId> tensors;  // sorted by id
};

enum class AliasKind : std::uint8_t { view, inplace, slice };
const char* alias_kind_name(AliasKind k) noexcept;

// `tensor` shares `source`'s bytes: a view (Reshape, Identity, ...) for as long as both live, or an
// in-place result written by `op` over `source`, which dies at that op. An in-place alias of a tensor
// outside the arena is an update the op's record declares (OpInfo::rewrites: an optimizer's weight and
// state, an accumulated gradient): both have no offset and the runtime binds `tensor` to `source`'s storage.
// A slice alias (concat in place, planner/concat_in_place.hpp) puts `tensor` at byte `offset` inside `source`'s
// bytes, for Concat `op`: either an input of `op` written straight into its slot of the output `source`, or
// `op`'s output itself, whose inputs all lie in order inside `source` already (the Concat copies nothing).
struct Alias {
  TensorId tensor = analysis::kNoTensor;
  TensorId source = analysis::kNoTensor;
  AliasKind kind = AliasKind::view;
  OpId op = analysis::kNoOp;
  std::uint64_t offset = 0;  // slice aliases: bytes from the start of `source`
};

// Per-op scratch (workspace) bytes: live at the op's step alone, packed in the arena with the tensors.
// A backend may use up to `bytes` at `offset` while the op runs (cuDNN convolution workspaces).
struct Scratch {
  OpId op = analysis::kNoOp;
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;  // aligned
};

struct Plan {
  static constexpr int kSchemaVersion = 2;  // 2: scratch; version 1 documents (no scratch) are still read
  std::string model_name;
  std::string model_fingerprint;  // Graph::fingerprint() of the graph the plan was made for
  std::uint64_t alignment = 256;
  std::uint64_t arena_bytes = 0;
  // Largest sum of live buffer sizes at one step once views and in-place results share buffers: no
  // packing of these buffers can be smaller (the plain bound, without sharing, is Liveness's).
  std::uint64_t aliased_lower_bound_bytes = 0;
  std::string packer;                       // which packer produced the offsets
  // The exact packer's verdict (pack.hpp, exact_packing): no packing of these buffers is smaller, or how far
  // above the best proven lower bound the arena may be: (arena - bound) / bound, 0 when optimal.
  bool arena_optimal = false;
  double arena_gap = 0.0;
  std::vector<OpId> schedule;               // topological order of all ops of the graph
  std::vector<Buffer> buffers;              // sorted by (offset, first step)
  std::vector<Alias> aliases;
  std::vector<Scratch> scratch;             // sorted by step of the op; at most one per op
  std::vector<std::uint64_t> tensor_offset; // per tensor: arena offset, or kNotInArena (a slice: inside its buffer)
  std::vector<std::uint32_t> tensor_buffer; // per tensor: index into buffers, or UINT32_MAX
};

}  // namespace memplan::planner
