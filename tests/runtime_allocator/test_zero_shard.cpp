// ZeRO-1/2 in the executor, on the CPU with ranks as threads: reduce-scattered gradients, updates on each rank's
// shard with sharded optimizer state, and all-gathered weights train exactly as the all-reduce run does, in worlds
// that divide the buckets evenly and worlds that do not; and what the executor refuses.
#include <doctest/doctest.h>

#include <functional>
#include <random>
#include <thread>

#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "planner/training_plan.hpp"
#include "runtime_allocator/collectives/collectives.hpp"
#include "runtime_allocator/executor.hpp"
#include "runtime_allocator/collectives/zero_shard.hpp"
#include "tests/runtime_allocator/op_graph.hpp"
#include "tests/runtime_allocator/training_fixture.hpp"

using namespace memplan;
using namespace memplan::runtime;
using namespace memplan::runtime::testing;
using analysis::TensorData;
using analysis::TensorId;

namespace {

// x[4,16] -> MatMul w1[16,31] + b1[31] -> Relu -> MatMul w2[31,2] + b2[2] -> y[4,2], MSE: 496, 31, 62 and 2
// elements, none a multiple of 3, and b2 smaller than a world of 3.
analysis::TrainingGraph mlp(analysis::Optimizer opt) {
  OpGraph m;
  std::mt19937 rng(5);
  const TensorId x = m.input("x", random_f32({4, 16}, rng));
  const TensorId w1 = m.constant("w1", random_f32({16, 31}, rng, -0.5, 0.5));
  const TensorId b1 = m.constant("b1", random_f32({31}, rng, -0.1, 0.1));
  const TensorId w2 = m.constant("w2", random_f32({31, 2}, rng, -0.5, 0.5));
  const TensorId b2 = m.constant("b2", random_f32({2}, rng, -0.1, 0.1));
  const auto act = [&](const char* name, std::int64_t n) { return m.tensor(name, analysis::DType::f32, {4, n}, analysis::TensorRole::activation); };
  const TensorId h = act("h", 31), hb = act("hb", 31), r = act("r", 31), y0 = act("y0", 2);
  const TensorId y = m.result("y", analysis::DType::f32, {4, 2});
  m.op("MatMul", "", {x, w1}, {h});
  m.op("Add", "", {h, b1}, {hb});
  m.op("Relu", "", {hb}, {r});
  m.op("MatMul", "", {r, w2}, {y0});
  m.op("Add", "", {y0, b2}, {y});
  analysis::TrainingOptions to;
  to.optimizer = opt;
  to.learning_rate = 0.05;
  to.weight_decay = opt == analysis::Optimizer::adamw ? 0.1 : 0.0;
  return analysis::build_training_graph(analysis::infer_shapes(m.g, {}), to);
}

// Rank r's batch: every float input drawn from a seed of its own (the ranks' gradients differ).
std::vector<TensorData> rank_feed(const analysis::Graph& g, int rank, const std::vector<TensorData>& base) {
  std::mt19937 rng(100 + static_cast<unsigned>(rank));
  std::vector<TensorData> v = base;
  for (std::size_t i = 0; i < v.size(); ++i)
    if (v[i].dtype == analysis::DType::f32) v[i] = random_f32(g.tensors[g.inputs[i]].shape(), rng);
  return v;
}

struct RankRun {
  std::vector<TensorData> weights, state;  // after the steps, param_grads order; the executor's read of each state tensor
  std::vector<double> losses;
  ZeroStats zero;
  std::uint64_t separate_bytes = 0;
};

// `world` ranks as threads training `steps` steps of tg's plan at ZeRO `stage`, each on its own batch.
std::vector<RankRun> train_ranks(const analysis::TrainingGraph& tg, const planner::TrainingPlanResult& r, const std::vector<TensorData>& base,
                                 int world, int stage, std::uint64_t bucket, int steps = 3) {
  LocalGroup group(world);
  std::vector<RankRun> runs(static_cast<std::size_t>(world));
  std::vector<std::string> errors(static_cast<std::size_t>(world));
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < world; ++rank)
    ranks.emplace_back([&, rank] {
      RankRun& out = runs[static_cast<std::size_t>(rank)];
      try {
        auto coll = group.member(rank);
        HostBackend backend;
        ExecOptions eo;
        eo.data_parallel = {coll.get(), {}, bucket, stage};
        for (const auto& pg : tg.param_grads) eo.data_parallel.gradients.push_back(pg.second);
        Executor ex(r.graph, r.plan, backend, eo);
        const auto feed = rank_feed(r.graph, rank, base);
        for (int s = 0; s < steps; ++s) out.losses.push_back(ex.run(feed).at(0).as_double().at(0));
        for (const auto& pg : tg.param_grads) out.weights.push_back(ex.read(pg.first));
        for (TensorId t : tg.optimizer_state) out.state.push_back(ex.read(t));
        out.zero = ex.stats().zero;
        out.separate_bytes = ex.stats().separate_bytes;
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(rank)] = e.what();
        group.abort();
      }
    });
  for (auto& t : ranks) t.join();
  for (const auto& e : errors) REQUIRE_MESSAGE(e.empty(), e);
  return runs;
}

