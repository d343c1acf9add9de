// Tests of the pool allocator: splitting, coalescing, misuse errors, and a randomized run against a shadow model.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <random>

#include "runtime_allocator/pool.hpp"

using namespace memplan;
using namespace memplan::runtime;

namespace {
bool aligned(const std::byte* p, std::uint64_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; }

void check_recount(const PoolAllocator& pool) {
  const PoolStats want = pool.recount(), got = pool.stats();
  CHECK(got.in_use_bytes == want.in_use_bytes);
  CHECK(got.reserved_bytes == want.reserved_bytes);
  CHECK(got.free_bytes == want.free_bytes);
  CHECK(got.largest_free_bytes == want.largest_free_bytes);
  CHECK(got.live_allocations == want.live_allocations);
}

ErrorKind kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::usage;  // "nothing thrown" marker: no test expects usage
}
}  // namespace

TEST_CASE("freed neighbours coalesce back into one free block") {
  HostBackend backend;
  PoolAllocator pool(backend, {.chunk_bytes = 1 << 20, .max_bytes = 0, .grow = false});
  const std::uint64_t whole = pool.stats().largest_free_bytes;
  CHECK(whole == 1 << 20);
  std::byte* a = pool.allocate(100000);
  std::byte* b = pool.allocate(200000);
  std::byte* c = pool.allocate(300000);
  CHECK(b >= a + 100000);
  CHECK(c >= b + 200000);
  pool.deallocate(b);
  CHECK(pool.stats().fragmentation() > 0.0);  // a hole between a and c, plus the tail
  pool.deallocate(a);
  pool.deallocate(c);
  CHECK(pool.stats().largest_free_bytes == whole);
  CHECK(pool.stats().fragmentation() == 0.0);
  CHECK(pool.stats().in_use_bytes == 0);
  check_recount(pool);
}

TEST_CASE("best fit takes the smallest hole that fits") {
  HostBackend backend;
  PoolAllocator pool(backend, {.chunk_bytes = 1 << 20, .max_bytes = 0, .grow = false});
  std::vector<std::byte*> v;
  for (std::uint64_t n : {4096, 1024, 8192, 2048, 65536}) v.push_back(pool.allocate(n));  // separators between holes
  std::byte* sep1 = pool.allocate(1024);
  (void)sep1;
  pool.deallocate(v[0]);  // hole of 4096
  pool.deallocate(v[2]);  // hole of 8192
  std::byte* p = pool.allocate(3000);
  CHECK(p == v[0]);  // 4096 is the best fit, not 8192 nor the tail
  check_recount(pool);
}

TEST_CASE("alignment requests are honoured for small and large sizes") {
  HostBackend backend;
  PoolAllocator pool(backend);
  for (std::uint64_t a : {1, 2, 8, 16, 32, 64, 128, 256, 1024, 4096})
    for (std::uint64_t n : {1, 24, 500, 5000, 70000}) {
      std::byte* p = pool.allocate(n, a);
      CHECK(aligned(p, a));
      CHECK(pool.block_size(p) >= n);
    }
  check_recount(pool);
  CHECK(kind_of([&] { pool.allocate(10, 3); }) == ErrorKind::runtime);
}

TEST_CASE("double free, foreign and interior pointers are runtime errors, never undefined behaviour") {
  HostBackend backend;
  PoolAllocator pool(backend);
  std::byte* small = pool.allocate(32);
  std::byte* large = pool.allocate(10000);
  int on_stack = 0;
  CHECK(kind_of([&] { pool.deallocate(reinterpret_cast<std::byte*>(&on_stack)); }) == ErrorKind::runtime);
  CHECK(kind_of([&] { pool.deallocate(large + 64); }) == ErrorKind::runtime);
  CHECK(kind_of([&] { pool.deallocate(small + 8); }) == ErrorKind::runtime);
  pool.deallocate(small);
  pool.deallocate(large);
  CHECK(kind_of([&] { pool.deallocate(small); }) == ErrorKind::runtime);
  CHECK(kind_of([&] { pool.deallocate(large); }) == ErrorKind::runtime);
  CHECK(kind_of([&] { pool.block_size(large); }) == ErrorKind::runtime);
  check_recount(pool);
}

