// Tests of the Chrome trace export: required fields per event type, a monotone clock, counters that match usage.
#include <doctest/doctest.h>

#include "tests/viz/viz_fixtures.hpp"
#include "viz/timeline.hpp"
#include "viz/trace.hpp"

using namespace memplan;
using namespace memplan::viz;
using namespace memplan::viz::testing;

TEST_CASE("every event has the fields its type requires and spans lie end to end") {
  Graph g = random_chain(25, 4, 3000, 8);
  auto p = slot_plan(g, 6);
  TraceOptions opts;
  opts.op_seconds.assign(g.ops.size(), 0.0);
  for (std::size_t i = 0; i < g.ops.size(); ++i) opts.op_seconds[i] = 1e-5 * static_cast<double>(i % 4 + 1);
  const auto doc = chrome_trace(g, p, opts);
  REQUIRE(doc.contains("traceEvents"));
  const auto& ev = doc["traceEvents"];
  REQUIRE(ev.is_array());
  std::size_t spans = 0, counters = 0;
  double clock = 0;
  const auto usage = plan_usage(p);
  for (const auto& e : ev) {
    REQUIRE(e.contains("ph"));
    REQUIRE(e.contains("pid"));
    const std::string ph = e["ph"];
    if (ph == "X") {
      for (auto k : {"name", "ts", "dur", "tid", "cat"}) CHECK(e.contains(k));
      CHECK(e["ts"].get<double>() >= 0);
      CHECK(e["dur"].get<double>() >= 0);
      CHECK(e["ts"].get<double>() == doctest::Approx(clock));
      const auto step = e["args"]["step"].get<std::size_t>();
      CHECK(e["name"] == g.ops[p.schedule[step]].name);
      CHECK(e["dur"].get<double>() == doctest::Approx(opts.op_seconds[p.schedule[step]] * 1e6));
      clock += e["dur"].get<double>();
      ++spans;
    } else if (ph == "C") {
      CHECK(e.contains("name"));
      CHECK(e["ts"].get<double>() >= 0);
      REQUIRE(e["args"].is_object());
      for (const auto& [k, v] : e["args"].items()) CHECK(v.is_number());
      if (counters < usage.live_bytes.size()) CHECK(e["args"]["live"].get<std::uint64_t>() == usage.live_bytes[counters]);
      ++counters;
    } else {
      CHECK(ph == "M");
      CHECK(e["args"].contains("name"));
    }
  }
  CHECK(spans == p.schedule.size());
  CHECK(counters == p.schedule.size() + 1);
  CHECK(doc["otherData"]["estimated_seconds"].get<double>() == doctest::Approx(clock * 1e-6));
}

TEST_CASE("without estimates every op takes one microsecond, and bad estimates fall back") {
  Graph g = random_chain(10, 2, 100, 9);
  auto p = slot_plan(g, 4);
  TraceOptions opts;
  opts.op_seconds = {-1.0, std::nan("")};
  const auto doc = chrome_trace(g, p, opts);
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "X") CHECK(e["dur"].get<double>() == doctest::Approx(1.0));
}

TEST_CASE("a plan naming ops the graph lacks is a plan mismatch") {
  Graph g = random_chain(10, 2, 100, 10);
  auto p = slot_plan(g, 4);
  p.schedule.push_back(999);
  CHECK_THROWS_AS(chrome_trace(g, p), Error);
}
