// Error kind names and checked byte arithmetic.
#include "analysis/error.hpp"

#include <limits>

namespace memplan {

const char* error_kind_name(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::usage: return "usage";
    case ErrorKind::io: return "io";
    case ErrorKind::malformed: return "malformed";
    case ErrorKind::unsupported: return "unsupported";
    case ErrorKind::invalid_graph: return "invalid-graph";
    case ErrorKind::shape: return "shape";
    case ErrorKind::overflow: return "overflow";
    case ErrorKind::infeasible: return "infeasible";
    case ErrorKind::plan_mismatch: return "plan-mismatch";
    case ErrorKind::verification: return "verification";
    case ErrorKind::runtime: return "runtime";
  }
  return "error";
}

// Sizes are kept below 2^63 so that they survive conversion to signed offsets anywhere downstream.
static constexpr std::uint64_t kMaxBytes = std::uint64_t{1} << 63;

std::uint64_t checked_add(std::uint64_t a, std::uint64_t b, const std::string& what) {
  if (a >= kMaxBytes || b >= kMaxBytes - a) fail(ErrorKind::overflow, what + ": size exceeds 2^63 bytes");
  return a + b;
}

std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const std::string& what) {
  if (a != 0 && b > (kMaxBytes - 1) / a) fail(ErrorKind::overflow, what + ": size exceeds 2^63 bytes");
  return a * b;
}

std::uint64_t align_up(std::uint64_t value, std::uint64_t alignment) {
  if (alignment <= 1) return value;
  std::uint64_t rem = value % alignment;
  return rem == 0 ? value : checked_add(value, alignment - rem, "alignment");
}

}  // namespace memplan
