// Tests of write-after-read order: every reader of storage runs before the op that rewrites it in place, recompute
// clones of a weight's reader included, and the verifier rejects a plan where one reads after the rewrite.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>

#include "analysis/ops.hpp"
#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "planner/overwrite_order.hpp"
#include "planner/remat.hpp"
#include "tests/planner/planner_fixtures.hpp"
#include "tests/runtime_allocator/stochastic_models.hpp"

using namespace memplan;
using namespace memplan::planner;
using namespace memplan::planner::testing;

namespace {

// x, w -> Mul a; Reshape v of w; a -> Mul gw (the gradient); SGDUpdate w' over w; v -> Relu r; r -> Identity y.
// In file order Relu reads w (through its view v) after SGDUpdate rewrote it.
struct Update {
  GraphBuilder b;
  TensorId x, w, a, v, gw, nw, r, y;
  OpId mul, reshape, grad, update, relu, copy;
  Update() {
    x = b.input("x", 64);
    w = b.weight("w", 64);
    a = b.act("a", 64);
    v = b.act("v", 64);
    gw = b.act("gw", 64, DType::f32, TensorRole::gradient);
    nw = b.act("w/updated", 64, DType::f32, TensorRole::weight);
    r = b.act("r", 64);
    y = b.act("y", 64);
    mul = b.op("Mul", {x, w}, {a});
    reshape = b.op("Reshape", {w}, {v});
    grad = b.op("Mul", {a, x}, {gw});
    analysis::Op sgd;
    sgd.name = "SGDUpdate_3";
    sgd.type = analysis::memplan_ops::kSGDUpdate;
    sgd.domain = analysis::kMemplanDomain;
    sgd.phase = analysis::Phase::optimizer;
    sgd.inputs = {w, gw};
    sgd.outputs = {nw};
    update = b.g.add_op(std::move(sgd));
    relu = b.op("Relu", {v}, {r});
    copy = b.op("Identity", {r}, {y});
    b.g.relink();
    b.output(y);
    b.output(nw);
  }
  std::vector<OpId> file() const { return {mul, reshape, grad, update, relu, copy}; }
};

Plan plan_on(const Graph& g, const std::vector<OpId>& order) {
  return assign(g, analyze_liveness(g, order, 256), without_scratch());
}

bool names(const VerifyReport& r, const std::string& needle) {
  return std::any_of(r.problems.begin(), r.problems.end(),
                     [&](const std::string& p) { return p.find(needle) != std::string::npos; });
}

}  // namespace

TEST_CASE("overwrite readers: every other op reading the rewritten storage, through its views too") {
  const Update u;
  const auto war = overwrite_readers(u.b.g);
  const std::vector<std::pair<OpId, OpId>> want{{u.mul, u.update}, {u.reshape, u.update}, {u.relu, u.update}};
  CHECK(war == want);
}

TEST_CASE("an in-place rewrite moves after the last reader of its storage, and an order that holds stays as it is") {
  const Update u;
  const std::vector<OpId> fixed = order_reads_before_overwrites(u.b.g, u.file());
  CHECK(fixed == std::vector<OpId>{u.mul, u.reshape, u.grad, u.relu, u.update, u.copy});
  CHECK(order_reads_before_overwrites(u.b.g, fixed) == fixed);
  CHECK(analysis::is_topological(u.b.g, fixed));
  // A reader that needs the rewrite's own result cannot run before it.
  Update cyclic;
  cyclic.b.g.ops[cyclic.copy].inputs = {cyclic.r, cyclic.w, cyclic.nw};
  cyclic.b.g.relink();
  CHECK_THROWS_WITH_AS(order_reads_before_overwrites(cyclic.b.g, cyclic.file()), doctest::Contains("rewrites storage in place"),
                       Error);
}

TEST_CASE("the verifier rejects a read of storage after its in-place rewrite, directly or through a view") {
  const Update u;
  const VerifyReport bad = verify_plan(u.b.g, plan_on(u.b.g, u.file()));
  INFO("first problem: " << (bad.problems.empty() ? std::string("none") : bad.problems.front()));
  CHECK_FALSE(bad.valid);
  CHECK(names(bad, "op 'Relu_4' at step 4 reads 'v' after op 'SGDUpdate_3' overwrote 'w' in place at step 3"));
  // A direct reader of the weight after the update.
  Update direct;
  direct.b.g.ops[direct.relu].inputs = {direct.w};
  direct.b.g.relink();
  const VerifyReport bad_direct = verify_plan(direct.b.g, plan_on(direct.b.g, direct.file()));
  CHECK(names(bad_direct, "reads 'w' after op 'SGDUpdate_3' overwrote it in place"));
  const VerifyReport good = verify_plan(u.b.g, plan_on(u.b.g, order_reads_before_overwrites(u.b.g, u.file())));
  INFO("first problem: " << (good.problems.empty() ? std::string("none") : good.problems.front()));
  CHECK(good.valid);
}

