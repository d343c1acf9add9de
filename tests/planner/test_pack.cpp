// Tests of the arena packers: disjoint placement of overlapping lifetimes, known optima, "best".
#include <doctest/doctest.h>

#include <random>

#include "planner/assign.hpp"
#include "planner/pack.hpp"
#include "tests/planner/planner_fixtures.hpp"

using namespace memplan;
using namespace memplan::planner;

namespace {

std::vector<PackItem> random_items(std::uint32_t seed, std::size_t n, std::uint32_t steps) {
  std::mt19937 rng(seed);
  std::vector<PackItem> items(n);
  for (auto& it : items) {
    it.size = 64 * (1 + rng() % 64);
    it.interval.first = static_cast<std::uint32_t>(rng() % steps);
    it.interval.last = std::min(steps - 1, it.interval.first + static_cast<std::uint32_t>(rng() % 12));
  }
  return items;
}

std::uint64_t max_live(const std::vector<PackItem>& items, std::uint32_t steps) {
  std::uint64_t best = 0;
  for (std::uint32_t s = 0; s < steps; ++s) {
    std::uint64_t live = 0;
    for (const auto& it : items)
      if (it.interval.first <= s && s <= it.interval.last) live += it.size;
    best = std::max(best, live);
  }
  return best;
}

}  // namespace

TEST_CASE("every packer keeps buffers that live at a common step apart in bytes") {
  for (std::uint32_t seed = 1; seed <= 60; ++seed) {
    const std::uint32_t steps = 40;
    const auto items = random_items(seed, 80, steps);
    const std::uint64_t bound = max_live(items, steps);
    for (const auto& name : packer_names()) {
      INFO("seed " << seed << " packer " << name);
      const Packing p = pack(name, items, steps);
      REQUIRE(p.offsets.size() == items.size());
      CHECK(p.arena_bytes >= bound);
      for (std::size_t i = 0; i < items.size(); ++i) {
        CHECK(p.offsets[i] % 64 == 0);
        CHECK(p.offsets[i] + items[i].size <= p.arena_bytes);
        for (std::size_t j = i + 1; j < items.size(); ++j) {
          if (!items[i].interval.overlaps(items[j].interval)) continue;
          const bool apart = p.offsets[i] + items[i].size <= p.offsets[j] || p.offsets[j] + items[j].size <= p.offsets[i];
          CHECK(apart);
        }
      }
    }
  }
}

TEST_CASE("packers reach the optimum on a staircase of equal buffers") {
  // Buffers live at steps [i, i+1]: any two neighbours overlap, so two slots are optimal.
  std::vector<PackItem> items;
  for (std::uint32_t i = 0; i < 10; ++i) items.push_back(PackItem{512, {i, i + 1}});
  for (const auto& name : packer_names()) {
    INFO(name);
    CHECK(pack(name, items, 11).arena_bytes == 1024);
  }
}

TEST_CASE("a buffer born after a dead one reuses its bytes under a longer-lived one") {
  // B [0,3] is largest and goes to 0; A [0,1] above it; C [2,3] takes A's bytes once A is dead;
  // E [0,0] lives beside A and B. Step 0 holds 2304 bytes: the bound is met.
  std::vector<PackItem> items = {{1024, {0, 1}}, {1024, {0, 3}}, {1024, {2, 3}}, {256, {0, 0}}};
  for (const auto& name : packer_names()) {
    INFO(name);
    const Packing p = pack(name, items, 4);
    CHECK(p.arena_bytes == 2048 + 256);
    CHECK(p.offsets[0] == p.offsets[2]);
  }
}

TEST_CASE("the best packer keeps the smallest arena, ties going to the first name") {
  for (std::uint32_t seed = 1; seed <= 20; ++seed) {
    testing::GraphBuilder b;
    std::mt19937 rng(seed);
    TensorId prev = b.input("x", 100);
    std::vector<TensorId> all;
    for (int i = 0; i < 30; ++i) {
      const TensorId t = b.act("t" + std::to_string(i), 64 + static_cast<std::int64_t>(rng() % 4000));
      std::vector<TensorId> ins = {prev};
      if (!all.empty() && rng() % 3 == 0) ins.push_back(all[rng() % all.size()]);
      b.op("Conv", ins, {t});
      all.push_back(t);
      prev = t;
    }
    b.output(prev);
    AssignOptions greedy_only;  // the greedy packers alone: the exact packer may improve on any of them
    greedy_only.exact_pack_seconds = 0.0;
    const Plan best = testing::plan_checked(b.g, greedy_only);
    std::uint64_t smallest = UINT64_MAX;
    std::string first;
    for (const auto& name : packer_names()) {
      AssignOptions o = greedy_only;
      o.packer = name;
      const Plan p = testing::plan_checked(b.g, o);
      CHECK(p.packer == name);
      if (p.arena_bytes < smallest) {
        smallest = p.arena_bytes;
        first = name;
      }
    }
    CHECK(best.arena_bytes == smallest);
    CHECK(best.packer == first);
  }
}

TEST_CASE("an unknown packer name is a usage error") {
  try {
    pack("tetris", {}, 1);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
  }
}

TEST_CASE("overlapping_pairs counts the pairs of lifetimes that share a step") {
  for (std::uint32_t seed = 1; seed <= 20; ++seed) {
    const auto items = random_items(seed, 120, 50);
    std::uint64_t pairs = 0;
    for (std::size_t i = 0; i < items.size(); ++i)
      for (std::size_t j = i + 1; j < items.size(); ++j) pairs += items[i].interval.overlaps(items[j].interval) ? 1 : 0;
    CHECK(overlapping_pairs(items) == pairs);
  }
}

TEST_CASE("the sweep meets the live-bytes bound where lifetimes nest like a training step's") {
  // Forward: activation i is born at step i and lives until its backward step 2n-1-i, with a short-lived
  // temporary beside it; nested lifetimes are a stack, which the sweep packs without a gap.
  for (std::uint32_t seed = 1; seed <= 10; ++seed) {
    std::mt19937 rng(seed);
    const std::uint32_t n = 200, steps = 2 * n;
    std::vector<PackItem> items;
    for (std::uint32_t i = 0; i < n; ++i) {
      items.push_back(PackItem{256 * (1 + rng() % 16), {i, steps - 1 - i}});
      items.push_back(PackItem{256 * (1 + rng() % 16), {i, i}});
    }
    INFO("seed " << seed);
    CHECK(pack("sweep", items, steps).arena_bytes == max_live(items, steps));
  }
}

TEST_CASE("the best choice runs the sweep alone when the placing packers would be quadratic") {
  // A chain whose every tensor is a graph output: each lives to the end, so all n(n-1)/2 pairs overlap.
  const std::uint32_t n = 6400;
  testing::GraphBuilder b;
  TensorId prev = b.input("x", 64);
  for (std::uint32_t i = 0; i < n; ++i) {
    const TensorId t = b.act("t" + std::to_string(i), 64);
    b.op("Relu", {prev}, {t});
    b.output(prev = t);
  }
  REQUIRE(std::uint64_t{n} * (n - 1) / 2 > kMaxPlacingPairs);
  const Plan p = testing::plan_checked(b.g);
  CHECK(p.packer == "sweep");
  CHECK(p.arena_bytes == std::uint64_t{n} * 256);
}
