// Tensor-parallel rank plans: column/row pairs split, Megatron's f/g collectives, sequence parallelism, formulas.
#include <doctest/doctest.h>

#include <set>

#include "analysis/ops.hpp"
#include "planner/fusion.hpp"
#include "planner/parallel/parallel.hpp"
#include "tests/planner/parallel_fixture.hpp"

namespace memplan::planner {
namespace {

using testing::make_transformer;
using testing::TransformerConfig;

double flops_of(const analysis::Graph& g, const std::vector<std::string>& ops) {
  const std::set<std::string> names(ops.begin(), ops.end());
  double f = 0.0;
  for (const auto& op : g.ops)
    if (names.count(op.name)) f += analysis::op_registry().find(op)->flops(g, op);
  return f;
}

std::vector<std::int64_t> dims_of(const analysis::Graph& g, const std::string& tensor) { return g.tensors[g.at(tensor)].shape(); }

TEST_CASE("tensor parallel splits every pair: T ranks' weights and matmul FLOPs sum to the unsharded ones") {
  const TransformerConfig c{.layers = 2};
  const analysis::Graph g = make_transformer(c);
  const analysis::TrainingOptions to;
  std::uint64_t all_weights = 0;
  const auto trains = analysis::trainable_weights(g, to);
  for (TensorId t = 0; t < g.tensors.size(); ++t) all_weights += trains[t] ? g.tensors[t].bytes() : 0;
  for (int tp : {2, 4}) {
    INFO("tp " << tp);
    TensorParallelReport r;
    const analysis::Graph s = shard_tensor_parallel(g, tp, false, r);
    CHECK(r.column_ops == 8);  // q, k, v and up per layer
    CHECK(r.row_ops == 4);     // out projection and down per layer
    CHECK(r.replicated_matmuls == 0);
    CHECK(r.sharded_weight_bytes * static_cast<std::uint64_t>(tp) + r.replicated_weight_bytes == all_weights);
    CHECK(r.replicated_weight_bytes == 2 * 2 * 2 * 64 * 4 + 2 * 2 * 64 * 4);  // LayerNorms and the row biases stay whole
    CHECK(flops_of(s, r.tensor_parallel_ops) * tp == doctest::Approx(flops_of(g, r.tensor_parallel_ops)));
    // Activations inside a pair hold 1/T: the MLP's hidden features, the attention heads.
    CHECK(dims_of(s, "layers.0/mlp/Gelu:0") == std::vector<std::int64_t>{2, 16, 256 / tp});
    CHECK(dims_of(s, "layers.1/attn/QK:0") == std::vector<std::int64_t>{2, 4 / tp, 16, 16});
    // What leaves a pair is whole (a partial sum, all-reduced).
    CHECK(dims_of(s, "layers.0.mlp.down/MatMul:0") == std::vector<std::int64_t>{2, 16, 64});
  }
}

TEST_CASE("fused attention and GELU pairs split the same way") {
  const analysis::Graph g = make_transformer(TransformerConfig{.layers = 1});
  const analysis::Graph fused = fuse_graph(g).graph;
  TensorParallelReport r;
  const analysis::Graph s = shard_tensor_parallel(fused, 2, false, r);
  CHECK(r.column_ops == 4);
  CHECK(r.row_ops == 2);
  bool attention = false;
  for (const auto& op : s.ops)
    if (op.type == analysis::memplan_ops::kFusedAttention) {
      attention = true;
      CHECK(s.tensors[op.input(0)].shape()[1] * s.tensors[op.input(0)].shape()[2] == 2 * 16);  // 2 of 4 heads
    }
  CHECK(attention);
  CHECK(flops_of(s, r.tensor_parallel_ops) * 2 == doctest::Approx(flops_of(fused, r.tensor_parallel_ops)));
}

TEST_CASE("a tensor-parallel degree that does not divide the heads is a usage error") {
  const analysis::Graph g = make_transformer(TransformerConfig{.hidden = 96, .heads = 6, .layers = 1});
  TensorParallelReport r;
  CHECK_NOTHROW(shard_tensor_parallel(g, 2, false, r));
  try {
    shard_tensor_parallel(g, 4, false, r);  // 96 / 4 divides, 6 heads do not
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    CHECK(std::string(e.what()).find("--tp 4") != std::string::npos);
  }
}

TEST_CASE("tensor-parallel rank plans verify: f and g all-reduce the stream once per pair, forward and backward") {
  const TransformerConfig c{.layers = 2};
  for (bool sp : {false, true}) {
    ParallelOptions par;
    par.gpus = 2;
    par.tp = 2;
    par.sequence_parallel = sp;
    const ParallelPlanResult r = plan_small(make_transformer(c), par);
    REQUIRE(r.roles.size() == 1);
    const RankPlan& rp = r.roles[0];
    INFO("sequence parallel " << sp);
    CHECK(rp.result.report.valid);
    CHECK(rp.ranks == std::vector<int>{0, 1});
    const std::uint64_t stream = 2 * 16 * 64 * 4;
    std::size_t all_reduce = 0, reduce_scatter = 0, all_gather = 0;
    for (const auto& op : rp.result.graph.ops) {
      all_reduce += op.type == analysis::memplan_ops::kAllReduce ? 1 : 0;
      reduce_scatter += op.type == analysis::memplan_ops::kReduceScatter ? 1 : 0;
      all_gather += op.type == analysis::memplan_ops::kAllGather ? 1 : 0;
    }
    if (!sp) {
      CHECK(all_reduce == 8);  // 4 row outputs (g, forward) + 4 column inputs' gradients (f, backward)
      CHECK(rp.communication.all_reduce == 8 * ring_all_reduce_bytes(stream, 2));
      CHECK(dims_of(rp.result.graph, "layers.0.ln_2/LayerNorm:0") == std::vector<std::int64_t>{2, 16, 64});
    } else {
      CHECK(all_reduce == 0);
      // Forward: gather before each column group, reduce-scatter after each row; backward: the column groups
      // gather again for their weight gradients, the rows' input gradients are gathered, the columns' scattered.
      CHECK(all_gather >= 12);
      CHECK(reduce_scatter >= 8);
      CHECK(dims_of(rp.result.graph, "layers.0.ln_2/LayerNorm:0") == std::vector<std::int64_t>{2, 8, 64});
      CHECK(dims_of(rp.result.graph, "layers.1/residual2:0") == std::vector<std::int64_t>{2, 8, 64});
    }
  }
}

// Saved activation bytes of one layer of the TP rank's graph (3 layers minus 1, halved).
double saved_per_layer(TransformerConfig c, int tp, bool sp) {
  std::uint64_t a[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    c.layers = k == 0 ? 1 : 3;
    TensorParallelReport r;
    const analysis::Graph s = shard_tensor_parallel(make_transformer(c), tp, sp, r);
    analysis::TrainingGraph tg = analysis::build_training_graph(s, analysis::TrainingOptions{});
    insert_tensor_parallel_collectives(tg, r, tp, sp);
    a[k] = saved_activation_bytes(tg);
  }
  return static_cast<double>(a[1] - a[0]) / 2.0;
}

TEST_CASE("saved activations per layer agree with Megatron-LM's tensor-parallel formulas within 2%") {
  // Korthikanti et al. 2022: eq. 2 (tensor parallel) sbh(10 + 24/t + 5as/(ht)); eq. 3 (with sequence
  // parallelism) sbh/t (34 + 5as/h). fp16, dropout, attention not fused.
  for (int tp : {2, 4})
    for (bool sp : {false, true}) {
      const TransformerConfig c{.batch = 2, .seq = 64, .hidden = 256, .heads = 8, .dtype = analysis::DType::f16, .dropout = true};
      const double s = 64, b = 2, h = 256, a = 8, t = tp;
      const double megatron = sp ? s * b * h / t * (34.0 + 5.0 * a * s / h) : s * b * h * (10.0 + 24.0 / t + 5.0 * a * s / (h * t));
      const double memplan = saved_per_layer(c, tp, sp);
      INFO("tp " << tp << std::string(sp ? " +sp" : "") << ": memplan " << memplan << " bytes per layer, Megatron " << megatron);
      CHECK(memplan == doctest::Approx(megatron).epsilon(0.02));
    }
}

TEST_CASE("data x tensor x pipeline parallel: every role verifies and the pairs split within each stage") {
  ParallelOptions par;
  par.gpus = 8;
  par.tp = 2;
  par.pp = 2;
  par.zero = 1;
  par.microbatches = 2;
  const ParallelPlanResult r = plan_small(make_transformer(TransformerConfig{.layers = 4}), par);
  REQUIRE(r.roles.size() == 2);
  for (const RankPlan& rp : r.roles) {
    CHECK(rp.result.report.valid);
    CHECK(rp.ranks.size() == 4);
    CHECK(rp.communication.all_reduce > 0);
    CHECK(rp.communication.send_recv > 0);
  }
  CHECK(r.roles[1].ranks == std::vector<int>{4, 5, 6, 7});
}

}  // namespace
}  // namespace memplan::planner
