// Strict reading of user JSON (graphs, plans, device profiles): bounded nesting, no duplicate keys, checked integers.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace memplan::analysis {

// Deepest nesting of arrays and objects a memplan JSON document may have; graphs and plans need under 10.
inline constexpr int kMaxJsonDepth = 64;

// Parses `text`. Invalid JSON, nesting deeper than kMaxJsonDepth and an object that gives a key twice are
// ErrorKind::malformed, the message starting with `origin`.
nlohmann::json parse_json_strict(std::string_view text, const std::string& origin);
// Reads and parses a file: ErrorKind::io when it cannot be opened or read (`what` names it: "plan", "model").
nlohmann::json read_json_file(const std::string& path, const std::string& what);

// At most `max_chars` characters describing `v` for an error message, without recursion: scalars as JSON
// text (cut with "..."), arrays and objects by their size.
std::string json_excerpt(const nlohmann::json& v, std::size_t max_chars = 60);

// An integer field: a JSON integer (not 2.0, not 1e3) in [lo, hi]. A fractional, non-integer, out-of-range
// or non-number value is ErrorKind::malformed naming `field` (never truncated, never wrapped).
std::int64_t json_int(const nlohmann::json& v, std::int64_t lo, std::int64_t hi, const std::string& field);
std::uint64_t json_uint(const nlohmann::json& v, std::uint64_t hi, const std::string& field);

}  // namespace memplan::analysis