// The first failure, or "".
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return std::string(e.kind() == ErrorKind::unsupported ? "unsupported: " : e.kind() == ErrorKind::usage ? "usage: " : "other: ") + e.what();
  }
  return "";
}

void check_against_all_reduce(const analysis::TrainingGraph& tg, const std::vector<TensorData>& base, int world, std::uint64_t bucket,
                              const std::string& strategy = "none") {
  const auto planned = plan_strategy(tg, strategy);
  REQUIRE(planned);
  const auto& r = *planned;
  const auto ref = train_ranks(tg, r, base, world, 0, bucket);
  for (int stage : {1, 2}) {
    INFO("world " << world << ", ZeRO " << stage << ", bucket " << bucket << ", strategy " << strategy);
    const auto got = train_ranks(tg, r, base, world, stage, bucket);
    for (int rank = 0; rank < world; ++rank) {
      const RankRun& a = got[static_cast<std::size_t>(rank)];
      INFO("rank " << rank);
      CHECK(a.losses == ref[static_cast<std::size_t>(rank)].losses);
      for (std::size_t k = 0; k < tg.param_grads.size(); ++k) {
        INFO("weight " << tg.graph.tensors[tg.param_grads[k].first].name);
        // The same sums in the same rank order, the same update per element: bit for bit.
        CHECK(a.weights[k].bytes == ref[0].weights[k].bytes);
        CHECK(a.weights[k].bytes == got[0].weights[k].bytes);
        CHECK(a.weights[k].bytes != tg.graph.tensors[tg.param_grads[k].first].data->bytes);  // it trained
      }
      CHECK(a.zero.stage == stage);
      CHECK(a.zero.sharded_updates == tg.param_grads.size());
      CHECK(a.zero.owned_elements < a.zero.weight_elements);
    }
    // Every element is updated by exactly one rank, but a bucket's tail (fewer elements than ranks) by each.
    std::uint64_t owned = 0;
    for (const auto& a : got) owned += a.zero.owned_elements;
    CHECK(owned >= got[0].zero.weight_elements);
    CHECK(owned < got[0].zero.weight_elements + static_cast<std::uint64_t>(world * world) * tg.param_grads.size());
  }
}

}  // namespace

TEST_CASE("ZeRO-1/2 over 2 and 3 ranks train bit for bit as the all-reduce run, every rank holding the same weights") {
  for (auto opt : {analysis::Optimizer::adam, analysis::Optimizer::momentum, analysis::Optimizer::sgd, analysis::Optimizer::adamw}) {
    INFO(analysis::optimizer_name(opt));
    const auto tg = mlp(opt);
    std::vector<TensorData> base;
    for (TensorId t : tg.graph.inputs) base.push_back(TensorData{analysis::DType::f32, tg.graph.tensors[t].shape(), {}});
    for (int world : {2, 3})
      for (std::uint64_t bucket : {std::uint64_t{0}, std::uint64_t{1} << 20}) check_against_all_reduce(tg, base, world, bucket);
  }
}

TEST_CASE("ZeRO on a transformer's training step (tiny_gpt, Adam) matches the all-reduce run over 3 ranks, with remat too") {
  const auto tg = training("tiny_gpt", analysis::Optimizer::adam);
  for (const std::string strategy : {"none", "sqrt"}) check_against_all_reduce(tg, feeds("tiny_gpt", tg.graph), 3, std::uint64_t{1} << 20, strategy);
}

