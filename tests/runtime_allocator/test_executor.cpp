// Tests of the executor: tiny models against PyTorch's outputs, planned arena bit-equal to unshared, broken plans.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "analysis/import.hpp"
#include "analysis/shapes.hpp"
#include "planner/inference.hpp"
#include "planner/plan_json.hpp"
#include "planner/verify.hpp"
#include "runtime_allocator/executor.hpp"
#include "runtime_allocator/npy.hpp"

using namespace memplan;
using namespace memplan::runtime;
using analysis::TensorData;
using analysis::TensorId;

namespace {
const std::string kModels = std::string(MEMPLAN_SOURCE_DIR) + "/samples/models/";

analysis::Graph load(const std::string& name) {
  analysis::ImportOptions io;
  io.keep_weight_data = true;
  return analysis::infer_shapes(analysis::import_onnx(kModels + name + ".onnx", io), {});
}

std::vector<TensorData> run(const analysis::Graph& g, const planner::Plan& p, const TensorData& input, bool unshared,
                            ExecStats* stats = nullptr) {
  HostBackend backend;
  ExecOptions o;
  o.unshared = unshared;
  Executor ex(g, p, backend, o);
  auto out = ex.run({input});
  if (stats) *stats = ex.stats();
  return out;
}

float max_abs_diff(const TensorData& a, const TensorData& b) {
  REQUIRE(a.bytes.size() == b.bytes.size());
  const auto* x = reinterpret_cast<const float*>(a.bytes.data());
  const auto* y = reinterpret_cast<const float*>(b.bytes.data());
  float m = 0.0f;
  for (std::size_t i = 0; i < a.bytes.size() / 4; ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}
}  // namespace

TEST_CASE("tiny models match PyTorch's outputs within 1e-4 and the planned arena is bit-equal to unshared") {
  for (const std::string name : {"tiny_mlp", "tiny_cnn", "tiny_gpt"}) {
    INFO("model " << name);
    const analysis::Graph g = load(name);
    const auto ip = planner::plan_inference(g);
    planner::require_valid(g, ip.plan);
    const TensorData input = read_npy(kModels + name + ".input.npy");
    const TensorData want = read_npy(kModels + name + ".output.npy");
    ExecStats planned_stats, unshared_stats;
    const auto planned = run(g, ip.plan, input, false, &planned_stats);
    const auto unshared = run(g, ip.plan, input, true, &unshared_stats);
    REQUIRE(planned.size() == 1);
    CHECK(planned[0].dims == want.dims);
    CHECK(max_abs_diff(planned[0], want) <= 1e-4f);
    CHECK(planned[0].bytes == unshared[0].bytes);  // bit for bit
    // The arena is used as planned: writes stay inside it and reach close to its end.
    CHECK(planned_stats.touched_bytes <= ip.plan.arena_bytes);
    CHECK(planned_stats.touched_bytes + ip.plan.alignment > ip.plan.arena_bytes);
    CHECK(planned_stats.staged_ops == 0);
    CHECK(unshared_stats.arena_bytes == 0);
    CHECK(unshared_stats.separate_bytes > planned_stats.separate_bytes);
    MESSAGE(name << ": arena " << ip.plan.arena_bytes << " B, touched " << planned_stats.touched_bytes << " B, unshared "
                 << unshared_stats.separate_bytes << " B, views elided " << planned_stats.views_elided << ", in-place "
                 << planned_stats.inplace_ops << ", max |diff| " << max_abs_diff(planned[0], want));
  }
}

TEST_CASE("the arena is allocated once and reused across steps with identical results") {
  const analysis::Graph g = load("tiny_gpt");
  const auto ip = planner::plan_inference(g);
  const TensorData input = read_npy(kModels + "tiny_gpt.input.npy");
  HostBackend backend;
  Executor ex(g, ip.plan, backend);
  const std::uint64_t allocated = backend.allocated_bytes();
  const auto first = ex.run({input});
  const auto second = ex.run({input});
  CHECK(first[0].bytes == second[0].bytes);
  CHECK(backend.allocated_bytes() == allocated);
}

TEST_CASE("a plan written to JSON and read back runs the same") {
  const analysis::Graph g = load("tiny_cnn");
  const auto ip = planner::plan_inference(g);
  const planner::Plan back = planner::plan_from_json(g, planner::plan_to_json(g, ip.plan));
  const TensorData input = read_npy(kModels + "tiny_cnn.input.npy");
  CHECK(run(g, back, input, false)[0].bytes == run(g, ip.plan, input, false)[0].bytes);
}

TEST_CASE("a plan with two live buffers moved to overlap is rejected, and running it anyway changes the output") {
  const analysis::Graph g = load("tiny_mlp");
  const auto ip = planner::plan_inference(g);
  const TensorData input = read_npy(kModels + "tiny_mlp.input.npy");
  const auto good = run(g, ip.plan, input, false);
  // Buffers a and b where b is written while a is still to be read: put b (all its tensors) over a.
  const auto& bufs = ip.plan.buffers;
  std::size_t tried = 0, differed = 0;
  for (std::size_t a = 0; a < bufs.size(); ++a)
    for (std::size_t b = 0; b < bufs.size(); ++b) {
      if (a == b || !(bufs[a].interval.first < bufs[b].interval.first && bufs[b].interval.first < bufs[a].interval.last)) continue;
      planner::Plan broken = ip.plan;
      broken.buffers[b].offset = bufs[a].offset;
      for (TensorId t : bufs[b].tensors) broken.tensor_offset[t] = bufs[a].offset;
      CHECK_FALSE(planner::verify_plan(g, broken).valid);
      CHECK_THROWS_AS(planner::require_valid(g, broken), Error);
      if (bufs[a].offset + bufs[b].size > broken.arena_bytes) continue;
      ++tried;
      differed += run(g, broken, input, false)[0].bytes != good[0].bytes;
    }
  MESSAGE("broken plans tried " << tried << ", outputs changed " << differed);
  CHECK(tried > 0);
  CHECK(differed > 0);
}

TEST_CASE("a plan for another graph and inputs of the wrong shape are refused") {
  const analysis::Graph mlp = load("tiny_mlp");
  const analysis::Graph cnn = load("tiny_cnn");
  const auto ip = planner::plan_inference(mlp);
  HostBackend backend;
  try {
    Executor ex(cnn, ip.plan, backend);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::plan_mismatch);
  }
  Executor ex(mlp, ip.plan, backend);
  const TensorData wrong = read_npy(kModels + "tiny_cnn.input.npy");
  try {
    ex.run({wrong});
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    CHECK(std::string(e.what()).find("[8,64]") != std::string::npos);
  }
}

