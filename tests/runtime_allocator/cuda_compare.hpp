// GPU test helper: a hand-built graph run on the CPU executor and on the CUDA backend, tensors compared.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "planner/inference.hpp"
#include "runtime_allocator/cuda/cuda_backend.hpp"
#include "runtime_allocator/executor.hpp"
#include "tests/runtime_allocator/op_graph.hpp"

namespace memplan::runtime::testing {

inline std::vector<float> floats(const std::byte* p, std::size_t bytes) {
  std::vector<float> f(bytes / 4);
  std::memcpy(f.data(), p, f.size() * 4);
  return f;
}

// Largest |a-b| / max(1, |b|): absolute near zero, relative for large values.
inline double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = a.size() == b.size() ? 0.0 : INFINITY;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]) / std::max(1.0, std::fabs(static_cast<double>(b[i])));
    m = std::isnan(d) ? INFINITY : std::max(m, d);
  }
  return m;
}

// Runs a hand-built graph on the CPU executor (unshared) and on the GPU (its inference plan) with the same feeds, and
// compares the tensors `checked`: float32 ones within `tol` by max_rel_diff, all others byte for byte.
inline void check_against_cpu(const OpGraph& b, const std::vector<analysis::TensorId>& checked, double tol = 1e-5) {
  runtime::HostBackend backend;
  runtime::Executor cpu(b.g, planner::Plan{}, backend, runtime::ExecOptions{.unshared = true});
  cpu.run(b.feeds);
  const auto ip = planner::plan_inference(b.g);
  cuda::CudaBackend gpu_backend;
  runtime::Executor gpu(b.g, ip.plan, gpu_backend);
  std::map<std::string, analysis::TensorData> feed;
  for (std::size_t k = 0; k < b.feeds.size(); ++k)
    feed[b.g.tensors[b.g.inputs[k]].name] = analysis::TensorData{b.feeds[k].dtype, b.feeds[k].dims, b.feeds[k].bytes};
  gpu.run(feed);
  for (analysis::TensorId t : checked) {
    const auto& x = b.g.tensors[t];
    INFO("tensor " << x.name);
    const auto got = gpu.read(t);
    REQUIRE(got.bytes.size() == x.bytes());
    const std::vector<std::byte> want(cpu.address(t), cpu.address(t) + x.bytes());
    if (x.dtype == analysis::DType::f32) {
      const double d = max_rel_diff(floats(got.bytes.data(), got.bytes.size()), floats(want.data(), want.size()));
      CHECK(d <= tol);
    } else {
      CHECK(got.bytes == want);
    }
  }
}

}  // namespace memplan::runtime::testing
