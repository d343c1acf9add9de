// Concat in place on the CPU executor: a DenseNet whose features are written into their block's output runs
// bit-equal to unshared and to the plan without concat in place, and matches PyTorch.
#include <doctest/doctest.h>

#include <cmath>

#include "analysis/import.hpp"
#include "analysis/shapes.hpp"
#include "planner/inference.hpp"
#include "planner/plan_json.hpp"
#include "runtime_allocator/executor.hpp"
#include "runtime_allocator/npy.hpp"
#include "tests/runtime_allocator/training_fixture.hpp"

using namespace memplan;
using namespace memplan::runtime;
using analysis::TensorData;

namespace {

const std::string kModels = std::string(MEMPLAN_SOURCE_DIR) + "/samples/models/";

std::vector<TensorData> run(const analysis::Graph& g, const planner::Plan& p, const TensorData& input, bool unshared, ExecStats* stats = nullptr) {
  HostBackend backend;
  ExecOptions o;
  o.unshared = unshared;
  Executor ex(g, p, backend, o);
  auto out = ex.run({input});
  if (stats) *stats = ex.stats();
  return out;
}

std::size_t slices(const planner::Plan& p) {
  std::size_t n = 0;
  for (const auto& a : p.aliases) n += a.kind == planner::AliasKind::slice;
  return n;
}

}  // namespace

TEST_CASE("tiny DenseNet: concat in place runs bit-equal to unshared and to separate buffers, and matches PyTorch") {
  analysis::ImportOptions io;
  io.keep_weight_data = true;
  const analysis::Graph g = analysis::infer_shapes(analysis::import_onnx(kModels + "tiny_densenet.onnx", io), {});
  const TensorData input = read_npy(kModels + "tiny_densenet.input.npy");
  const TensorData expected = read_npy(kModels + "tiny_densenet.output.npy");

  const auto in_place = planner::plan_inference(g);
  planner::AssignOptions off;
  off.concat_in_place = false;
  const auto separate = planner::plan_inference(g, off);
  REQUIRE(slices(in_place.plan) > 0);
  CHECK(slices(separate.plan) == 0);
  // Inference at batch 1: the peak is the stem's, not a block's (BatchNorm overwrites the prefix copy in place).
  CHECK(in_place.plan.aliased_lower_bound_bytes <= separate.plan.aliased_lower_bound_bytes);

  ExecStats s;
  const auto planned = run(g, in_place.plan, input, false, &s);
  const auto unshared = run(g, in_place.plan, input, true);
  const auto copied = run(g, separate.plan, input, false);
  CHECK(planned[0].bytes == unshared[0].bytes);  // bit for bit
  CHECK(planned[0].bytes == copied[0].bytes);
  CHECK(s.concats_in_place == 6);  // every Concat of the two blocks: the block outputs and the prefixes
  CHECK(s.staged_ops == 0);
  MESSAGE("tiny_densenet: arena " << in_place.plan.arena_bytes << " B with concat in place, " << separate.plan.arena_bytes << " B without");

  REQUIRE(planned[0].bytes.size() == expected.bytes.size());
  const auto* y = reinterpret_cast<const float*>(planned[0].bytes.data());
  const auto* want = reinterpret_cast<const float*>(expected.bytes.data());
  for (std::size_t i = 0; i < expected.bytes.size() / sizeof(float); ++i) CHECK(std::abs(y[i] - want[i]) < 1e-4f);

  // The plan written to JSON and read back places the slices again.
  const planner::Plan back = planner::plan_from_json(g, planner::plan_to_json(g, in_place.plan));
  CHECK(run(g, back, input, false)[0].bytes == planned[0].bytes);
}

TEST_CASE("tiny DenseNet training step: the saved prefix Concats are slices of the block outputs, and the step is bit-equal") {
  const analysis::TrainingGraph tg = testing::training("tiny_densenet");
  const auto in = testing::feeds("tiny_densenet", tg.graph);
  planner::TrainingPlanOptions on, off;
  on.assign.exact_pack_seconds = off.assign.exact_pack_seconds = 0.1;
  off.assign.concat_in_place = false;
  const planner::TrainingPlanResult a = planner::plan_training(tg, on), b = planner::plan_training(tg, off);
  REQUIRE(a.report.valid);
  REQUIRE(b.report.valid);
  CHECK(slices(a.plan) > 0);
  CHECK(slices(b.plan) == 0);
  // Each layer's BatchNorm saves its input, the Concat of all features so far: in place those are views of the block.
  CHECK(a.plan.aliased_lower_bound_bytes < b.plan.aliased_lower_bound_bytes);
  MESSAGE("tiny_densenet training: arena " << a.plan.arena_bytes << " B with concat in place, " << b.plan.arena_bytes << " B without");
  HostBackend backend;
  ExecOptions unshared;
  unshared.unshared = true;
  Executor planned(a.graph, a.plan, backend), reference(a.graph, a.plan, backend, unshared);
  const auto x = planned.run(in), y = reference.run(in);
  REQUIRE(x.size() == y.size());
  for (std::size_t k = 0; k < x.size(); ++k) CHECK(x[k].bytes == y[k].bytes);
  CHECK(planned.stats().concats_in_place > 0);
}
