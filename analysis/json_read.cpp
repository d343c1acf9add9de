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

namespace {
// nlohmann's DOM builder with nesting bounded and duplicate keys refused. A SAX handler rather than
// json::parse's callback: in nlohmann 3.11 the callback parser scans the enclosing array for a discarded value
// after every object it closes, so an array of n objects took O(n^2) (150,000 trace blocks: 48 s).
class StrictSax {
 public:
  StrictSax(json& result, const std::string& origin) : dom_(result, true), origin_(origin) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& s) { return dom_.number_float(v, s); }
  bool string(json::string_t& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) {
    open();
    keys_.emplace_back();
    return dom_.start_object(n);
  }
  bool key(json::string_t& k) {
    if (!keys_.back().insert(k).second)
      fail(ErrorKind::malformed, origin_ + ": a JSON object gives the key " + json_excerpt(json(k)) + " twice");
    return dom_.key(k);
  }
  bool end_object() {
    keys_.pop_back();
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    open();
    return dom_.start_array(n);
  }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(std::size_t pos, const std::string& token, const nlohmann::detail::exception& e) {
    return dom_.parse_error(pos, token, e);
  }

 private:
  void open() {
    if (depth_ >= kMaxJsonDepth)
      fail(ErrorKind::malformed, origin_ + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    ++depth_;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  const std::string& origin_;
  std::vector<std::unordered_set<std::string>> keys_;  // one set per open object
  int depth_ = 0;
};
}  // namespace

json parse_json_strict(std::string_view text, const std::string& origin) {
  json result;
  StrictSax sax(result, origin);
  try {
    json::sax_parse(text.begin(), text.end(), &sax, json::input_format_t::json, true, false);
  } catch (const json::exception& e) {
    fail(ErrorKind::malformed, origin + ": not valid JSON (" + e.what() + ")");
  }
  return result;
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
