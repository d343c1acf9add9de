// The rows of a tensor along a class axis (cross-entropy): [outer, classes, inner], a row per (outer, inner).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime_allocator/kernels/host_device.hpp"

namespace memplan::runtime {

// Element (o, c, i) of the row (o, i) sits at (o * classes + c) * inner + i; row r = o * inner + i is the
// index of its label. inner is 1 when the class axis is the last (rows contiguous, a language model's
// logits), the spatial size for axis 1 of [N, C, H, W] (a strided row).
struct ClassRows {
  std::int64_t outer = 1, classes = 1, inner = 1;
  MEMPLAN_HOST_DEVICE std::int64_t rows() const noexcept { return outer * inner; }
  MEMPLAN_HOST_DEVICE std::int64_t base(std::int64_t row) const noexcept { return (row / inner) * classes * inner + row % inner; }
};

// `axis` already normalized (0 <= axis < rank).
inline ClassRows class_rows(const std::vector<std::int64_t>& shape, std::int64_t axis) {
  ClassRows r;
  for (std::int64_t k = 0; k < static_cast<std::int64_t>(shape.size()); ++k)
    (k < axis ? r.outer : k == axis ? r.classes : r.inner) *= shape[static_cast<std::size_t>(k)];
  return r;
}

}  // namespace memplan::runtime
