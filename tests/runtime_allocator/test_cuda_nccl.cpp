// GPU tests of data-parallel training through NCCL: a one-rank communicator changes no bit of a training step (with
// ZeRO-1/2 neither), and two processes (one GPU each, `memplan train --gpus 2`) average to the single-GPU
// gradients of the combined batch, and train with ZeRO-1 as with the all-reduce. Exit 77 (skipped) without a device
// or without a loadable libnccl.so.2; the two-process cases also without two GPUs.
#include <doctest/doctest.h>

#if defined(MEMPLAN_HAVE_CUDA) && defined(MEMPLAN_HAVE_NCCL)
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime_allocator/cuda/cuda_backend.hpp"
#include "runtime_allocator/collectives/nccl_collectives.hpp"
#include "runtime_allocator/executor.hpp"
#include "runtime_allocator/npy.hpp"
#include "tests/runtime_allocator/cuda_compare.hpp"
#include "tests/runtime_allocator/training_fixture.hpp"

using namespace memplan;
using namespace memplan::runtime;
using namespace memplan::runtime::testing;
using analysis::TensorId;

namespace {

void require_device_and_nccl(int gpus = 1) {
  if (!cuda::cuda_available()) std::exit(77);
  if (!cuda::nccl_available()) {
    std::cerr << "skipped: libnccl.so.2 does not load (LD_LIBRARY_PATH: PyTorch's site-packages/nvidia/nccl/lib)\n";
    std::exit(77);
  }
  if (cuda::cuda_device_count() < gpus) {
    std::cerr << "skipped: " << gpus << " GPUs needed, " << cuda::cuda_device_count() << " visible\n";
    std::exit(77);
  }
}

std::vector<TensorId> gradients_of(const analysis::TrainingGraph& tg) {
  std::vector<TensorId> v;
  for (const auto& pg : tg.param_grads) v.push_back(pg.second);
  return v;
}

// The memplan command beside this test binary (build/ or the GPU machine's .carry/bin/), or MEMPLAN_CLI.
std::string memplan_cli() {
  const char* p = std::getenv("MEMPLAN_CLI");
  const std::string cli = p ? p : (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "memplan").string();
  REQUIRE_MESSAGE(std::filesystem::exists(cli), "no memplan command at " << cli << " (set MEMPLAN_CLI)");
  return cli;
}

// An empty folder of this process under the temporary directory.
std::filesystem::path fresh_dir(const std::string& prefix) {
  const auto dir = std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string transformers_dir() {
  const char* src = std::getenv("MEMPLAN_SOURCE_DIR");
  return std::string(src ? src : MEMPLAN_SOURCE_DIR) + "/samples/transformers/";
}

}  // namespace

TEST_CASE("one-rank NCCL collectives leave the bytes as they are: all-reduce in place, reduce-scatter and all-gather copy") {
  require_device_and_nccl();
  MESSAGE("NCCL version " << cuda::nccl_version());
  cuda::CudaBackend backend;
  cuda::NcclCollectives nccl(backend, 0, 1, cuda::make_nccl_id());
  CHECK(nccl.world_size() == 1);
  std::vector<float> host(4099);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = std::sin(float(i)) * 1e3f + 1e-7f * float(i);
  const std::uint64_t bytes = host.size() * 4;
  DeviceBuffer a(backend, bytes, 256), b(backend, bytes, 256), c(backend, bytes, 256);
  backend.copy_to_device(a.data(), reinterpret_cast<const std::byte*>(host.data()), bytes);
  const Backend::Event ready = backend.create_event(), done = backend.create_event();
  backend.record_on_compute(ready);
  nccl.queue_waits(ready);
  nccl.all_reduce_mean(a.data(), host.size(), analysis::DType::f32);
  nccl.reduce_scatter_mean(a.data(), b.data(), host.size(), analysis::DType::f32);
  nccl.all_gather(b.data(), c.data(), host.size(), analysis::DType::f32);
  nccl.record(done);
  backend.compute_waits(done);
  nccl.synchronize();
  for (const auto* buf : {&a, &b, &c}) {
    std::vector<float> got(host.size());
    backend.copy_to_host(reinterpret_cast<std::byte*>(got.data()), buf->data(), bytes);
    CHECK(std::memcmp(got.data(), host.data(), bytes) == 0);
  }
}

TEST_CASE("a one-rank NCCL communicator gives the single-GPU run's training steps: bit-identical without atomics") {
  require_device_and_nccl();
  // tiny_mlp's kernels are deterministic: bit-identical. tiny_gpt and tiny_cnn sum norm and bias gradients with
  // atomics (run to run the last bits move, with or without NCCL): within 1e-6.
  for (const std::string name : {"tiny_mlp", "tiny_gpt", "tiny_cnn"}) {
    for (auto opt : {analysis::Optimizer::sgd, analysis::Optimizer::adam}) {
      INFO(name << " " << analysis::optimizer_name(opt));
      const auto tg = training(name, opt);
      const auto in = feeds(name, tg.graph);
      const auto r = planner::plan_training(tg, {});
      REQUIRE(r.report.valid);
      cuda::CudaBackend plain_backend, dp_backend;
      cuda::NcclCollectives nccl(dp_backend, 0, 1, cuda::make_nccl_id());
      ExecOptions eo;
      eo.data_parallel = {&nccl, gradients_of(tg), std::uint64_t{1} << 20};
      Executor plain(r.graph, r.plan, plain_backend), dp(r.graph, r.plan, dp_backend, eo);
      CHECK(dp.stats().reduce_calls >= 1);
      const bool exact = name == "tiny_mlp";
      // Adam's first step moves an element whose gradient is near 0 by up to lr on a rounding difference.
      const double weight_tol = opt == analysis::Optimizer::adam ? 2.1e-3 : 1e-5;
      auto diff = [](const analysis::TensorData& got, const analysis::TensorData& want) {
        return max_rel_diff(floats(got.bytes.data(), got.bytes.size()), floats(want.bytes.data(), want.bytes.size()));
      };
      for (int step = 1; step <= (exact ? 2 : 1); ++step) {
        CAPTURE(step);
        const auto want = plain.run(in), got = dp.run(in);
        if (exact)
          CHECK(got[0].bytes == want[0].bytes);
        else
          CHECK(diff(got[0], want[0]) <= 1e-6);
        for (const auto& pg : tg.param_grads) {
          const TensorId w = pg.first, gt = pg.second;  // not bindings: INFO and CHECK capture them (clang 14)
          INFO("weight " << r.graph.tensors[w].name);
          if (exact) {
            CHECK(dp.read(gt).bytes == plain.read(gt).bytes);
            CHECK(dp.read(w).bytes == plain.read(w).bytes);
          } else {
            CHECK(diff(dp.read(gt), plain.read(gt)) <= 1e-5);
            CHECK(diff(dp.read(w), plain.read(w)) <= weight_tol);
          }
        }
      }
      nccl.synchronize();  // no asynchronous NCCL error
    }
  }
}

TEST_CASE("ZeRO-1 and 2 through a one-rank NCCL communicator train as the all-reduce run: sharded updates, gathered weights") {
  require_device_and_nccl();
  for (const std::string name : {"tiny_mlp", "tiny_gpt"}) {
    for (auto opt : {analysis::Optimizer::momentum, analysis::Optimizer::adam}) {
      for (int stage : {1, 2}) {
        INFO(name << " " << analysis::optimizer_name(opt) << " ZeRO-" << stage);
        const auto tg = training(name, opt);
        const auto in = feeds(name, tg.graph);
        const auto r = planner::plan_training(tg, {});
        REQUIRE(r.report.valid);
        cuda::CudaBackend ref_backend, zero_backend;
        cuda::NcclCollectives ref_nccl(ref_backend, 0, 1, cuda::make_nccl_id()), zero_nccl(zero_backend, 0, 1, cuda::make_nccl_id());
        ExecOptions eo;
        eo.data_parallel = {&ref_nccl, gradients_of(tg), std::uint64_t{1} << 20};
        Executor ref(r.graph, r.plan, ref_backend, eo);
        eo.data_parallel.collectives = &zero_nccl;
        eo.data_parallel.zero_stage = stage;
        Executor zero(r.graph, r.plan, zero_backend, eo);
        CHECK(zero.stats().zero.sharded_updates == tg.param_grads.size());
        CHECK(zero.stats().zero.owned_elements == zero.stats().zero.weight_elements);
        const bool exact = name == "tiny_mlp";  // tiny_gpt's norm and bias gradients sum with atomics
        for (int step = 1; step <= 3; ++step) {
          CAPTURE(step);
          const auto want = ref.run(in), got = zero.run(in);
          if (exact) CHECK(got[0].bytes == want[0].bytes);
          else CHECK(max_rel_diff(floats(got[0].bytes.data(), got[0].bytes.size()), floats(want[0].bytes.data(), want[0].bytes.size())) <= 1e-5);
        }
        for (const auto& pg : tg.param_grads) {
          const TensorId w = pg.first;
          INFO("weight " << r.graph.tensors[w].name);
          const auto a = zero.read(w), b = ref.read(w);
          if (exact) CHECK(a.bytes == b.bytes);
          // Adam moves an element whose gradient is near 0 by up to lr per step on a rounding difference.
          else CHECK(max_rel_diff(floats(a.bytes.data(), a.bytes.size()), floats(b.bytes.data(), b.bytes.size())) <=
                     (opt == analysis::Optimizer::adam ? 1e-2 : 1e-4));
        }
        zero_nccl.synchronize();
      }
    }
  }
}

TEST_CASE("two processes with ZeRO-1 (one GPU each) train as the all-reduce pair: the same losses, step for step") {
  require_device_and_nccl(2);
  const std::string model = transformers_dir() + "gpt2_small.train.onnx", cli = memplan_cli();
  const auto dir = fresh_dir("memplan_zero_");
  auto pair = [&](const std::string& zero) {
    const std::string common = " train " + model + " --backend cuda --no-dropout --loss ce --optimizer adam --steps 3 --json "
                               "--dim seq=64 --dim batch=2 --gpus 2 --zero " + zero + " --nccl-id-file " + (dir / ("id" + zero)).string();
    const std::string run = "(" + cli + common + " --rank 0 --device 0 > " + (dir / ("z" + zero + "r0.json")).string() + " & " +
                            cli + common + " --rank 1 --device 1 > " + (dir / ("z" + zero + "r1.json")).string() +
                            "; r1=$?; wait $!; r0=$?; test $r0 -eq 0 -a $r1 -eq 0)";
    REQUIRE(std::system(("bash -c '" + run + "'").c_str()) == 0);
  };
  pair("0");
  pair("1");
  auto losses = [&](const std::string& file) {
    std::ifstream f(dir / file);
    return nlohmann::json::parse(f).at("losses").get<std::vector<double>>();
  };
  for (const std::string r : {"r0", "r1"}) {
    const auto want = losses("z0" + r + ".json"), got = losses("z1" + r + ".json");
    REQUIRE(want.size() == 3);
    REQUIRE(got.size() == 3);
    // The first loss precedes any update; later ones follow Adam steps from gradients summed with atomics.
    for (std::size_t k = 0; k < 3; ++k) CHECK(std::fabs(got[k] - want[k]) <= (k == 0 ? 1e-6 : 1e-3) * std::fabs(want[k]));
  }
  std::ifstream f(dir / "z1r0.json");
  const auto j = nlohmann::json::parse(f);
  // Adam's moments: each rank holds about half of them.
  CHECK(j.at("zero").at("optimizer_state_shard_bytes").get<double>() < 0.51 * j.at("zero").at("optimizer_state_unsharded_bytes").get<double>());
}

TEST_CASE("two processes with one GPU each average to the single-GPU gradients of the combined batch") {
  require_device_and_nccl(2);
  const std::string model = transformers_dir() + "gpt2_small.train.onnx", cli = memplan_cli();
  const auto dir = fresh_dir("memplan_nccl_");
  const std::string common =
      " train " + model + " --backend cuda --no-dropout --loss ce --optimizer adam --steps 2 --json --dim seq=64";
  const std::string one =
      cli + common + " --dim batch=4 --save-grads " + (dir / "one").string() + " > " + (dir / "one.json").string();
  const std::string two = "(" + cli + common + " --dim batch=2 --gpus 2 --rank 0 --device 0 --nccl-id-file " +
                          (dir / "id").string() + " --save-grads " + (dir / "two").string() + " > " + (dir / "r0.json").string() +
                          " & " + cli + common + " --dim batch=2 --gpus 2 --rank 1 --device 1 --nccl-id-file " +
                          (dir / "id").string() + " > " + (dir / "r1.json").string() +
                          "; r1=$?; wait $!; r0=$?; test $r0 -eq 0 -a $r1 -eq 0)";
  REQUIRE(std::system(one.c_str()) == 0);
  REQUIRE(std::system(("bash -c '" + two + "'").c_str()) == 0);
  std::size_t compared = 0;
  for (int k = 0;; ++k) {
    const auto a = dir / "one" / ("grad_" + std::to_string(k) + ".npy"), b = dir / "two" / ("grad_" + std::to_string(k) + ".npy");
    if (!std::filesystem::exists(a)) break;
    REQUIRE(std::filesystem::exists(b));
    const auto want = read_npy(a.string()).as_double(), got = read_npy(b.string()).as_double();
    REQUIRE(want.size() == got.size());
    double worst = 0.0, scale = 0.0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, std::fabs(got[i] - want[i]));
      scale = std::max(scale, std::fabs(want[i]));
    }
    INFO("gradient " << k << ": max |diff| " << worst << " of max |g| " << scale);
    CHECK(worst <= 1e-5 * scale);
    ++compared;
  }
  CHECK(compared > 10);
  MESSAGE(compared << " gradients compared; results in " << dir.string());
}
#endif
