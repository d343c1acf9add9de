// The arena: one allocation, planned offsets, bounds checks and the touched high-water mark.
#include "runtime_allocator/arena.hpp"

#include <algorithm>
#include <string>

namespace memplan::runtime {

Arena::Arena(Backend& backend, const planner::Plan& plan, std::vector<std::uint64_t> tensor_bytes, bool always_check)
    : bytes_(plan.arena_bytes), offset_(plan.tensor_offset), tensor_bytes_(std::move(tensor_bytes)),
      always_check_(always_check) {
  if (offset_.size() != tensor_bytes_.size())
    fail(ErrorKind::plan_mismatch, "arena: the plan has offsets for " + std::to_string(offset_.size()) +
                                       " tensors, the graph has " + std::to_string(tensor_bytes_.size()));
  const std::uint64_t alignment = std::max<std::uint64_t>(plan.alignment, 64);
  if ((alignment & (alignment - 1)) != 0)
    fail(ErrorKind::plan_mismatch, "arena: plan alignment " + std::to_string(plan.alignment) + " is not a power of two");
  buffer_ = DeviceBuffer(backend, std::max<std::uint64_t>(bytes_, 1), alignment);
  if (always_check_)
    for (analysis::TensorId t = 0; t < offset_.size(); ++t)
      if (in_arena(t)) check(t);
}

bool Arena::in_arena(analysis::TensorId t) const noexcept {
  return t < offset_.size() && offset_[t] != planner::kNotInArena;
}

void Arena::check(analysis::TensorId t) const {
  if (!in_arena(t)) fail(ErrorKind::runtime, "arena: tensor #" + std::to_string(t) + " has no planned offset");
  if (offset_[t] > bytes_ || tensor_bytes_[t] > bytes_ - offset_[t])
    fail(ErrorKind::runtime, "arena: tensor #" + std::to_string(t) + " at offset " + std::to_string(offset_[t]) + " (+" +
                                 std::to_string(tensor_bytes_[t]) + " bytes) lies outside the " +
                                 std::to_string(bytes_) + "-byte arena");
}

std::byte* Arena::bind(analysis::TensorId t) const {
#ifdef NDEBUG
  if (always_check_) check(t);
#else
  check(t);
#endif
  return buffer_.data() + offset_[t];
}

void Arena::mark_written(analysis::TensorId t) noexcept {
  if (in_arena(t)) touched_ = std::max(touched_, offset_[t] + tensor_bytes_[t]);
}

}  // namespace memplan::runtime
