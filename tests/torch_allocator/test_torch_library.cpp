// GPU test of libmemplan_torch.so through dlopen: a replayed step's blocks hold their data (no overlap).
// Exits with 77 (ctest: skipped) where memplan was built without CUDA or no device is present.
#include <doctest/doctest.h>

#include <cstdlib>

#ifdef MEMPLAN_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <sys/types.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

struct Library {
  void* handle = nullptr;
  void* (*malloc_fn)(ssize_t, int, cudaStream_t) = nullptr;
  void (*free_fn)(void*, ssize_t, int, cudaStream_t) = nullptr;
  int (*configure)(int, int) = nullptr;
  void (*step_begin)() = nullptr;
  void (*step_end)() = nullptr;
  size_t (*stats_json)(char*, size_t) = nullptr;
  int (*save_trace)(const char*) = nullptr;
  const char* (*last_error)() = nullptr;

  Library() {
    // $MEMPLAN_TORCH_LIB (the library carried to another machine), else the build's own.
    const char* env = std::getenv("MEMPLAN_TORCH_LIB");
    handle = dlopen(env && *env ? env : MEMPLAN_BINARY_DIR "/libmemplan_torch.so", RTLD_NOW | RTLD_LOCAL);
    REQUIRE_MESSAGE(handle != nullptr, dlerror());
    load(malloc_fn, "memplan_malloc");
    load(free_fn, "memplan_free");
    load(configure, "memplan_configure");
    load(step_begin, "memplan_step_begin");
    load(step_end, "memplan_step_end");
    load(stats_json, "memplan_stats_json");
    load(save_trace, "memplan_save_trace");
    load(last_error, "memplan_last_error");
  }
  template <class F> void load(F& f, const char* name) {
    void* sym = dlsym(handle, name);
    REQUIRE_MESSAGE(sym != nullptr, name);
    f = reinterpret_cast<F>(sym);
  }
  nlohmann::json stats() const {
    std::string buf(stats_json(nullptr, 0), '\0');
    stats_json(buf.data(), buf.size());
    return nlohmann::json::parse(buf.c_str());
  }
};

void require_device() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) std::exit(77);
}

// Each block is filled with its own byte on the stream, then every live block is read back: a block
// that shared bytes with another live one would hold the other's value.
struct Step {
  Library& lib;
  cudaStream_t stream;
  std::vector<std::pair<void*, std::pair<ssize_t, int>>> live;
  int next_tag = 1;
  int bad = 0;

  void* alloc(ssize_t bytes) {
    void* p = lib.malloc_fn(bytes, 0, stream);
    REQUIRE_MESSAGE(p != nullptr, lib.last_error());
    const int tag = next_tag++ % 251 + 1;
    REQUIRE(cudaMemsetAsync(p, tag, static_cast<size_t>(bytes), stream) == cudaSuccess);
    live.push_back({p, {bytes, tag}});
    return p;
  }
  void check_all() {
    for (auto& [p, info] : live) {
      std::vector<unsigned char> host(static_cast<size_t>(info.first));
      REQUIRE(cudaMemcpyAsync(host.data(), p, host.size(), cudaMemcpyDeviceToHost, stream) == cudaSuccess);
      REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
      for (unsigned char c : host)
        if (c != info.second) {
          ++bad;
          break;
        }
    }
  }
  void release(void* p) {
    for (auto it = live.begin(); it != live.end(); ++it)
      if (it->first == p) {
        lib.free_fn(p, it->second.first, 0, stream);
        live.erase(it);
        return;
      }
    FAIL("freeing a block the step does not hold");
  }
  void run(ssize_t batch) {
    lib.step_begin();
    std::vector<void*> acts;
    for (int l = 0; l < 8; ++l) {
      acts.push_back(alloc(batch * 4096 * (l % 3 + 1)));
      void* tmp = alloc(batch * 1000 + 77);
      check_all();
      release(tmp);
    }
    for (int l = 8; l-- > 0;) {
      void* dx = alloc(batch * 4096);
      check_all();
      release(acts[static_cast<size_t>(l)]);
      release(dx);
    }
    lib.step_end();
  }
};

}  // namespace

TEST_CASE("libmemplan_torch.so replays a planned step on the GPU with every block's data intact") {
  require_device();
  Library lib;
  CHECK(lib.configure(1, 2) == 0);
  CHECK(lib.configure(0, 2) != 0);
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  Step step{lib, stream, {}};
  for (int s = 0; s < 4; ++s) step.run(64);
  step.run(40);  // a short batch: misses go to the pool
  step.run(64);
  CHECK(step.bad == 0);
  const nlohmann::json st = lib.stats();
  REQUIRE(st["devices"].size() == 1);
  const auto& d = st["devices"][0];
  CHECK(d["hits"].get<int>() > 0);
  CHECK(d["misses"].get<int>() > 0);
  CHECK(d["plans"].get<int>() == 1);
  CHECK(d["arena_bytes"].get<std::uint64_t>() > 0);
  CHECK(lib.configure(1, 2) != 0);  // too late once allocations were made
  // A temporary directory: the build tree may be elsewhere, or read-only, where the test runs.
  const std::string path =
      (std::filesystem::temp_directory_path() / ("memplan_test_torch_library." + std::to_string(getpid()) + ".trace.json")).string();
  REQUIRE_MESSAGE(lib.save_trace(path.c_str()) == 0, lib.last_error());
  std::ifstream in(path);
  const nlohmann::json trace = nlohmann::json::parse(in);
  CHECK(trace["format"] == "memplan-allocation-trace");
  CHECK(trace["arena_bytes"] == d["arena_bytes"]);
  std::filesystem::remove(path);
  cudaStreamDestroy(stream);
}

#else
TEST_CASE("libmemplan_torch.so replays a planned step on the GPU with every block's data intact") { std::exit(77); }
#endif
