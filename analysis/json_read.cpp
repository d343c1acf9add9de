// Strict JSON reading: nlohmann's parser with a callback that bounds nesting and refuses duplicate keys.
#include "analysis/json_read.hpp"

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <unordered_set>
#include <vector>

#include "analysis/error.hpp"

namespace memplan::analysis {

using nlohmann::json;

json parse_json_strict(std::string_view text, const std::string& origin) {
  std::vector<std::unordered_set<std::string>> keys;  // one set per open object
  const json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth)
          fail(ErrorKind::malformed, origin + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
        if (event == json::parse_event_t::object_start) keys.emplace_back();
        break;
      case json::parse_event_t::key:
        if (!keys.empty() && !keys.back().insert(parsed.get<std::string>()).second)
          fail(ErrorKind::malformed, origin + ": a JSON object gives the key " + json_excerpt(parsed) + " twice");
        break;
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), check, true, false);
  } catch (const json::exception& e) {
    fail(ErrorKind::malformed, origin + ": not valid JSON (" + e.what() + ")");
  }
}

json read_json_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(ErrorKind::io, "cannot read " + what + " '" + path + "': it is a directory");
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(ErrorKind::io, "cannot open " + what + " '" + path + "'");
  std::stringstream buf;
  buf << f.rdbuf();
  if (f.bad()) fail(ErrorKind::io, "cannot read " + what + " '" + path + "'");
  return parse_json_strict(buf.str(), path);
}

std::string json_excerpt(const json& v, std::size_t max_chars) {
  if (v.is_array()) return "an array of " + std::to_string(v.size()) + " values";
  if (v.is_object()) return "an object of " + std::to_string(v.size()) + " keys";
  if (v.is_discarded()) return "nothing";
  // A scalar's text is short, except a string's: dump with invalid UTF-8 replaced, then cut.
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > max_chars) {
    s.resize(max_chars);
    s += "...";
  }
  return s;
}

namespace {
[[noreturn]] void not_integer(const json& v, const std::string& field, const std::string& range) {
  fail(ErrorKind::malformed, field + " must be an integer in " + range + ", got " + json_excerpt(v));
}
}  // namespace

std::int64_t json_int(const json& v, std::int64_t lo, std::int64_t hi, const std::string& field) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) || static_cast<std::int64_t>(u) > hi ||
        static_cast<std::int64_t>(u) < lo)
      not_integer(v, field, range);
    return static_cast<std::int64_t>(u);
  }
  if (!v.is_number_integer()) not_integer(v, field, range);
  const auto i = v.get<std::int64_t>();
  if (i < lo || i > hi) not_integer(v, field, range);
  return i;
}

std::uint64_t json_uint(const json& v, std::uint64_t hi, const std::string& field) {
  const std::string range = "[0, " + std::to_string(hi) + "]";
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > hi) not_integer(v, field, range);
    return u;
  }
  if (!v.is_number_integer() || v.get<std::int64_t>() < 0) not_integer(v, field, range);
  const auto u = static_cast<std::uint64_t>(v.get<std::int64_t>());  // 0 or more: exact
  if (u > hi) not_integer(v, field, range);
  return u;
}

}  // namespace memplan::analysis