TEST_CASE("each rank holds its shard of the optimizer state: the chunks of the ranks put together are the whole state") {
  const auto tg = mlp(analysis::Optimizer::adam);
  std::vector<TensorData> base;
  for (TensorId t : tg.graph.inputs) base.push_back(TensorData{analysis::DType::f32, tg.graph.tensors[t].shape(), {}});
  const auto r = planner::plan_training(tg, {});
  const int world = 3;
  const auto whole = train_ranks(tg, r, base, world, 0, 0), sharded = train_ranks(tg, r, base, world, 1, 0);
  // One gradient per bucket (bucket size 0): rank k holds elements [k c, (k + 1) c) and the tail [3 c, n).
  for (std::size_t s = 0; s < tg.optimizer_state.size(); ++s) {
    const TensorData& full = whole[0].state[s];
    INFO("state " << tg.graph.tensors[tg.optimizer_state[s]].name);
    if (full.element_count() == 1) {  // Adam's step count: whole on every rank
      for (const auto& a : sharded) CHECK(a.state[s].bytes == full.bytes);
      continue;
    }
    const std::uint64_t n = full.element_count(), c = n / world, tail = n % world;
    std::vector<std::byte> joined;
    for (int k = 0; k < world; ++k) {
      const TensorData& mine = sharded[static_cast<std::size_t>(k)].state[s];
      REQUIRE(mine.dims == std::vector<std::int64_t>{static_cast<std::int64_t>(c + tail)});
      joined.insert(joined.end(), mine.bytes.begin(), mine.bytes.begin() + static_cast<std::ptrdiff_t>(4 * c));
      CHECK(std::equal(mine.bytes.begin() + static_cast<std::ptrdiff_t>(4 * c), mine.bytes.end(), full.bytes.end() - static_cast<std::ptrdiff_t>(4 * tail)));
    }
    joined.insert(joined.end(), full.bytes.end() - static_cast<std::ptrdiff_t>(4 * tail), full.bytes.end());
    CHECK(joined == full.bytes);
  }
  MESSAGE("Adam state per rank over 3 ranks: " << sharded[0].zero.state_bytes << ", " << sharded[1].zero.state_bytes << ", "
          << sharded[2].zero.state_bytes << " B of " << sharded[0].zero.state_unsharded_bytes << " B whole; executor memory outside the arena "
          << sharded[0].separate_bytes << " B vs " << whole[0].separate_bytes << " B with the all-reduce");
  for (const auto& a : sharded) {
    // Adam's moments: two per weight element, a third of them (and the tails) here; none placed by the executor.
    CHECK(a.zero.state_unsharded_bytes == 2 * 4 * a.zero.weight_elements);
    CHECK(a.zero.state_bytes * world <= a.zero.state_unsharded_bytes + 2 * tg.param_grads.size() * world * (64 + 4 * world));
    REQUIRE(a.separate_bytes < whole[0].separate_bytes);
    CHECK(whole[0].separate_bytes - a.separate_bytes >= a.zero.state_unsharded_bytes);  // the whole moments are not placed
    CHECK(a.zero.gather_buffer_bytes == 4 * world * (496 / world));  // the largest bucket's chunks (w1)
  }
}

TEST_CASE("ZeRO refuses what it cannot run: stage 3, no collectives, no optimizer update reading the gradients") {
  LocalGroup group(1);
  auto coll = group.member(0);
  HostBackend backend;
  auto try_run = [&](const analysis::TrainingGraph& tg, Collectives* c, int stage) {
    return error_of([&] {
      const auto r = planner::plan_training(tg, {});
      ExecOptions eo;
      eo.data_parallel = {c, {}, 0, stage};
      for (const auto& pg : tg.param_grads) eo.data_parallel.gradients.push_back(pg.second);
      Executor ex(r.graph, r.plan, backend, eo);
    });
  };
  const auto adam = mlp(analysis::Optimizer::adam), none = mlp(analysis::Optimizer::none);
  const std::string stage3 = try_run(adam, coll.get(), 3);
  CHECK(stage3.rfind("unsupported: ", 0) == 0);
  CHECK(stage3.find("stage 3") != std::string::npos);
  CHECK(try_run(adam, nullptr, 1).rfind("usage: ", 0) == 0);
  const std::string no_update = try_run(none, coll.get(), 1);
  CHECK(no_update.rfind("unsupported: ", 0) == 0);
  CHECK(no_update.find("optimizer") != std::string::npos);
  CHECK(try_run(adam, coll.get(), 1).empty());
}

TEST_CASE("a bucket splits into equal chunks and a tail shorter than the world") {
  CHECK(bucket_shard(10, 3).chunk == 3);
  CHECK(bucket_shard(10, 3).tail == 1);
  CHECK(bucket_shard(2, 3).chunk == 0);
  CHECK(bucket_shard(2, 3).tail == 2);
  CHECK(bucket_shard(12, 4).tail == 0);
  CHECK(bucket_shard(7, 1).chunk == 7);
}
