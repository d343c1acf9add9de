// Pool allocator latency against malloc/free on the same operation sequences, side by side in one run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime_allocator/pool.hpp"

using namespace memplan;
using namespace memplan::runtime;

namespace {

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

// One operation: allocate `size` into slot `slot`, or free what slot `slot` holds.
struct Step {
  bool alloc;
  std::uint32_t slot;
  std::uint64_t size;
};

struct Workload {
  const char* name;
  std::vector<Step> steps;
  std::size_t slots;
};

// A window of `live` slots; each step frees a random slot if it is full and refills it.
Workload make(const char* name, std::size_t ops, std::size_t live, std::uint64_t lo, std::uint64_t hi, unsigned seed) {
  std::mt19937_64 rng(seed);
  Workload w{name, {}, live};
  std::vector<bool> full(live, false);
  w.steps.reserve(ops);
  while (w.steps.size() < ops) {
    const auto s = static_cast<std::uint32_t>(rng() % live);
    if (full[s]) w.steps.push_back({false, s, 0});
    w.steps.push_back({true, s, lo + rng() % (hi - lo + 1)});
    full[s] = true;
  }
  for (std::uint32_t s = 0; s < live; ++s)
    if (full[s]) w.steps.push_back({false, s, 0});
  return w;
}

template <class Alloc, class Free>
double ns_per_op(const Workload& w, Alloc alloc, Free release, int repeats) {
  std::vector<void*> slot(w.slots, nullptr);
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (const Step& s : w.steps) {
      if (s.alloc) {
        slot[s.slot] = alloc(s.size);
        static_cast<char*>(slot[s.slot])[0] = 1;  // keep the call from being optimised away
      } else {
        release(slot[s.slot]);
      }
    }
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, ns / static_cast<double>(w.steps.size()));
  }
  return best;
}

}  // namespace

int main() {
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::printf("bench_pool: PoolAllocator vs malloc/free, same operation sequences (best of 5 runs)\n");
  std::printf("machine: %s, %u hardware threads (shared with other work: expect noise); %s\n\n", cpu_name().c_str(),
              std::thread::hardware_concurrency(), date);
  const std::vector<Workload> loads = {
      make("small fixed 64 B, 1 live", 2'000'000, 1, 64, 64, 1),
      make("small 8-512 B, 1024 live", 2'000'000, 1024, 8, 512, 2),
      make("medium 1-64 KiB, 256 live", 1'000'000, 256, 1024, 65536, 3),
      make("large 64 KiB-4 MiB, 32 live", 200'000, 32, 65536, 4u << 20, 4),
      make("mixed 8 B-1 MiB, 4096 live", 1'000'000, 4096, 8, 1u << 20, 5),
  };
  std::printf("%-30s %12s %12s %14s %12s %10s\n", "workload", "pool ns/op", "malloc ns/op", "malloc / pool", "pool peak", "frag");
  std::string json = "[";
  for (const auto& w : loads) {
    HostBackend backend;
    PoolAllocator pool(backend, {.chunk_bytes = 64ull << 20, .max_bytes = 0, .grow = true});
    const double p = ns_per_op(w, [&](std::uint64_t n) { return static_cast<void*>(pool.allocate(n)); },
                               [&](void* q) { pool.deallocate(static_cast<std::byte*>(q)); }, 5);
    const double m = ns_per_op(w, [](std::uint64_t n) { return std::malloc(n); }, [](void* q) { std::free(q); }, 5);
    const auto& st = pool.stats();
    std::printf("%-30s %12.1f %12.1f %14.2f %9.1f MiB %10.3f\n", w.name, p, m, m / p,
                static_cast<double>(st.peak_in_use_bytes) / (1 << 20), st.fragmentation());
    json += std::string(json.size() > 1 ? "," : "") + "{\"workload\":\"" + w.name + "\",\"pool_ns\":" + std::to_string(p) +
            ",\"malloc_ns\":" + std::to_string(m) + ",\"ops\":" + std::to_string(w.steps.size()) + "}";
  }
  std::printf("\nJSON %s]\n", (json).c_str());
  return 0;
}
