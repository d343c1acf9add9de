// Trace files: written from a planned step, read back the same, refused when inconsistent; the caching model.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "analysis/error.hpp"
#include "planner/verify.hpp"
#include "torch_allocator/caching_model.hpp"
#include "torch_allocator/trace.hpp"
#include "fake_device.hpp"
#include "workload.hpp"

using namespace memplan::torch_allocator;

namespace {
// Two recorded steps (the default): the planned step's gradients are periodic blocks.
Trace recorded_trace() {
  testing::FakeDevice dev;
  PlannedAllocator a(dev);
  testing::LiveBlocks live;
  testing::Workload w{a, live};
  w.step(8);
  w.step(8);
  w.finish();
  const auto planned = a.planned_step();
  REQUIRE(planned);
  return make_trace(planned->first, planned->second, 3);
}
}  // namespace

TEST_CASE("a trace reads back as the step and plan it was written from") {
  const Trace t = recorded_trace();
  const Trace back = read_trace(nlohmann::json::parse(trace_json(t).dump()));
  CHECK(back.device == 3);
  CHECK(back.plan.offsets == t.plan.offsets);
  CHECK(back.plan.arena_bytes == t.plan.arena_bytes);
  CHECK(back.caching_reserved_bytes == t.caching_reserved_bytes);
  REQUIRE(back.step.blocks.size() == t.step.blocks.size());
  for (std::size_t k = 0; k < t.step.blocks.size(); ++k) {
    CHECK(back.step.blocks[k].size == t.step.blocks[k].size);
    CHECK(back.step.blocks[k].free_event == t.step.blocks[k].free_event);
  }
  CHECK(back.step.event_count() == t.step.event_count());
  std::size_t periodic = 0;
  for (std::size_t k = 0; k < t.step.blocks.size(); ++k) {
    CHECK(back.step.blocks[k].next_free_event == t.step.blocks[k].next_free_event);
    CHECK(back.step.periodic(k) == t.step.periodic(k));
    periodic += t.step.periodic(k);
  }
  CHECK(periodic == 6);
  CHECK(back.plan.periodic_bytes == t.plan.periodic_bytes);
  CHECK(back.plan.periodic_bytes > 0);
  // Each periodic block is two buffers (its lifetime pieces) at one offset, and the plan verifies.
  const memplan::analysis::Graph g = step_graph(back.step);
  const memplan::planner::Plan p = step_as_plan(g, back.step, back.plan);
  CHECK(memplan::planner::verify_plan(g, p).valid);
  std::size_t in_arena = 0;
  for (std::size_t k = 0; k < back.step.blocks.size(); ++k) in_arena += back.step.in_arena(k);
  CHECK(p.buffers.size() == in_arena + periodic);
}

TEST_CASE("a trace without the periodic fields reads as before: carried blocks outside the arena") {
  nlohmann::json j = trace_json(recorded_trace());
  j.erase("periodic_bytes");
  for (auto& e : j["events"]) e.erase("earlier_rank");
  for (auto& b : j["blocks"]) {
    b.erase("next_free_event");
    if (b["free_event"].is_null()) b["offset"] = nullptr;
  }
  const Trace t = read_trace(j);
  for (std::size_t k = 0; k < t.step.blocks.size(); ++k) CHECK_FALSE(t.step.periodic(k));
  CHECK(t.plan.periodic_bytes == 0);
}

TEST_CASE("a written trace file draws with memplan viz --trace") {
  // $MEMPLAN_BIN (the binary carried to another machine), else the build's own; skipped where neither is.
  const char* env = std::getenv("MEMPLAN_BIN");
  const std::string memplan = env && *env ? env : MEMPLAN_BINARY_DIR "/memplan";
  if (!std::filesystem::exists(memplan)) {
    MESSAGE("skipped: no memplan binary at " << memplan << " (set MEMPLAN_BIN)");
    return;
  }
  const auto dir = std::filesystem::temp_directory_path();
  const std::string tag = "memplan_test_trace." + std::to_string(getpid());
  const std::string path = (dir / (tag + ".trace.json")).string(), svg = (dir / (tag + ".svg")).string();
  std::ofstream(path) << trace_json(recorded_trace()).dump(1);
  const std::string cmd = "'" + memplan + "' viz --trace '" + path + "' -o '" + svg + "' > /dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream in(svg);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text.find("caching allocator would reserve") != std::string::npos);
  CHECK(text.find("peak live") != std::string::npos);
  CHECK(text.find("6 periodic blocks") != std::string::npos);
  std::filesystem::remove(path);
  std::filesystem::remove(svg);
}

TEST_CASE("an inconsistent trace is refused naming what is wrong") {
  nlohmann::json j = trace_json(recorded_trace());
  auto refused = [](const nlohmann::json& bad) { CHECK_THROWS_AS(read_trace(bad), memplan::Error); };
  nlohmann::json b = j;
  b["events"][0]["block"] = 999;
  refused(b);
  b = j;
  b["blocks"][0]["bytes"] = 1;
  refused(b);
  b = j;
  b["blocks"][1]["free_event"] = 0;
  refused(b);
  b = j;
  b.erase("arena_bytes");
  refused(b);
  b = j;
  b["format"] = "chrome";
  refused(b);
  std::size_t g = 0;  // a periodic block
  while (!j["blocks"][g]["free_event"].is_null()) ++g;
  b = j;
  b["blocks"][g]["next_free_event"] = b["blocks"][g]["alloc_event"];  // disagrees with the events' earlier_rank
  refused(b);
  b = j;
  b["blocks"][g]["offset"] = nullptr;  // a periodic block without an offset
  refused(b);
  b = j;
  b["events"][b["blocks"][0]["alloc_event"].get<std::size_t>()]["earlier_rank"] = 0;  // an allocation has no earlier rank
  refused(b);
  b = j;
  b["periodic_bytes"] = b["arena_bytes"].get<std::uint64_t>() + 1;
  refused(b);
}

TEST_CASE("the caching model rounds small blocks into 2 MiB segments and reuses freed blocks") {
  RecordedStep s;
  auto alloc = [&](std::uint64_t size) {
    s.blocks.push_back(RecordedBlock{size, round_block(size), 0, s.event_count(), kNotFreed});
    s.events.push_back(RecordedEvent{true, static_cast<std::int64_t>(s.blocks.size() - 1), round_block(size)});
  };
  auto release = [&](std::size_t k) {
    s.blocks[k].free_event = s.event_count();
    s.events.push_back(RecordedEvent{false, static_cast<std::int64_t>(k), s.blocks[k].bytes});
  };
  alloc(1000);
  release(0);
  alloc(1000);  // reuses the freed block
  release(1);
  CHECK(caching_allocator_estimate(s).reserved_bytes == 2ull << 20);
  alloc(12ull << 20);  // a large block of its own rounded segment: 12 MiB
  release(2);
  alloc(3ull << 20);  // fits in the freed 12 MiB block
  release(3);
  const CachingEstimate c = caching_allocator_estimate(s);
  CHECK(c.reserved_bytes == (2ull << 20) + (12ull << 20));
  CHECK(c.max_allocated_bytes == 12ull << 20);
}
