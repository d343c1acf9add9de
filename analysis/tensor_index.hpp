// Index arithmetic every stage shares (one copy): strides, broadcasting, axes, element sizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "analysis/graph.hpp"

namespace memplan::analysis {

// Product of dims[from, to) (no overflow check: dims of a shaped tensor whose byte size was checked).
std::int64_t dims_product(const std::vector<std::int64_t>& dims, std::size_t from = 0, std::size_t to = SIZE_MAX);
// Row-major element strides of `dims`.
std::vector<std::int64_t> contiguous_strides(const std::vector<std::int64_t>& dims);
// Element strides of a tensor of dims `in` read under numpy broadcasting against `out`: `in` is
// right-aligned, broadcast dims (size 1) get stride 0. `in` must broadcast to `out` (checked by shapes).
std::vector<std::int64_t> broadcast_strides(const std::vector<std::int64_t>& in, const std::vector<std::int64_t>& out);
// `axis` in [-rank, rank) as an index; ErrorKind::shape naming `op` and `what` otherwise.
std::size_t normalize_axis(std::int64_t axis, std::size_t rank, const Op& op, std::string_view what = "axis");
// Bytes per element of a whole-byte dtype; ErrorKind::unsupported for sub-byte, string and undefined.
std::uint32_t element_bytes(DType t);

}  // namespace memplan::analysis
