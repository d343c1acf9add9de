// Regression tests for what the fuzzers found in the importers: each input once broke memory safety or allocated wildly.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "analysis/import.hpp"

using namespace memplan;
using namespace memplan::analysis;
using nlohmann::json;

namespace {

json relu_graph(json tensors) {
  return json{{"format", "memplan.graph"}, {"version", 1}, {"outputs", {"y"}}, {"tensors", std::move(tensors)},
              {"ops", {{{"name", "relu"}, {"type", "Relu"}, {"inputs", {"k"}}, {"outputs", {"y"}},
                        {"attrs", {{"perm", {{"ints", {3, 1, 2}}}}, {"scale", {{"floats", {0.5}}}}}}}}}};
}

ErrorKind kind_of(const json& doc) {
  try {
    (void)import_json(doc, "test");
  } catch (const Error& e) {
    return e.kind();
  }
  return static_cast<ErrorKind>(0);
}

}  // namespace

TEST_CASE("typed JSON attributes keep their key and values (once read through a dangling proxy)") {
  Graph g = import_json(relu_graph({{{"name", "k"}, {"shape", {2}}, {"role", "input"}}, {{"name", "y"}}}), "test");
  const Op& op = g.ops.at(0);
  REQUIRE(op.attr("perm") != nullptr);
  CHECK(op.attr("perm")->kind == Attribute::Kind::ints);
  CHECK(op.attr_ints("perm") == std::vector<std::int64_t>{3, 1, 2});
  REQUIRE(op.attr("scale") != nullptr);
  CHECK(op.attr("scale")->kind == Attribute::Kind::floats);
  CHECK(op.attr("scale")->floats == std::vector<double>{0.5});
}

TEST_CASE("JSON constants that their integer dtype cannot hold are malformed") {
  struct Case {
    const char* dtype;
    json value;
    bool fits;
  };
  const Case cases[] = {
      {"int8", 127, true},          {"int8", 128, false},          {"int8", -129, false},
      {"uint8", -1, false},         {"uint8", 255.0, true},        {"int32", 99999999999, false},
      {"int64", 1e300, false},      {"int64", -1e18, true},        {"uint64", 18446744073709551615ull, true},
      {"uint64", 1.9e19, false},    {"uint16", 65536, false},      {"bool", 1e300, true},
      {"float32", 1e300, true},
  };
  for (const auto& c : cases) {
    const std::string dtype = c.dtype, value = c.value.dump();
    CAPTURE(dtype);
    CAPTURE(value);
    json doc = relu_graph({{{"name", "k"}, {"dtype", c.dtype}, {"shape", {1}}, {"role", "weight"}, {"data", {c.value}}},
                           {{"name", "y"}}});
    if (c.fits) {
      Graph g = import_json(doc, "test");
      REQUIRE(g.tensors[g.at("k")].data != nullptr);
      CHECK(g.tensors[g.at("k")].data->bytes.size() == g.tensors[g.at("k")].bytes());
    } else {
      CHECK(kind_of(doc) == ErrorKind::malformed);
    }
  }
}

TEST_CASE("a value kept in range survives a JSON constant round trip exactly") {
  json doc = relu_graph({{{"name", "k"}, {"dtype", "int64"}, {"shape", {3}}, {"role", "weight"},
                          {"data", {std::numeric_limits<std::int64_t>::min(), -1, std::numeric_limits<std::int64_t>::max()}}},
                         {{"name", "y"}}});
  Graph g = import_json(doc, "test");
  CHECK(g.tensors[g.at("k")].data->as_int64() ==
        std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::min(), -1, std::numeric_limits<std::int64_t>::max()});
}

TEST_CASE("constants built from out-of-range floats clamp instead of invoking undefined behaviour") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto v = TensorData::from_double(DType::i64, {4}, {1e300, -1e300, nan, -7.9}).as_int64();
  CHECK(v == std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::min(), 0, -7});
  auto u = TensorData::from_double(DType::u64, {2}, {1e300, 3.5}).as_int64();
  CHECK(static_cast<std::uint64_t>(u[0]) == std::numeric_limits<std::uint64_t>::max());
  CHECK(u[1] == 3);
  // Narrow integer dtypes wrap the clamped value as numpy's astype does: 300 -> 44 in int8.
  CHECK(TensorData::from_double(DType::i8, {1}, {300.0}).as_int64() == std::vector<std::int64_t>{44});
}

TEST_CASE("non-finite float constants survive export_json and import_json") {
  // Found by fuzz_json: 1e300 in a float32 constant became inf, which export wrote as null and import refused.
  json doc = relu_graph({{{"name", "k"}, {"dtype", "float32"}, {"shape", {4}}, {"role", "weight"},
                          {"data", {1e300, "-inf", "nan", 2.5}}},
                         {{"name", "y"}}});
  Graph g = import_json(doc, "test");
  Graph back = import_json(export_json(g, true), "export");
  CHECK(back.fingerprint() == g.fingerprint());
  const auto v = back.tensors[back.at("k")].data->as_double();
  REQUIRE(v.size() == 4);
  CHECK(v[0] == std::numeric_limits<double>::infinity());
  CHECK(v[1] == -std::numeric_limits<double>::infinity());
  CHECK(std::isnan(v[2]));
  CHECK(v[3] == 2.5);
  json bad = relu_graph({{{"name", "k"}, {"dtype", "int32"}, {"shape", {1}}, {"role", "weight"}, {"data", {"inf"}}}, {{"name", "y"}}});
  CHECK(kind_of(bad) == ErrorKind::malformed);
}

TEST_CASE("an integer attribute written as a huge float clamps instead of invoking undefined behaviour") {
  // Found by fuzz_json: {"axis": 1.9e21} reached Op::attr_int's float-to-int64 cast.
  json doc = relu_graph({{{"name", "k"}, {"shape", {2}}, {"role", "input"}}, {{"name", "y"}}});
  doc["ops"][0]["attrs"] = {{"axis", 1.9e21}, {"low", -1e300}, {"small", 3.75}};
  Graph g = import_json(doc, "test");
  CHECK(g.ops[0].attr_int("axis", 0) == std::numeric_limits<std::int64_t>::max());
  CHECK(g.ops[0].attr_int("low", 0) == std::numeric_limits<std::int64_t>::min());
  CHECK(g.ops[0].attr_int("small", 0) == 3);
}
