// Replays a captured PyTorch allocation sequence (bench/torch_alloc_capture.py) through the planned allocator
// on a host stand-in for the device: what memplan would reserve beside the bytes PyTorch had allocated.
//
// usage: bench_torch_replay CAPTURE.json [record_steps ...] [--trace=PREFIX]   (default: 1 2)
// --trace=PREFIX writes each run's planned step as a trace file PREFIX.rN.json (N: record_steps), for
// `memplan viz --trace`.
// The capture: {"events": [[time_ns, ptr, bytes], ...] (bytes < 0: a free), "steps": [[begin_ns, end_ns], ...]}.
// Events before the first step are setup (weights); each step's events run between step_begin and step_end.
// Prints one JSON line per record_steps: max_allocated_bytes (the most bytes live, each rounded to 512, as
// PyTorch's max_allocated counts them), memplan's peak_device_bytes, and the allocator's statistics.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <unordered_map>

#include "analysis/error.hpp"
#include "analysis/json_read.hpp"
#include "torch_allocator/planned_allocator.hpp"
#include "torch_allocator/trace.hpp"

using namespace memplan::torch_allocator;

namespace {
class HostDevice final : public DeviceMemory {
 public:
  void* allocate(std::uint64_t bytes) override {
    void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);  // never touched: the pages stay virtual
    if (!p) memplan::fail(memplan::ErrorKind::runtime, "host device: out of memory");
    return p;
  }
  void deallocate(void* p, std::uint64_t) noexcept override { std::free(p); }
  Event record_event(StreamId) override { return 0; }
  bool event_done(Event) override { return true; }
  void destroy_event(Event) noexcept override {}
};

struct Capture {
  std::vector<std::tuple<std::int64_t, std::uint64_t, std::int64_t>> events;
  std::vector<std::pair<std::int64_t, std::int64_t>> steps;
};

nlohmann::json replay(const Capture& c, int record_steps, const std::string& trace_prefix) {
  HostDevice dev;
  AllocatorOptions o;
  o.record_steps = record_steps;
  PlannedAllocator a(dev, o);
  std::unordered_map<std::uint64_t, std::pair<void*, std::uint64_t>> live;  // captured ptr -> ours, bytes
  std::uint64_t allocated = 0, max_allocated = 0;
  std::size_t step = 0;
  bool in_step = false;
  for (const auto& [t, ptr, bytes] : c.events) {
    while (in_step && t > c.steps[step].second) a.step_end(), in_step = false, ++step;
    if (!in_step && step < c.steps.size() && t >= c.steps[step].first) a.step_begin(), in_step = true;
    if (bytes > 0) {
      void* p = a.allocate(static_cast<std::uint64_t>(bytes), 0);
      live[ptr] = {p, round_block(static_cast<std::uint64_t>(bytes))};
      allocated += round_block(static_cast<std::uint64_t>(bytes));
      max_allocated = std::max(max_allocated, allocated);
    } else {
      auto it = live.find(ptr);
      if (it == live.end()) continue;  // allocated before the capture began
      a.deallocate(it->second.first, 0);
      allocated -= it->second.second;
      live.erase(it);
    }
  }
  if (in_step) a.step_end();
  nlohmann::json j = stats_json(a.stats());
  j["record_steps"] = record_steps;
  j["max_allocated_bytes"] = max_allocated;
  if (const auto planned = a.planned_step(); planned && !trace_prefix.empty())
    std::ofstream(trace_prefix + ".r" + std::to_string(record_steps) + ".json") << trace_json(make_trace(planned->first, planned->second, 0)).dump();
  for (const auto& [ptr, b] : live) a.deallocate(b.first, 0);
  return j;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: bench_torch_replay CAPTURE.json [record_steps ...]\n";
    return 2;
  }
  try {
    const nlohmann::json j = memplan::analysis::read_json_file(argv[1], "allocation capture");
    Capture c;
    for (const auto& e : j.at("events")) c.events.emplace_back(e[0].get<std::int64_t>(), e[1].get<std::uint64_t>(), e[2].get<std::int64_t>());
    for (const auto& s : j.at("steps")) c.steps.emplace_back(s[0].get<std::int64_t>(), s[1].get<std::int64_t>());
    std::vector<int> counts;
    std::string trace_prefix;
    for (int i = 2; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg.rfind("--trace=", 0) == 0)
        trace_prefix = arg.substr(8);
      else
        counts.push_back(std::atoi(argv[i]));
    }
    if (counts.empty()) counts = {1, 2};
    for (int r : counts) std::cout << replay(c, r, trace_prefix).dump() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "bench_torch_replay: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
