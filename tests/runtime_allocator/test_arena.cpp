// Tests of the arena (bounds checks, touched high-water mark) and of the executor's staging of unsafe overlaps.
#include <doctest/doctest.h>

#include "runtime_allocator/arena.hpp"
#include "runtime_allocator/executor.hpp"

using namespace memplan;
using namespace memplan::runtime;
using namespace memplan::analysis;

namespace {
TensorId add(Graph& g, const std::string& name, std::vector<std::int64_t> dims, TensorRole role = TensorRole::activation) {
  Tensor t;
  t.name = name;
  t.dtype = DType::f32;
  t.rank_known = true;
  for (auto d : dims) t.dims.push_back(Dim::of(d));
  t.role = role;
  return g.add_tensor(t);
}

void op(Graph& g, const std::string& type, std::vector<TensorId> in, TensorId out) {
  Op o;
  o.name = type + "_" + g.tensors[out].name;
  o.type = type;
  o.inputs = std::move(in);
  o.outputs = {out};
  g.add_op(o);
}

// input -> Relu -> a [4,8] -> Transpose -> b [8,4] -> Relu -> c
Graph chain() {
  Graph g;
  g.name = "chain";
  TensorId in = add(g, "in", {4, 8}, TensorRole::input);
  g.inputs.push_back(in);
  TensorId a = add(g, "a", {4, 8}), b = add(g, "b", {8, 4}), c = add(g, "c", {8, 4});
  op(g, "Relu", {in}, a);
  op(g, "Transpose", {a}, b);
  op(g, "Relu", {b}, c);
  g.outputs.push_back(c);
  g.tensors[c].is_graph_output = true;
  return g;
}

planner::Plan plan_for(const Graph& g, std::vector<std::uint64_t> offsets, std::uint64_t arena) {
  planner::Plan p;
  p.model_fingerprint = g.fingerprint();
  p.alignment = 128;
  p.arena_bytes = arena;
  p.schedule = {0, 1, 2};
  p.tensor_offset = std::move(offsets);
  return p;
}
}  // namespace

TEST_CASE("arena binds planned offsets, refuses tensors outside it and records the touched high-water mark") {
  const Graph g = chain();
  HostBackend backend;
  const auto n = planner::kNotInArena;
  const planner::Plan p = plan_for(g, {n, 0, 128, 0}, 256);
  Arena arena(backend, p, {128, 128, 128, 128}, true);
  CHECK(arena.bind(2) == arena.base() + 128);
  CHECK_THROWS_AS(arena.bind(0), Error);  // no planned offset
  arena.mark_written(1);
  CHECK(arena.touched_bytes() == 128);
  arena.mark_written(2);
  CHECK(arena.touched_bytes() == 256);
  const planner::Plan outside = plan_for(g, {n, 0, 200, 0}, 256);
  try {
    Arena bad(backend, outside, {128, 128, 128, 128}, true);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::runtime);
    CHECK(std::string(e.what()).find("outside") != std::string::npos);
  }
}

TEST_CASE("an output placed over the input of a kernel that is not alias-safe is staged, and stays correct") {
  const Graph g = chain();
  const auto n = planner::kNotInArena;
  std::vector<double> v(32);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i) - 10.0;
  const TensorData x = TensorData::from_double(DType::f32, {4, 8}, v);
  HostBackend backend;
  Executor ref(g, plan_for(g, {}, 0), backend, {.unshared = true});
  const auto want = ref.run({x});
  // b over a (a Transpose in place: unsafe), c over b (Relu in place: safe).
  Executor ex(g, plan_for(g, {n, 0, 0, 0}, 128), backend);
  const auto got = ex.run({x});
  CHECK(ex.stats().staged_ops == 1);
  CHECK(ex.stats().inplace_ops == 1);
  CHECK(got[0].bytes == want[0].bytes);
  CHECK(ex.stats().touched_bytes == 128);
}
