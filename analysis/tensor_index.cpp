// Index arithmetic every stage shares: strides, broadcasting, axes, element sizes.
#include "analysis/tensor_index.hpp"

#include <string>

namespace memplan::analysis {

std::int64_t dims_product(const std::vector<std::int64_t>& dims, std::size_t from, std::size_t to) {
  std::int64_t p = 1;
  for (std::size_t k = from; k < to && k < dims.size(); ++k) p *= dims[k];
  return p;
}

std::vector<std::int64_t> contiguous_strides(const std::vector<std::int64_t>& dims) {
  std::vector<std::int64_t> s(dims.size(), 1);
  for (std::size_t k = dims.size(); k-- > 1;) s[k - 1] = s[k] * dims[k];
  return s;
}

std::vector<std::int64_t> broadcast_strides(const std::vector<std::int64_t>& in, const std::vector<std::int64_t>& out) {
  std::vector<std::int64_t> s(out.size(), 0);
  std::int64_t stride = 1;
  for (std::size_t k = 0; k < in.size() && k < out.size(); ++k) {
    const std::size_t di = in.size() - 1 - k, dout = out.size() - 1 - k;
    s[dout] = in[di] == 1 ? 0 : stride;
    stride *= in[di];
  }
  return s;
}

std::size_t normalize_axis(std::int64_t axis, std::size_t rank, const Op& op, std::string_view what) {
  const auto r = static_cast<std::int64_t>(rank);
  if (axis < -r || axis >= r)
    fail(ErrorKind::shape, "op '" + op.name + "' (" + op.type + "): " + std::string(what) + " " + std::to_string(axis) +
                               " is outside [" + std::to_string(-r) + ", " + std::to_string(r) + ")");
  return static_cast<std::size_t>(axis < 0 ? axis + r : axis);
}

std::uint32_t element_bytes(DType t) {
  const std::uint32_t bits = dtype_bits(t);
  if (bits == 0 || bits % 8 != 0)
    fail(ErrorKind::unsupported, std::string("dtype ") + dtype_name(t) + " has no whole-byte element size");
  return bits / 8;
}

}  // namespace memplan::analysis
