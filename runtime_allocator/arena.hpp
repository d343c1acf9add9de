// The arena: one backend allocation of a plan's arena_bytes, tensors bound at their planned offsets.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/plan.hpp"
#include "runtime_allocator/backend.hpp"

namespace memplan::runtime {

// Allocated once and reused across steps (a training loop binds the same addresses every step). `bind`
// is bounds-checked in debug builds, and always when `always_check` is set: a tensor must lie inside
// the arena. `mark_written` records the highest byte a step actually wrote (the touched high-water mark),
// which tests compare with the plan's arena_bytes.
class Arena {
 public:
  // `tensor_bytes` per tensor (the plan's tensor_offset has the same length).
  Arena(Backend& backend, const planner::Plan& plan, std::vector<std::uint64_t> tensor_bytes, bool always_check = false);

  bool in_arena(analysis::TensorId t) const noexcept;
  std::byte* bind(analysis::TensorId t) const;
  void mark_written(analysis::TensorId t) noexcept;
  std::uint64_t touched_bytes() const noexcept { return touched_; }
  void reset_touched() noexcept { touched_ = 0; }
  std::uint64_t size() const noexcept { return bytes_; }
  std::byte* base() const noexcept { return buffer_.data(); }

 private:
  void check(analysis::TensorId t) const;
  DeviceBuffer buffer_;
  std::uint64_t bytes_ = 0;
  std::vector<std::uint64_t> offset_;
  std::vector<std::uint64_t> tensor_bytes_;
  bool always_check_ = false;
  std::uint64_t touched_ = 0;
};

}  // namespace memplan::runtime