TEST_CASE("a recompute clone of a weight's reader runs before the weight's update, even when the order updates it early") {
  std::mt19937 rng(18);
  const runtime::testing::OpGraph m = runtime::testing::rms_norm_decoder(rng);
  analysis::TrainingOptions to;
  to.optimizer = analysis::Optimizer::sgd;
  const analysis::TrainingGraph tg = analysis::build_training_graph(analysis::infer_shapes(m.g, {}), to);
  const Graph& g = tg.graph;
  const TensorId weight = g.find("norm.weight"), normed = g.find("normed");
  OpId update = analysis::kNoOp;
  for (OpId o = 0; o < g.ops.size(); ++o)
    if (g.ops[o].name == "optimizer/norm.weight") update = o;
  REQUIRE(update != analysis::kNoOp);
  // w1's weight gradient (which reads normed) last, and norm.weight's update as early as its gradient and the
  // weight's readers allow: what a memory order may choose.
  std::vector<OpId> order = analysis::topological_order(g);
  for (const char* last : {"MatMul_7/grad/MatMulGradB_1", "optimizer/mlp.w1"}) {
    const auto at = std::find_if(order.begin(), order.end(), [&](OpId o) { return g.ops[o].name == last; });
    REQUIRE(at != order.end());
    const OpId o = *at;
    order.erase(at);
    order.push_back(o);
  }
  order.erase(std::find(order.begin(), order.end(), update));
  std::size_t after = 0;
  auto must_follow = [&](OpId p) {
    after = std::max(after, static_cast<std::size_t>(std::find(order.begin(), order.end(), p) - order.begin()) + 1);
  };
  for (TensorId t : g.ops[update].inputs)
    if (g.tensors[t].producer != analysis::kNoOp) must_follow(g.tensors[t].producer);
  for (const auto& [reader, rewriter] : overwrite_readers(g))
    if (rewriter == update) must_follow(reader);
  order.insert(order.begin() + static_cast<std::ptrdiff_t>(after), update);
  REQUIRE(analysis::is_topological(g, order));

  RematChoice choice = RematChoice::keep_all(g);
  choice.action[normed] = RematAction::recompute;  // its clone reads norm.weight before w1's weight gradient
  const RematTransform tr = apply_remat(g, order, choice);
  REQUIRE(tr.recompute_ops > 0);
  std::vector<std::uint32_t> step(tr.graph.ops.size());
  for (std::uint32_t s = 0; s < tr.schedule.size(); ++s) step[tr.schedule[s]] = s;
  bool clone_reads_weight = false;
  for (OpId c : tr.graph.tensors[weight].consumers)
    if (tr.graph.ops[c].phase == analysis::Phase::recompute) {
      clone_reads_weight = true;
      CHECK(step[c] < step[update]);
    }
  CHECK(clone_reads_weight);
  CHECK(analysis::is_topological(tr.graph, tr.schedule));
  for (const auto& [reader, rewriter] : overwrite_readers(tr.graph)) CHECK(step[reader] < step[rewriter]);
  const VerifyReport fixed = verify_plan(tr.graph, plan_on(tr.graph, tr.schedule));
  INFO("first problem: " << (fixed.problems.empty() ? std::string("none") : fixed.problems.front()));
  CHECK(fixed.valid);

  // The same transform with the update back before the clone: the verifier names the clone's read.
  std::vector<OpId> early = tr.schedule;
  early.erase(std::find(early.begin(), early.end(), update));
  std::size_t first_clone = early.size();
  for (OpId c : tr.graph.tensors[weight].consumers)
    if (tr.graph.ops[c].phase == analysis::Phase::recompute)
      first_clone = std::min(first_clone, static_cast<std::size_t>(std::find(early.begin(), early.end(), c) - early.begin()));
  early.insert(early.begin() + static_cast<std::ptrdiff_t>(first_clone), update);
  REQUIRE(analysis::is_topological(tr.graph, early));
  const VerifyReport bad = verify_plan(tr.graph, plan_on(tr.graph, early));
  CHECK_FALSE(bad.valid);
  CHECK(names(bad, "@recompute0' at step"));
  CHECK(names(bad, "reads 'norm.weight' after op 'optimizer/norm.weight' overwrote it in place"));
}
