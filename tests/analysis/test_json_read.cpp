// Strict JSON reading: nesting limit, duplicate keys, integer fields, bounded excerpts in messages.
#include <doctest/doctest.h>

#include <string>

#include "analysis/json_read.hpp"
#include "analysis/error.hpp"

using namespace memplan;
using namespace memplan::analysis;
using nlohmann::json;

namespace {
std::string error_of(const std::string& text, ErrorKind* kind = nullptr) {
  try {
    (void)parse_json_strict(text, "doc.json");
  } catch (const Error& e) {
    if (kind) *kind = e.kind();
    return e.what();
  }
  return {};
}
std::string nested(int depth) { return std::string(static_cast<std::size_t>(depth), '[') + std::string(static_cast<std::size_t>(depth), ']'); }
}  // namespace

TEST_CASE("JSON nested deeper than the limit is malformed, however deep, without recursion") {
  CHECK(parse_json_strict(nested(kMaxJsonDepth), "doc.json").is_array());
  for (int depth : {kMaxJsonDepth + 1, 100000, 1000000}) {
    CAPTURE(depth);
    ErrorKind kind = ErrorKind::usage;
    const std::string msg = error_of(nested(depth), &kind);
    CHECK(kind == ErrorKind::malformed);
    CHECK(msg.find("nested deeper") != std::string::npos);
    CHECK(msg.find("doc.json") == 0);
  }
  ErrorKind kind = ErrorKind::usage;
  std::string objects;
  for (int k = 0; k < 200000; ++k) objects += "{\"a\": ";
  CHECK(error_of(objects, &kind).find("nested") != std::string::npos);
  CHECK(kind == ErrorKind::malformed);
}

TEST_CASE("an object that gives a key twice is malformed at any depth, and the same key in two objects is fine") {
  ErrorKind kind = ErrorKind::usage;
  CHECK(error_of(R"({"version": 1, "version": 2})", &kind).find("\"version\" twice") != std::string::npos);
  CHECK(kind == ErrorKind::malformed);
  CHECK(error_of(R"({"a": [{"offset": 0, "size": 4, "offset": 64}]})").find("\"offset\" twice") != std::string::npos);
  CHECK(error_of(R"({"a": {"k": 1}, "b": {"k": 2}, "k": [{"k": 3}, {"k": 4}]})").empty());
  CHECK(error_of(R"({"a": {"k": 1}, "a": {"k": 1}})").find("\"a\" twice") != std::string::npos);
}

TEST_CASE("invalid JSON is malformed, and a missing file is an io error") {
  ErrorKind kind = ErrorKind::usage;
  CHECK(error_of(R"({"a": )", &kind).find("not valid JSON") != std::string::npos);
  CHECK(kind == ErrorKind::malformed);
  try {
    (void)read_json_file("/nonexistent/plan.json", "plan");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::io);
  }
}

TEST_CASE("integer fields refuse fractions, exponents, strings and values out of range, naming the field") {
  CHECK(json_int(json(-3), -5, 5, "f") == -3);
  CHECK(json_uint(json(18446744073709551615ull), UINT64_MAX, "f") == UINT64_MAX);
  CHECK(json_int(json(9223372036854775807LL), 0, INT64_MAX, "f") == INT64_MAX);
  for (const char* text : {"1.5", "2.0", "1e3", "-1", "18446744073709551616", "\"3\"", "null", "[1]", "4294967296"}) {
    CAPTURE(text);
    const json v = json::parse(text);
    try {
      (void)json_uint(v, UINT32_MAX, "plan: a buffer field \"first\"");
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::malformed);
      CHECK(std::string(e.what()).find("\"first\"") != std::string::npos);
    }
  }
  for (const char* text : {"0.5", "9223372036854775808", "-9223372036854775809", "6"}) {
    CAPTURE(text);
    try {
      (void)json_int(json::parse(text), -5, 5, "axis");
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::malformed);
    }
  }
}

TEST_CASE("excerpts of JSON values are short and never recurse, however deep the value") {
  json deep = json::array();
  for (int k = 0; k < 200000; ++k) deep = json::array({std::move(deep)});  // built by code: no parser limit applies
  CHECK(json_excerpt(deep) == "an array of 1 values");
  CHECK(json_excerpt(json{{"a", 1}, {"b", 2}}) == "an object of 2 keys");
  const std::string cut = json_excerpt(json(std::string(10000, 'x')));
  CHECK(cut.size() < 70);
  CHECK(cut.ends_with("..."));
  CHECK(json_excerpt(json(std::string("bad \xff utf-8"))).find("bad") != std::string::npos);  // replaced, no throw
  CHECK(json_excerpt(json(2.5)) == "2.5");
}
