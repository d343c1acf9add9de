// Tests of the plan's JSON form: exact round trip, and each way a document can be wrong.
#include <doctest/doctest.h>

#include "analysis/import.hpp"
#include "bench/gen_graph.hpp"
#include "planner/fused_groups.hpp"
#include "planner/fusion.hpp"
#include "planner/plan_json.hpp"
#include "tests/planner/planner_fixtures.hpp"

using namespace memplan;
using namespace memplan::planner;
using nlohmann::json;

namespace {

ErrorKind kind_of_reading(const analysis::Graph& g, const json& doc) {
  try {
    plan_from_json(g, doc);
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::runtime;  // stands for "no error"
}

analysis::Graph sample_graph(std::uint32_t seed) {
  synthetic::GraphOptions o;
  o.ops = 60;
  o.seed = seed;
  return synthetic::random_graph(o);
}

}  // namespace

TEST_CASE("a plan written, read and written again gives the same bytes and the same Plan") {
  for (std::uint32_t seed = 1; seed <= 10; ++seed) {
    const auto g = sample_graph(seed);
    const Plan p = testing::plan_checked(g);
    const std::string first = plan_to_json(g, p).dump();
    const Plan back = plan_from_json(g, json::parse(first));
    CHECK(plan_to_json(g, back).dump() == first);
    CHECK(back.schedule == p.schedule);
    CHECK(back.tensor_offset == p.tensor_offset);
    CHECK(back.tensor_buffer == p.tensor_buffer);
    CHECK(back.arena_bytes == p.arena_bytes);
    CHECK(back.aliased_lower_bound_bytes == p.aliased_lower_bound_bytes);
    REQUIRE(back.aliases.size() == p.aliases.size());
    for (std::size_t i = 0; i < p.aliases.size(); ++i) {
      CHECK(back.aliases[i].tensor == p.aliases[i].tensor);
      CHECK(back.aliases[i].source == p.aliases[i].source);
      CHECK(back.aliases[i].op == p.aliases[i].op);
      CHECK(back.aliases[i].kind == p.aliases[i].kind);
    }
    REQUIRE(back.scratch.size() == p.scratch.size());
    for (std::size_t i = 0; i < p.scratch.size(); ++i) {
      CHECK(back.scratch[i].op == p.scratch[i].op);
      CHECK(back.scratch[i].offset == p.scratch[i].offset);
      CHECK(back.scratch[i].bytes == p.scratch[i].bytes);
    }
    CHECK(verify_plan(g, back).valid);
  }
}

TEST_CASE("an embedded graph is written under \"graph\" and ignored when reading") {
  const auto g = sample_graph(3);
  const Plan p = testing::plan_checked(g);
  const json doc = plan_to_json(g, p, true);
  REQUIRE(doc.contains("graph"));
  CHECK(doc["graph"].is_object());
  CHECK(plan_to_json(g, plan_from_json(g, doc)).dump() == plan_to_json(g, p).dump());
}

TEST_CASE("a forward graph with fused elementwise ops round-trips through an embedded plan unchanged") {
  const auto g = sample_graph(5);
  const auto fr = fuse_elementwise(g);
  REQUIRE(!fr.groups.empty());
  const Plan p = testing::plan_checked(fr.graph);
  const json doc = plan_to_json(fr.graph, p, true);
  const analysis::Graph back = analysis::import_json(doc["graph"]);
  REQUIRE(back.ops.size() == fr.graph.ops.size());
  std::size_t fused = 0;
  for (std::size_t o = 0; o < back.ops.size(); ++o) {
    const auto &a = back.ops[o], &b = fr.graph.ops[o];
    CHECK(a.name == b.name);
    CHECK(a.type == b.type);
    CHECK(a.domain == b.domain);
    CHECK(a.phase == b.phase);
    if (b.type != kFusedOpType) continue;
    ++fused;
    CHECK(a.attr_string("expr", "") == b.attr_string("expr", ""));
    REQUIRE(a.attr("fused_ops") != nullptr);
    CHECK(a.attr("fused_ops")->strings == b.attr("fused_ops")->strings);
    REQUIRE(a.inputs.size() == b.inputs.size());
    for (std::size_t i = 0; i < a.inputs.size(); ++i) CHECK(back.tensors[a.inputs[i]].name == fr.graph.tensors[b.inputs[i]].name);
  }
  CHECK(fused == fr.groups.size());
  CHECK(plan_to_json(back, plan_from_json(back, doc), true).dump() == doc.dump());
}

TEST_CASE("a document of another schema, version or model is a plan mismatch") {
  const auto g = sample_graph(4);
  const json doc = plan_to_json(g, testing::plan_checked(g));
  json wrong_schema = doc;
  wrong_schema["schema"] = "memplan.graph";
  CHECK(kind_of_reading(g, wrong_schema) == ErrorKind::plan_mismatch);
  json wrong_version = doc;
  wrong_version["version"] = 3;
  CHECK(kind_of_reading(g, wrong_version) == ErrorKind::plan_mismatch);
  CHECK(kind_of_reading(sample_graph(5), doc) == ErrorKind::plan_mismatch);
  json unknown_tensor = doc;
  unknown_tensor["buffers"][0]["tensors"][0] = "no_such_tensor";
  CHECK(kind_of_reading(g, unknown_tensor) == ErrorKind::plan_mismatch);
  json unknown_op = doc;
  unknown_op["schedule"][0] = "no_such_op";
  CHECK(kind_of_reading(g, unknown_op) == ErrorKind::plan_mismatch);
}

TEST_CASE("a document with missing fields or wrong types is malformed") {
  const auto g = sample_graph(6);
  const json doc = plan_to_json(g, testing::plan_checked(g));
  CHECK(kind_of_reading(g, json::array()) == ErrorKind::malformed);
  json no_buffers = doc;
  no_buffers.erase("buffers");
  CHECK(kind_of_reading(g, no_buffers) == ErrorKind::malformed);
  json bad_offset = doc;
  bad_offset["buffers"][0]["offset"] = "zero";
  CHECK(kind_of_reading(g, bad_offset) == ErrorKind::malformed);
  json bad_kind = doc;
  REQUIRE(!bad_kind["aliases"].empty());
  bad_kind["aliases"][0]["kind"] = "copy";
  CHECK(kind_of_reading(g, bad_kind) == ErrorKind::malformed);
  json bad_id = doc;
  bad_id["buffers"][0]["id"] = 7;
  CHECK(kind_of_reading(g, bad_id) == ErrorKind::malformed);
}

TEST_CASE("scratch regions are written by op name - a version 1 document (no scratch) still reads") {
  std::size_t with_scratch = 0;
  for (std::uint32_t seed = 11; seed <= 30; ++seed) {
    const auto g = sample_graph(seed);
    const Plan p = testing::plan_checked(g);
    const json doc = plan_to_json(g, p);
    REQUIRE(doc["scratch"].size() == p.scratch.size());
    if (p.scratch.empty()) continue;
    ++with_scratch;
    CHECK(doc["scratch"][0]["op"] == g.ops[p.scratch[0].op].name);
    json v1 = doc;
    v1["version"] = 1;
    v1.erase("scratch");
    CHECK(plan_from_json(g, v1).scratch.empty());
    json unknown = doc;
    unknown["scratch"][0]["op"] = "no_such_op";
    CHECK(kind_of_reading(g, unknown) == ErrorKind::plan_mismatch);
    json no_bytes = doc;
    no_bytes["scratch"][0].erase("bytes");
    CHECK(kind_of_reading(g, no_bytes) == ErrorKind::malformed);
  }
  CHECK(with_scratch > 5);
}

TEST_CASE("a fused graph's plan lists its fused groups, reads back, and is refused when they differ") {
  bool any = false;
  for (std::uint32_t seed = 1; seed <= 8; ++seed) {
    const auto unfused = sample_graph(seed);
    CHECK_FALSE(plan_to_json(unfused, testing::plan_checked(unfused)).contains("fused_groups"));
    const auto g = fuse_graph(unfused).graph;
    const auto groups = fused_groups_of(g);
    if (groups.empty()) continue;
    any = true;
    const Plan p = testing::plan_checked(g);
    const json doc = plan_to_json(g, p);
    REQUIRE(doc.contains("fused_groups"));
    REQUIRE(doc["fused_groups"].size() == groups.size());
    CHECK(doc["fused_groups"][0]["op"] == g.ops[groups[0].op].name);
    CHECK(doc["fused_groups"][0]["kind"] == groups[0].kind);
    CHECK(doc["fused_groups"][0]["members"] == groups[0].members);
    CHECK(plan_to_json(g, plan_from_json(g, doc)).dump() == doc.dump());

    json fewer = doc;
    fewer["fused_groups"].erase(fewer["fused_groups"].size() - 1);
    CHECK(kind_of_reading(g, fewer) == ErrorKind::plan_mismatch);
    json other_members = doc;
    other_members["fused_groups"][0]["members"].push_back("an op it never replaced");
    CHECK(kind_of_reading(g, other_members) == ErrorKind::plan_mismatch);
    json other_kind = doc;
    other_kind["fused_groups"][0]["kind"] = "attention";
    CHECK(kind_of_reading(g, other_kind) == ErrorKind::plan_mismatch);
    json not_array = doc;
    not_array["fused_groups"] = "elementwise";
    CHECK(kind_of_reading(g, not_array) == ErrorKind::malformed);
    json without = doc;
    without.erase("fused_groups");  // a plan written before the section existed still reads
    CHECK(kind_of_reading(g, without) == ErrorKind::runtime);
  }
  CHECK(any);
}

TEST_CASE("plan numbers are never truncated or wrapped: fractions, negatives and values beyond a field's range are malformed") {
  const auto g = sample_graph(6);
  const json doc = plan_to_json(g, testing::plan_checked(g));
  struct Case {
    const char* field;
    json value;
  };
  const Case cases[] = {{"offset", 64.5},  {"offset", -64},         {"offset", 18446744073709551616.0}, {"size", 1e3},
                        {"first", -1},     {"last", 4294967296ull}, {"first", 0.5},                      {"id", 0.0}};
  for (const auto& c : cases) {
    const std::string field = c.field, value = c.value.dump();
    CAPTURE(field);
    CAPTURE(value);
    json bad = doc;
    bad["buffers"][0][c.field] = c.value;
    CHECK(kind_of_reading(g, bad) == ErrorKind::malformed);
    try {
      plan_from_json(g, bad);
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("\"" + field + "\"") != std::string::npos);
    }
  }
  json arena = doc;
  arena["arena_bytes"] = 1.5e9;
  CHECK(kind_of_reading(g, arena) == ErrorKind::malformed);
  // A version that is not exactly one this build reads is a mismatch, never rounded to one.
  for (const json& v : {json(2.5), json(2.0), json("2"), json(-2), json(18446744073709551615ull)}) {
    CAPTURE(v.dump());
    json version = doc;
    version["version"] = v;
    CHECK(kind_of_reading(g, version) == ErrorKind::plan_mismatch);
  }
}
