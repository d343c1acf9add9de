// libmemplan_torch.so: the C functions torch.cuda.memory.CUDAPluggableAllocator and memplan_torch call.
#include <cuda_runtime_api.h>
#include <sys/types.h>

#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "analysis/error.hpp"
#include "torch_allocator/cuda/cuda_device.hpp"
#include "torch_allocator/planned_allocator.hpp"
#include "torch_allocator/trace.hpp"

namespace {
using memplan::torch_allocator::AllocatorOptions;
using memplan::torch_allocator::CudaDevice;
using memplan::torch_allocator::PlannedAllocator;

// One allocator per device index, made on the device's first allocation.
struct DeviceState {
  explicit DeviceState(int device, const AllocatorOptions& o) : memory(device), allocator(memory, o) {}
  CudaDevice memory;
  PlannedAllocator allocator;
};

struct Library {
  std::mutex mutex;  // guards the map, the options and the step flag; each allocator has its own lock
  AllocatorOptions options;
  bool used = false;
  bool in_step = false;
  std::map<int, std::unique_ptr<DeviceState>> devices;
  std::mutex error_mutex;
  std::string last_error;
};

Library& lib() {
  static Library* l = new Library;  // never destroyed: PyTorch may free blocks during interpreter exit
  return *l;
}

void set_error(const std::string& e) {
  std::lock_guard<std::mutex> lock(lib().error_mutex);
  lib().last_error = e;
}

template <class F> int guarded(F&& f) {
  try {
    f();
    return 0;
  } catch (const memplan::Error& e) {
    set_error(e.what());
    return static_cast<int>(e.kind());
  } catch (const std::exception& e) {
    set_error(e.what());
    return static_cast<int>(memplan::ErrorKind::runtime);
  }
}

PlannedAllocator* allocator_of(int device, bool create) {
  Library& l = lib();
  std::lock_guard<std::mutex> lock(l.mutex);
  auto it = l.devices.find(device);
  if (it != l.devices.end()) return &it->second->allocator;
  if (!create) return nullptr;
  l.used = true;
  auto state = std::make_unique<DeviceState>(device, l.options);
  if (l.in_step) state->allocator.step_begin();
  return &l.devices.emplace(device, std::move(state)).first->second->allocator;
}

std::vector<PlannedAllocator*> all_allocators() {
  std::vector<PlannedAllocator*> out;
  for (auto& [d, s] : lib().devices) out.push_back(&s->allocator);
  return out;
}
// Every device's allocator begins (or ends) a step; one made later inside a step begins it then.
void mark_step(bool begin) {
  guarded([begin] {
    Library& l = lib();
    std::lock_guard<std::mutex> lock(l.mutex);
    l.in_step = begin;
    for (auto* a : all_allocators()) begin ? a->step_begin() : a->step_end();
  });
}
}  // namespace

extern "C" {

void* memplan_malloc(ssize_t size, int device, cudaStream_t stream) {
  void* p = nullptr;
  guarded([&] {
    if (size < 0) memplan::fail(memplan::ErrorKind::usage, "memplan_malloc: negative size " + std::to_string(size));
    p = allocator_of(device, true)->allocate(static_cast<std::uint64_t>(size), reinterpret_cast<std::uintptr_t>(stream));
  });
  return p;
}

void memplan_free(void* ptr, ssize_t /*size*/, int device, cudaStream_t stream) {
  guarded([&] {
    PlannedAllocator* a = allocator_of(device, false);
    if (!a) memplan::fail(memplan::ErrorKind::usage, "memplan_free: no allocation was ever made on device " + std::to_string(device));
    a->deallocate(ptr, reinterpret_cast<std::uintptr_t>(stream));
  });
}

int memplan_configure(int record_steps, int replan_after_miss_steps) {
  return guarded([&] {
    Library& l = lib();
    std::lock_guard<std::mutex> lock(l.mutex);
    if (l.used) memplan::fail(memplan::ErrorKind::usage, "memplan_configure: called after the first allocation");
    if (record_steps < 1 || replan_after_miss_steps < 1)
      memplan::fail(memplan::ErrorKind::usage, "memplan_configure: record_steps and replan_after_miss_steps must be at least 1");
    l.options.record_steps = record_steps;
    l.options.replan_after_miss_steps = replan_after_miss_steps;
  });
}

void memplan_step_begin(void) { mark_step(true); }

void memplan_step_end(void) { mark_step(false); }

size_t memplan_stats_json(char* buf, size_t len) {
  std::string text;
  guarded([&] {
    Library& l = lib();
    std::lock_guard<std::mutex> lock(l.mutex);
    nlohmann::json devices = nlohmann::json::array();
    for (auto& [d, s] : l.devices) {
      nlohmann::json one = memplan::torch_allocator::stats_json(s->allocator.stats());
      one["device"] = d;
      devices.push_back(std::move(one));
    }
    text = nlohmann::json{{"record_steps", l.options.record_steps},
                          {"replan_after_miss_steps", l.options.replan_after_miss_steps},
                          {"devices", std::move(devices)}}
               .dump();
  });
  if (buf && len > 0) {
    const std::size_t n = std::min(len - 1, text.size());
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return text.size() + 1;
}

int memplan_save_trace(const char* path) {
  return guarded([&] {
    if (!path) memplan::fail(memplan::ErrorKind::usage, "memplan_save_trace: no path");
    Library& l = lib();
    std::lock_guard<std::mutex> lock(l.mutex);
    for (auto& [d, s] : l.devices) {  // the lowest device with a plan
      const auto planned = s->allocator.planned_step();
      if (!planned) continue;
      std::ofstream out(path);
      out << memplan::torch_allocator::trace_json(memplan::torch_allocator::make_trace(planned->first, planned->second, d)).dump(1) << "\n";
      if (!out) memplan::fail(memplan::ErrorKind::io, std::string("memplan_save_trace: cannot write ") + path);
      return;
    }
    memplan::fail(memplan::ErrorKind::usage, "memplan_save_trace: no step has been recorded and planned yet");
  });
}

const char* memplan_last_error(void) {
  thread_local std::string copy;
  std::lock_guard<std::mutex> lock(lib().error_mutex);
  copy = lib().last_error;
  return copy.c_str();
}

}  // extern "C"