TEST_CASE("exhaustion is a runtime error naming the request - the pool stays usable") {
  HostBackend backend;
  PoolAllocator pool(backend, {.chunk_bytes = 1 << 16, .max_bytes = 1 << 18, .grow = true});
  std::vector<std::byte*> held;
  for (int i = 0; i < 3; ++i) held.push_back(pool.allocate(60000));
  try {
    pool.allocate(200000);
    FAIL("no exhaustion error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::runtime);
    CHECK(std::string(e.what()).find("200000") != std::string::npos);
  }
  CHECK(pool.stats().reserved_bytes <= (1u << 18));
  const std::uint64_t reserved = pool.stats().reserved_bytes;
  for (auto* p : held) pool.deallocate(p);
  for (int i = 0; i < 3; ++i) CHECK(pool.allocate(65000) != nullptr);  // each chunk coalesced back whole
  CHECK(pool.stats().reserved_bytes == reserved);
  check_recount(pool);
}

TEST_CASE("a capped backend turns into a pool error, not a crash") {
  HostBackend backend(1 << 20);
  PoolAllocator pool(backend, {.chunk_bytes = 1 << 19, .max_bytes = 0, .grow = true});
  pool.allocate(400000);
  pool.allocate(400000);
  CHECK(kind_of([&] { pool.allocate(400000); }) == ErrorKind::runtime);
}

TEST_CASE("randomized allocate/free against a shadow model: no overlap, alignment, stats") {
  const unsigned seed = 20261123;
  std::printf("pool randomized test seed %u\n", seed);
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  HostBackend backend;
  PoolAllocator pool(backend, {.chunk_bytes = 4 << 20, .max_bytes = 256 << 20, .grow = true});
  struct Live {
    std::uint64_t size;
    std::uint8_t fill;
  };
  std::map<std::uintptr_t, Live> live;  // the shadow model
  std::vector<std::byte*> order;        // for uniform random choice of a victim
  const int ops = 2'000'000;
  std::uint64_t requested = 0, failures = 0;
  for (int i = 0; i < ops; ++i) {
    const bool do_alloc = order.empty() || (order.size() < 4000 && rng() % 100 < 52);
    if (do_alloc) {
      const std::uint64_t r = rng() % 100;
      const std::uint64_t size = r < 70 ? 1 + rng() % 512 : (r < 97 ? 513 + rng() % 65536 : 65536 + rng() % (2 << 20));
      const std::uint64_t align = std::uint64_t{1} << (rng() % 9);
      std::byte* p = pool.allocate(size, align);
      const auto a = reinterpret_cast<std::uintptr_t>(p);
      if (a % align != 0) FAIL("misaligned block at op " << i);
      auto next = live.lower_bound(a);
      if (next != live.end() && next->first < a + size) FAIL("overlap with the next live block at op " << i);
      if (next != live.begin() && std::prev(next)->first + std::prev(next)->second.size > a)
        FAIL("overlap with the previous live block at op " << i);
      const auto fill = static_cast<std::uint8_t>(rng());
      std::memset(p, fill, std::min<std::uint64_t>(size, 64));
      std::memset(p + size - std::min<std::uint64_t>(size, 64), fill, std::min<std::uint64_t>(size, 64));
      live[a] = {size, fill};
      order.push_back(p);
      requested += size;
    } else {
      const std::size_t k = rng() % order.size();
      std::byte* p = order[k];
      order[k] = order.back();
      order.pop_back();
      const Live l = live.at(reinterpret_cast<std::uintptr_t>(p));
      // Another block written over this one would have changed its first or last bytes.
      for (std::uint64_t b : {std::uint64_t{0}, l.size - 1})
        if (static_cast<std::uint8_t>(p[b]) != l.fill) ++failures;
      live.erase(reinterpret_cast<std::uintptr_t>(p));
      requested -= l.size;
      pool.deallocate(p);
    }
    if (i % 100000 == 0) {
      check_recount(pool);
      CHECK(pool.stats().live_allocations == live.size());
      CHECK(pool.stats().in_use_bytes >= requested);
      CHECK(pool.stats().in_use_bytes <= pool.stats().reserved_bytes);
    }
  }
  CHECK(failures == 0);
  for (auto* p : order) pool.deallocate(p);
  CHECK(pool.stats().in_use_bytes == 0);
  CHECK(pool.stats().live_allocations == 0);
  check_recount(pool);
}
