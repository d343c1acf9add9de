// The one error type of memplan: a kind (mapped to a documented exit code by the CLI) and a message.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace memplan {

// Exit codes are documented in docs/errors.md; keep the two in step.
enum class ErrorKind : int {
  usage = 2,          // bad command line, absurd --dim values
  io = 3,             // file missing or unreadable
  malformed = 4,      // truncated/garbage ONNX, bad JSON, protobuf bombs
  unsupported = 5,    // unknown op, dtype, subgraph-bearing op
  invalid_graph = 6,  // cycle, dangling input, duplicate tensor names
  shape = 7,          // shapes cannot be inferred, unbound symbolic dim
  overflow = 8,       // a size beyond 2^63 bytes, negative dims
  infeasible = 9,     // the budget cannot be met
  plan_mismatch = 10, // plan of the wrong schema/version or for another model
  verification = 11,  // a plan failed the verifier (a bug, never a user's fault)
  runtime = 12,       // execution failed (allocator exhaustion, device errors)
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

[[noreturn]] inline void fail(ErrorKind kind, const std::string& message) { throw Error(kind, message); }

const char* error_kind_name(ErrorKind kind) noexcept;

// Checked arithmetic on byte counts: overflow is reported as ErrorKind::overflow naming `what`.
std::uint64_t checked_add(std::uint64_t a, std::uint64_t b, const std::string& what);
std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const std::string& what);
// Rounds up to a multiple of `alignment` (a power of two or any positive number), checked.
std::uint64_t align_up(std::uint64_t value, std::uint64_t alignment);

}  // namespace memplan