TEST_CASE("CNNs with synthetic weights: planned arena bit-equal to unshared") {
  // The corpus ships no weights for these: fill them deterministically, scaled by 1/sqrt(fan-in).
  for (const std::string name : {"squeezenet1_1", "mobilenet_v2"}) {
    INFO("model " << name);
    analysis::Graph g = load(name);
    std::mt19937 rng(7);
    for (auto& t : g.tensors) {
      if (t.data || t.producer != analysis::kNoOp || t.role != analysis::TensorRole::weight) continue;
      REQUIRE(t.dtype == analysis::DType::f32);
      const auto shape = t.shape();
      double fan_in = 1.0;
      for (std::size_t k = 1; k < shape.size(); ++k) fan_in *= static_cast<double>(shape[k]);
      std::uniform_real_distribution<double> d(-std::sqrt(3.0 / fan_in), std::sqrt(3.0 / fan_in));
      std::vector<double> v(t.element_count());
      for (auto& x : v) x = d(rng);
      t.data = std::make_shared<TensorData>(TensorData::from_double(t.dtype, shape, v));
    }
    TensorData input;
    {
      const auto& x = g.tensors[g.inputs[0]];
      std::vector<double> v(x.element_count());
      for (auto& e : v) e = std::uniform_real_distribution<double>(-1, 1)(rng);
      input = TensorData::from_double(x.dtype, x.shape(), v);
    }
    const auto ip = planner::plan_inference(g);
    ExecStats s;
    const auto planned = run(g, ip.plan, input, false, &s);
    const auto unshared = run(g, ip.plan, input, true);
    CHECK(planned[0].bytes == unshared[0].bytes);
    CHECK(s.touched_bytes <= ip.plan.arena_bytes);
    MESSAGE(name << ": arena " << ip.plan.arena_bytes << " B, touched " << s.touched_bytes << " B, in-place "
                 << s.inplace_ops << ", views elided " << s.views_elided << ", run " << s.seconds << " s");
  }
}
