// GPU tests of training steps on the CUDA backend against the CPU executor; exit 77 (skipped) without a device.
#include <doctest/doctest.h>

#ifdef MEMPLAN_HAVE_CUDA
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "analysis/import.hpp"
#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "planner/inference.hpp"
#include "planner/training_plan.hpp"
#include "runtime_allocator/cuda/cuda_backend.hpp"
#include "runtime_allocator/executor.hpp"
#include "runtime_allocator/npy.hpp"
#include "tests/runtime_allocator/cuda_compare.hpp"
#include "tests/runtime_allocator/op_graph.hpp"
#include "tests/runtime_allocator/training_fixture.hpp"

using namespace memplan;
using namespace memplan::runtime::testing;
using analysis::DType;
using analysis::TensorData;
using analysis::TensorId;
using runtime::cuda::CudaBackend;
using HostValue = analysis::TensorData;

namespace {

// Adam's first step from zero moments: w - lr * g / (|g| + eps) up to the bias corrections, i.e. about lr * sign(g)
// for |g| >> eps. So where |g| is near eps (a gradient that is zero in exact arithmetic), a rounding difference of
// 1e-9 in g moves the new weight by up to lr. The updated weight is therefore checked (a) against the CPU executor's
// where |g| >= 1e-6, and (b) everywhere against the CPU formula applied to the GPU's own gradient.
double adam_first_step_diff(const analysis::Op& op, const std::vector<float>& w, const std::vector<float>& g,
                            const std::vector<float>& g_ref, const std::vector<float>& got, const std::vector<float>& want) {
  const float lr = static_cast<float>(op.attr_float("lr", 0.001)), b1 = static_cast<float>(op.attr_float("beta1", 0.9)),
              b2 = static_cast<float>(op.attr_float("beta2", 0.999)), eps = static_cast<float>(op.attr_float("epsilon", 1e-8));
  double m = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float nm = (1.0f - b1) * g[i], nv = (1.0f - b2) * g[i] * g[i];
    const float formula = w[i] - lr * (nm / (1.0f - b1)) / (std::sqrt(nv / (1.0f - b2)) + eps);
    m = std::max(m, static_cast<double>(std::fabs(got[i] - formula)));
    if (std::fabs(g_ref[i]) >= 1e-6f) m = std::max(m, static_cast<double>(std::fabs(got[i] - want[i])));
  }
  return m;
}

struct Reference {
  runtime::HostBackend backend;
  std::unique_ptr<runtime::Executor> ex;
  std::vector<TensorData> outputs;
  std::vector<float> values(const analysis::Graph& g, TensorId t) const { return floats(ex->address(t), g.tensors[t].bytes()); }
};

// A weight's values before the step (the executors update weights in place).
std::vector<float> initial_values(const analysis::Graph& g, TensorId t) {
  return floats(g.tensors[t].data->bytes.data(), g.tensors[t].data->bytes.size());
}

analysis::Attribute tensor_attr(const TensorData& v) {
  analysis::Attribute a;
  a.kind = analysis::Attribute::Kind::tensor;
  a.t = std::make_shared<TensorData>(v);
  return a;
}

// Deterministic weights for a model whose weights are external data (not shipped): fan-in scaled uniform values,
// BatchNorm scales and running variances in [0.5, 1.5].
void synthesize_weights(analysis::Graph& g) {
  std::vector<bool> positive(g.tensors.size(), false);
  for (const auto& op : g.ops)
    if (op.type == "BatchNormTraining" || op.type == "BatchNormalization")
      for (std::size_t i : {std::size_t{1}, std::size_t{4}})
        if (op.input(i) != analysis::kNoTensor) positive[op.input(i)] = true;
  std::mt19937 rng(17);
  for (TensorId t = 0; t < g.tensors.size(); ++t) {
    auto& x = g.tensors[t];
    if (x.role != analysis::TensorRole::weight || x.producer != analysis::kNoOp || x.data || !x.shape_known()) continue;
    const auto d = x.shape();
    std::int64_t fan_in = 1;
    for (std::size_t k = 1; k < d.size(); ++k) fan_in *= d[k];
    const double bound = d.size() >= 2 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.1;
    x.data = std::make_shared<TensorData>(positive[t] ? random_f32(d, rng, 0.5, 1.5) : random_f32(d, rng, -bound, bound));
    x.external_data = false;
  }
}

}  // namespace

TEST_CASE(
    "one training step on the GPU gives the CPU executor's gradients and "
    "updated weights within 1e-4, under every strategy") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  for (const std::string name : {"tiny_mlp", "tiny_cnn", "tiny_gpt"}) {
    for (auto opt : {analysis::Optimizer::sgd, analysis::Optimizer::adam}) {
      const auto tg = training(name, opt);
      const auto in = feeds(name, tg.graph);
      Reference ref;
      ref.ex =
          std::make_unique<runtime::Executor>(tg.graph, planner::Plan{}, ref.backend, runtime::ExecOptions{.unshared = true});
      ref.outputs = ref.ex->run(in);
      std::map<std::string, HostValue> feed;
      for (std::size_t k = 0; k < in.size(); ++k)
        feed[tg.graph.tensors[tg.graph.inputs[k]].name] = HostValue{in[k].dtype, in[k].dims, in[k].bytes};

      planner::TrainingPlanOptions base;
      const auto none = planner::plan_training(tg, base);
      base.strategy = "sqrt";
      const auto sqrt_plan = planner::plan_training(tg, base);
      // A budget between sqrt's peak and no remat's: optimal and swap must trade memory for work.
      const std::uint64_t budget = (none.peak_bytes + std::min(sqrt_plan.peak_bytes, none.peak_bytes)) / 2;
      std::vector<planner::TrainingPlanResult> plans{none, sqrt_plan};
      for (const char* strategy : {"optimal", "swap"}) {
        planner::TrainingPlanOptions po;
        po.strategy = strategy;
        po.budget_bytes = budget;
        try {
          plans.push_back(planner::plan_training(tg, po));
        } catch (const Error& e) {  // a budget this tight may be out of reach for a strategy
          MESSAGE(name << " " << strategy << " at " << budget << " B not planned: " << e.what());
          po.budget_bytes.reset();
          plans.push_back(planner::plan_training(tg, po));
        }
      }
      for (const auto& r : plans) {
        INFO(name << " " << std::string(analysis::optimizer_name(opt)) << " strategy " << r.strategy);
        REQUIRE(r.report.valid);
        CudaBackend ex_backend;
        runtime::Executor ex(r.graph, r.plan, ex_backend);
        const auto got = ex.run(feed);
        REQUIRE(got.size() == ref.outputs.size());
        const double loss_diff = max_rel_diff(floats(got[0].bytes.data(), got[0].bytes.size()),
                                              floats(ref.outputs[0].bytes.data(), ref.outputs[0].bytes.size()));
        CHECK(loss_diff <= 1e-5);
        double worst_grad = 0.0, worst_weight = 0.0;
        for (std::size_t k = 0; k < tg.param_grads.size(); ++k) {
          const auto [w, gt] = tg.param_grads[k];
          const auto gv = ex.read(gt);
          const double dg = max_rel_diff(floats(gv.bytes.data(), gv.bytes.size()), ref.values(tg.graph, gt));
          INFO("gradient of " << tg.graph.tensors[w].name);
          CHECK(dg <= 1e-4);
          worst_grad = std::max(worst_grad, dg);
          const TensorId u = k < tg.updated_weights.size() ? tg.updated_weights[k] : analysis::kNoTensor;
          if (u == analysis::kNoTensor) continue;
          const auto uv = ex.read(u);
          const auto updated = floats(uv.bytes.data(), uv.bytes.size());
          const auto& update_op = tg.graph.ops[tg.graph.tensors[u].producer];
          const double du = update_op.type == "AdamUpdate"
                                ? adam_first_step_diff(update_op, initial_values(tg.graph, update_op.inputs[0]),
                                                       floats(gv.bytes.data(), gv.bytes.size()), ref.values(tg.graph, gt),
                                                       updated, ref.values(tg.graph, u))
                                : max_rel_diff(updated, ref.values(tg.graph, u));
          CHECK(du <= 1e-4);
          worst_weight = std::max(worst_weight, du);
        }
        CHECK(ex.stats().arena_bytes == r.plan.arena_bytes);
        MESSAGE(name << " " << std::string(analysis::optimizer_name(opt)) << " " << r.strategy << ": arena " << r.plan.arena_bytes
                     << " B, recompute ops " << r.recompute_ops << ", swapped " << r.swapped_tensors << ", loss diff "
                     << loss_diff << ", worst gradient diff " << worst_grad << ", worst updated-weight diff " << worst_weight);
      }
    }
  }
}

TEST_CASE("sgd, momentum, adam and adamw with weight decay: three in-place steps on the GPU follow the CPU executor's") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  const std::string name = "tiny_mlp";
  for (auto opt : {analysis::Optimizer::sgd, analysis::Optimizer::momentum, analysis::Optimizer::adam, analysis::Optimizer::adamw}) {
    for (std::int64_t micro : {1, 2}) {
      INFO(analysis::optimizer_name(opt) << " microbatches " << micro);
      analysis::ImportOptions io;
      io.keep_weight_data = true;
      analysis::TrainingOptions to;
      to.optimizer = opt;
      to.weight_decay = 0.05;
      to.learning_rate = opt == analysis::Optimizer::adam || opt == analysis::Optimizer::adamw ? 1e-3 : 0.05;
      to.microbatches = micro;
      const auto tg = analysis::build_training_graph(
          analysis::infer_shapes(analysis::import_onnx(models_dir() + name + ".onnx", io), {}), to);
      const auto in = feeds(name, tg.graph);
      const auto r = planner::plan_training(tg, planner::TrainingPlanOptions{});
      REQUIRE(r.report.valid);
      runtime::HostBackend cpu_backend;
      runtime::Executor cpu(r.graph, r.plan, cpu_backend);
      CudaBackend gpu_backend;
      runtime::Executor gpu(r.graph, r.plan, gpu_backend);
      for (int step = 1; step <= 3; ++step) {
        CAPTURE(step);
        cpu.run(in);
        gpu.run(in);
        for (std::size_t k = 0; k < tg.updated_weights.size(); ++k) {
          const TensorId w = tg.param_grads[k].first;
          CHECK(gpu.address(tg.updated_weights[k]) == gpu.address(w));
          const auto gv = gpu.read(w), cv = cpu.read(w);
          const auto got = floats(gv.bytes.data(), gv.bytes.size()), want = floats(cv.bytes.data(), cv.bytes.size());
          // Adam moves an element with a near-zero gradient by up to lr on a rounding difference (see above):
          // at most a few such elements, none by more than a step of lr each.
          std::size_t off = 0;
          for (std::size_t i = 0; i < got.size(); ++i) {
            const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
            off += d > 1e-4 * std::max(1.0, std::fabs(static_cast<double>(want[i])));
            CHECK(d <= 3.0 * to.learning_rate + 1e-6);
          }
          INFO("weight " << tg.graph.tensors[w].name << ": " << off << " of " << got.size() << " elements off");
          CHECK(off * 100 <= got.size());
        }
      }
    }
  }
}

TEST_CASE(
    "BatchNormTraining and BatchNormGrad on the GPU equal the CPU kernels: output, running and saved statistics, gradients") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  // The last two split each channel over many blocks (the partial sums' path), one with a plane of odd size.
  const std::vector<std::vector<std::int64_t>> shapes{{3, 5, 7, 9}, {6, 4}, {4, 3, 33, 35}, {2, 8, 1, 1}, {16, 3, 64, 64}, {9, 2, 61, 67}};
  for (const auto& xd : shapes) {
    CAPTURE(xd.size());
    CAPTURE(xd[0] * xd[1]);
    std::mt19937 rng(3);
    OpGraph b;
    const std::vector<std::int64_t> c{xd[1]};
    const TensorId x = b.input("x", random_f32(xd, rng, -2.0, 3.0)), dy = b.input("dy", random_f32(xd, rng));
    const TensorId scale = b.constant("scale", random_f32(c, rng, 0.5, 1.5)), bias = b.constant("bias", random_f32(c, rng));
    const TensorId rm = b.constant("rm", random_f32(c, rng)), rv = b.constant("rv", random_f32(c, rng, 0.5, 1.5));
    const TensorId y = b.result("y", DType::f32, xd), rm_out = b.result("rm_out", DType::f32, c),
                   rv_out = b.result("rv_out", DType::f32, c), mean = b.result("mean", DType::f32, c),
                   invstd = b.result("invstd", DType::f32, c);
    b.op("BatchNormTraining", "memplan", {x, scale, bias, rm, rv}, {y, rm_out, rv_out, mean, invstd},
         {{"epsilon", float_attr(1e-3)}, {"momentum", float_attr(0.8)}});
    const TensorId dx = b.result("dx", DType::f32, xd), dscale = b.result("dscale", DType::f32, c),
                   dbias = b.result("dbias", DType::f32, c);
    b.op("BatchNormGrad", "memplan", {dy, x, scale, mean, invstd}, {dx, dscale, dbias});
    check_against_cpu(b, {y, rm_out, rv_out, mean, invstd, dx, dscale, dbias}, 1e-4);
  }
}

TEST_CASE("MatMulT on the GPU equals the CPU kernel for every transpose combination, broadcast and summed-down batches") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  struct Case {
    std::vector<std::int64_t> a, b, y;  // A's and B's stored dims, Y's (summed down where smaller)
  };
  std::mt19937 rng(5);
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const std::int64_t M = 33, K = 17, N = 40;
      const std::vector<std::int64_t> a2 = ta ? std::vector<std::int64_t>{K, M} : std::vector<std::int64_t>{M, K};
      const std::vector<std::int64_t> b2 = tb ? std::vector<std::int64_t>{N, K} : std::vector<std::int64_t>{K, N};
      auto batched = [](std::vector<std::int64_t> pre, const std::vector<std::int64_t>& m) {
        pre.insert(pre.end(), m.begin(), m.end());
        return pre;
      };
      const std::vector<Case> cases{
          {batched({3, 5}, a2), b2, {3, 5, M, N}},              // B shared by every batch
          {a2, batched({4}, b2), {4, M, N}},                    // A shared
          {batched({2, 1}, a2), batched({1, 3}, b2), {2, 3, M, N}},  // both broadcast
          {batched({3, 5}, a2), batched({3, 5}, b2), {M, N}},        // every batch summed into one product
          {batched({3, 5}, a2), batched({5}, b2), {3, 1, M, N}},     // summed over one axis
      };
      for (const Case& c : cases) {
        CAPTURE(ta);
        CAPTURE(tb);
        CAPTURE(c.a.size());
        CAPTURE(c.b.size());
        CAPTURE(c.y.size());
        OpGraph g;
        const TensorId a = g.input("a", random_f32(c.a, rng)), b = g.input("b", random_f32(c.b, rng));
        const TensorId y = g.result("y", DType::f32, c.y);
        g.op("MatMulT", "memplan", {a, b}, {y}, {{"trans_a", int_attr(ta)}, {"trans_b", int_attr(tb)}});
        check_against_cpu(g, {y}, 1e-4);
      }
    }
}

TEST_CASE("AveragePoolGrad, SliceGrad, GatherGrad and SplitGrad on the GPU equal the CPU kernels") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  std::mt19937 rng(4);
  for (const std::int64_t include_pad : {0, 1}) {
    OpGraph b;
    const TensorId dy = b.input("dy", random_f32({2, 3, 5, 5}, rng));
    const TensorId dx = b.result("dx", DType::f32, {2, 3, 10, 10});
    b.op("AveragePoolGrad", "memplan", {dy}, {dx},
         {{"kernel_shape", ints_attr({3, 3})},
          {"strides", ints_attr({2, 2})},
          {"pads", ints_attr({1, 1, 1, 1})},
          {"count_include_pad", int_attr(include_pad)}});
    const TensorId dy1 = b.input("dy1", random_f32({2, 3, 4}, rng));  // 1-D, kernel 4 stride 3 dilation 1 over 11
    const TensorId dx1 = b.result("dx1", DType::f32, {2, 3, 11});
    b.op("AveragePoolGrad", "memplan", {dy1}, {dx1},
         {{"kernel_shape", ints_attr({4})},
          {"strides", ints_attr({3})},
          {"pads", ints_attr({2, 1})},
          {"count_include_pad", int_attr(include_pad)}});
    check_against_cpu(b, {dx, dx1});
  }
  {
    OpGraph b;  // x [4, 6, 8] sliced rows 1 and 3, columns 2, 1, 0 (step -1)
    const TensorId dy = b.input("dy", random_f32({2, 6, 3}, rng));
    const TensorId starts = b.constant("starts", ints(DType::i64, {2}, {1, -6}));
    const TensorId ends = b.constant("ends", ints(DType::i64, {2}, {4, -100}));
    const TensorId axes = b.constant("axes", ints(DType::i64, {2}, {0, 2}));
    const TensorId steps = b.constant("steps", ints(DType::i64, {2}, {2, -1}));
    const TensorId dx = b.result("dx", DType::f32, {4, 6, 8});
    b.op("SliceGrad", "memplan", {dy, starts, ends, axes, steps}, {dx});
    // Unit steps (the zero-padding pass): a roll's two pieces, x[:, -3:] and x[:, :-3] of [4, 7, 5], and a slice in
    // the middle of two axes.
    const TensorId dya = b.input("dya", random_f32({4, 3, 5}, rng)), dyb = b.input("dyb", random_f32({4, 4, 5}, rng));
    const TensorId dyc = b.input("dyc", random_f32({2, 7, 3}, rng));
    const TensorId s1 = b.constant("s1", ints(DType::i64, {1}, {-3})), e1 = b.constant("e1", ints(DType::i64, {1}, {100}));
    const TensorId s2 = b.constant("s2", ints(DType::i64, {1}, {0})), e2 = b.constant("e2", ints(DType::i64, {1}, {-3}));
    const TensorId a1 = b.constant("a1", ints(DType::i64, {1}, {1}));
    const TensorId s3 = b.constant("s3", ints(DType::i64, {2}, {1, 1})), e3 = b.constant("e3", ints(DType::i64, {2}, {3, 4}));
    const TensorId a3 = b.constant("a3", ints(DType::i64, {2}, {0, 2}));
    const TensorId dxa = b.result("dxa", DType::f32, {4, 7, 5}), dxb = b.result("dxb", DType::f32, {4, 7, 5});
    const TensorId dxc = b.result("dxc", DType::f32, {4, 7, 5});
    b.op("SliceGrad", "memplan", {dya, s1, e1, a1}, {dxa});
    b.op("SliceGrad", "memplan", {dyb, s2, e2, a1}, {dxb});
    b.op("SliceGrad", "memplan", {dyc, s3, e3, a3}, {dxc});
    // memplan Roll (torch.roll): two axes with a wrapped negative shift (4-byte units: 3 channels), one axis of a
    // [4, 7, 8] tensor whose rows of 8 floats move as 16-byte units, and an int64 tensor.
    const TensorId rx = b.input("rx", random_f32({4, 7, 5}, rng)), ry = b.result("ry", DType::f32, {4, 7, 5});
    b.op("Roll", "memplan", {rx}, {ry}, {{"shifts", ints_attr({-3, 9})}, {"axes", ints_attr({1, 0})}});
    const TensorId qx = b.input("qx", random_f32({4, 7, 8}, rng)), qy = b.result("qy", DType::f32, {4, 7, 8});
    b.op("Roll", "memplan", {qx}, {qy}, {{"shifts", ints_attr({2})}, {"axes", ints_attr({-2})}});
    const TensorId ix = b.input("ix", ints(DType::i64, {6}, {1, 2, 3, 4, 5, 6})), iy = b.result("iy", DType::i64, {6});
    b.op("Roll", "memplan", {ix}, {iy}, {{"shifts", ints_attr({4})}, {"axes", ints_attr({0})}});
    check_against_cpu(b, {dx, dxa, dxb, dxc, ry, qy, iy}, 0.0);
  }
  {
    OpGraph b;  // repeated and negative indices: summed in order, bit-equal to the CPU
    const TensorId dy = b.input("dy", random_f32({7, 33}, rng));
    const TensorId idx = b.input("idx", ints(DType::i64, {7}, {3, -1, 3, 0, 9, 3, 2}));
    const TensorId dx = b.result("dx", DType::f32, {10, 33});
    b.op("GatherGrad", "memplan", {dy, idx}, {dx}, {{"axis", int_attr(0)}});
    const TensorId dy1 = b.input("dy1", random_f32({3, 2, 3, 5}, rng));
    const TensorId idx1 = b.constant("idx1", ints(DType::i32, {2, 3}, {1, 4, 1, -2, 0, 1}));
    const TensorId dx1 = b.result("dx1", DType::f32, {3, 6, 5});
    b.op("GatherGrad", "memplan", {dy1, idx1}, {dx1}, {{"axis", int_attr(1)}});
    check_against_cpu(b, {dx, dx1}, 0.0);
  }
  {
    OpGraph b;  // a small table gathered at many indices (a relative-position bias): the block-per-column path
    std::vector<std::int64_t> ids(64 * 80);
    for (std::size_t j = 0; j < ids.size(); ++j) ids[j] = static_cast<std::int64_t>((j * 7 + j / 80) % 32) - (j % 5 == 0 ? 32 : 0);
    const TensorId dy = b.input("dy", random_f32({64, 80, 4}, rng));
    const TensorId idx = b.constant("idx", ints(DType::i64, {64, 80}, ids));
    const TensorId dx = b.result("dx", DType::f32, {32, 4});
    b.op("GatherGrad", "memplan", {dy, idx}, {dx}, {{"axis", int_attr(0)}});
    check_against_cpu(b, {dx}, 1e-4);
  }
  {
    OpGraph b;  // narrow rows (a relative-position bias table of 6 heads gathered at 197 x 197 pairs): a warp per row,
                // bit-equal to the CPU's sequential sums; rows of 40 columns (two per lane); rows of 130 (a thread per column)
    std::vector<std::int64_t> ids(197 * 197);
    for (std::size_t j = 0; j < ids.size(); ++j) ids[j] = static_cast<std::int64_t>((j * 37 + j / 197) % 735) - (j % 11 == 0 ? 735 : 0);
    const TensorId dy = b.input("dy", random_f32({197 * 197, 6}, rng));
    const TensorId idx = b.constant("idx", ints(DType::i64, {197 * 197}, ids));
    const TensorId dx = b.result("dx", DType::f32, {735, 6});
    b.op("GatherGrad", "memplan", {dy, idx}, {dx}, {{"axis", int_attr(0)}});
    std::vector<std::int32_t> ids1(999);
    for (std::size_t j = 0; j < ids1.size(); ++j) ids1[j] = static_cast<std::int32_t>((j * 13) % 50);
    const TensorId idx1 = b.constant("idx1", ints(DType::i32, {999}, std::vector<std::int64_t>(ids1.begin(), ids1.end())));
    const TensorId dy1 = b.input("dy1", random_f32({2, 999, 40}, rng));
    const TensorId dx1 = b.result("dx1", DType::f32, {2, 50, 40});
    b.op("GatherGrad", "memplan", {dy1, idx1}, {dx1}, {{"axis", int_attr(1)}});
    const TensorId dy2 = b.input("dy2", random_f32({999, 130}, rng));
    const TensorId dx2 = b.result("dx2", DType::f32, {50, 130});
    b.op("GatherGrad", "memplan", {dy2, idx1}, {dx2}, {{"axis", int_attr(0)}});
    check_against_cpu(b, {dx, dx1, dx2}, 0.0);
  }
  {
    OpGraph b;  // the middle piece has no gradient: zeros there
    const TensorId p0 = b.input("p0", random_f32({3, 2, 4}, rng)), p2 = b.input("p2", random_f32({3, 4, 4}, rng));
    const TensorId dx = b.result("dx", DType::f32, {3, 9, 4});
    b.op("SplitGrad", "memplan", {p0, analysis::kNoTensor, p2}, {dx}, {{"axis", int_attr(1)}, {"split", ints_attr({2, 3, 4})}});
    check_against_cpu(b, {dx}, 0.0);
  }
}

TEST_CASE("ReduceSumTo and ReduceMean over leading axes (the column reductions) on the GPU equal the CPU kernels") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  std::mt19937 rng(11);
  OpGraph b;
  // A bias gradient split over many row chunks, one with a single chunk, odd column counts, a kept axis of size 1.
  const TensorId dy = b.input("dy", random_f32({6, 301, 70}, rng));
  const TensorId db = b.result("db", DType::f32, {70});
  b.op("ReduceSumTo", "memplan", {dy}, {db}, {{"scale", float_attr(0.5)}});
  const TensorId dk = b.result("dk", DType::f32, {1, 301, 70});
  b.op("ReduceSumTo", "memplan", {dy}, {dk});
  const TensorId small = b.input("small", random_f32({5, 3, 33}, rng));
  const TensorId ds = b.result("ds", DType::f32, {1, 1, 33});
  b.op("ReduceSumTo", "memplan", {small}, {ds});
  const TensorId mean = b.result("mean", DType::f32, {1, 1, 70});
  b.op("ReduceMean", "", {dy}, {mean}, {{"axes", ints_attr({0, 1})}});
  check_against_cpu(b, {db, dk, ds, mean}, 1e-5);
}

TEST_CASE("training-mode Dropout draws bit-identical masks and outputs on the GPU and the CPU, and DropoutGrad agrees") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  std::mt19937 rng(6);
  for (const float ratio : {0.0f, 0.2f, 0.5f, 1.0f}) {
    CAPTURE(ratio);
    OpGraph b;
    const std::vector<std::int64_t> d{33, 1001};
    const TensorId x = b.input("x", random_f32(d, rng)), dy = b.input("dy", random_f32(d, rng));
    const TensorId r = b.constant("ratio", TensorData::from_double(DType::f32, {}, {ratio}));
    const TensorId on = b.constant("training", ints(DType::boolean, {}, {1}));
    const TensorId y = b.result("y", DType::f32, d), mask = b.result("mask", DType::boolean, d);
    const TensorId dx = b.result("dx", DType::f32, d);
    b.op("Dropout", "", {x, r, on}, {y, mask}, {{"seed", int_attr(42)}});
    b.op("DropoutGrad", "memplan", {dy, mask, r}, {dx});
    const TensorId y2 = b.result("y2", DType::f32, d), mask2 = b.result("mask2", DType::boolean, d);
    b.op("Dropout", "", {x, r, on}, {y2, mask2});  // the default seed
    check_against_cpu(b, {y, mask, dx, y2, mask2}, 0.0);
  }
}

TEST_CASE("RandomUniformLike draws bit-identical values, Pad pads and crops in every mode, and CumSum and GatherElements agree on the GPU and the CPU") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  std::mt19937 rng(7);
  OpGraph b;
  const std::vector<std::int64_t> d{37, 3, 513};
  const TensorId x = b.input("x", random_f32(d, rng));
  const TensorId u = b.result("u", DType::f32, d), u0 = b.result("u0", DType::f32, d), u64 = b.result("u64", DType::f64, d);
  b.op("RandomUniformLike", "", {x}, {u}, {{"seed", int_attr(11)}, {"low", float_attr(-0.5)}, {"high", float_attr(2.0)}});
  b.op("RandomUniformLike", "", {x}, {u0}, {{"dtype", int_attr(1)}});  // the default seed, [0, 1)
  b.op("RandomUniformLike", "", {x}, {u64}, {{"dtype", int_attr(static_cast<std::int64_t>(DType::f64))}});
  std::vector<TensorId> checked{u, u0, u64};
  // Constant mode with crops (negative pads) and a pad value, then reflect, edge and wrap with a crop on one side.
  const TensorId small = b.input("small", random_f32({4, 5, 6}, rng));
  const TensorId pads = b.constant("pads", ints(DType::i64, {6}, {1, -2, 3, 2, 1, -1}));
  const TensorId value = b.constant("value", TensorData::from_double(DType::f32, {}, {0.75}));
  checked.push_back(b.result("pad_constant", DType::f32, {7, 4, 8}));
  b.op("Pad", "", {small, pads}, {checked.back()});
  checked.push_back(b.result("pad_value", DType::f32, {7, 4, 8}));
  b.op("Pad", "", {small, pads, value}, {checked.back()});
  const TensorId axes = b.constant("axes", ints(DType::i64, {2}, {-1, 0}));
  const TensorId axis_pads = b.constant("axis_pads", ints(DType::i64, {4}, {-2, 1, 3, 0}));
  checked.push_back(b.result("pad_axes", DType::f32, {5, 5, 7}));
  b.op("Pad", "", {small, axis_pads, value, axes}, {checked.back()});
  const TensorId mode_pads = b.constant("mode_pads", ints(DType::i64, {6}, {2, -1, 3, 1, 2, -2}));
  for (const char* mode : {"reflect", "edge", "wrap"}) {
    checked.push_back(b.result(std::string("pad_") + mode, DType::f32, {7, 6, 7}));
    b.op("Pad", "", {small, mode_pads}, {checked.back()}, {{"mode", string_attr(mode)}});
  }
  const TensorId ids = b.constant("ids", ints(DType::i64, {2, 3}, {0, 1, 2, 3, 4, 5}));
  checked.push_back(b.result("pad_int64", DType::i64, {2, 6}));
  b.op("Pad", "", {ids, b.constant("int_pads", ints(DType::i64, {4}, {0, 1, 0, 2}))}, {checked.back()});
  // CumSum: int64 position ids along the last axis (exclusive, reversed), float along axis 1 (small values: exact).
  checked.push_back(b.result("cumsum_ids", DType::i64, {2, 3}));
  b.op("CumSum", "", {ids, b.constant("last", ints(DType::i64, {}, {-1}))}, {checked.back()}, {{"exclusive", int_attr(1)}, {"reverse", int_attr(1)}});
  const TensorId quarters = b.input("quarters", TensorData::from_double(DType::f32, {3, 4, 2}, std::vector<double>(24, 0.25)));
  checked.push_back(b.result("cumsum_f32", DType::f32, {3, 4, 2}));
  b.op("CumSum", "", {quarters, b.constant("one", ints(DType::i32, {}, {1}))}, {checked.back()});
  // GatherElements along axis 1 with negative indices, over float and int64 data.
  const TensorId picks = b.constant("picks", ints(DType::i64, {4, 2, 6}, {0, -1, 2, 3, 4, 1, 2, 0, -2, 4, 3, 1, 1, 1, 0, 0, 2, 3,
                                                                       4, -5, 3, 2, 1, 0, 0, 2, 4, 1, 3, -1, 2, 2, 2, 2, 0, 1,
                                                                       1, 3, 0, 4, 2, 1, 0, 0, 1, 1, 2, 2}));
  checked.push_back(b.result("gather_elements", DType::f32, {4, 2, 6}));
  b.op("GatherElements", "", {small, picks}, {checked.back()}, {{"axis", int_attr(1)}});
  checked.push_back(b.result("gather_ids", DType::i64, {2, 2}));
  b.op("GatherElements", "", {ids, b.constant("cols", ints(DType::i64, {2, 2}, {2, 0, -1, 1}))}, {checked.back()}, {{"axis", int_attr(1)}});
  check_against_cpu(b, checked, 0.0);
}

TEST_CASE(
    "IsNaN, Where and WhereGrad with bool conditions, Tile, Shape, ConstantOfShape, ReduceProd and ReduceSumSquare on the "
    "GPU equal the CPU kernels") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  std::mt19937 rng(8);
  OpGraph b;
  auto xv = random_f32({4, 5, 6}, rng);
  const float nan = std::nanf("");
  for (std::size_t i = 0; i < 120; i += 7) std::memcpy(xv.bytes.data() + i * 4, &nan, 4);
  const TensorId x = b.input("x", xv), dy = b.input("dy", random_f32({4, 5, 6}, rng));
  const TensorId nan_mask = b.result("isnan", DType::boolean, {4, 5, 6});
  b.op("IsNaN", "", {x}, {nan_mask});
  const TensorId zero = b.constant("zero", TensorData::from_double(DType::f32, {1}, {0.0}));
  const TensorId clean = b.result("clean", DType::f32, {4, 5, 6});
  b.op("Where", "", {nan_mask, zero, x}, {clean});
  const TensorId row_mask = b.constant("row_mask", ints(DType::boolean, {5, 1}, {1, 0, 0, 1, 1}));
  const TensorId picked = b.result("picked", DType::f32, {4, 5, 6});
  b.op("Where", "", {row_mask, clean, dy}, {picked});
  const TensorId dwhere = b.result("dwhere", DType::f32, {4, 5, 6}), dwhere0 = b.result("dwhere0", DType::f32, {4, 5, 6});
  b.op("WhereGrad", "memplan", {dy, nan_mask}, {dwhere}, {{"select", int_attr(1)}});
  b.op("WhereGrad", "memplan", {dy, row_mask}, {dwhere0}, {{"select", int_attr(0)}});
  const TensorId small = b.input("small", random_f32({2, 1, 3}, rng, 0.5, 1.5));
  const TensorId reps = b.constant("reps", ints(DType::i64, {3}, {3, 4, 2}));
  const TensorId tiled = b.result("tiled", DType::f32, {6, 4, 6});
  b.op("Tile", "", {small, reps}, {tiled});
  const TensorId shape = b.result("shape", DType::i64, {2});
  b.op("Shape", "", {tiled}, {shape}, {{"start", int_attr(1)}});
  const TensorId shape_in = b.constant("shape_in", ints(DType::i64, {2}, {3, 129}));
  const TensorId filled = b.result("filled", DType::f32, {3, 129});
  b.op("ConstantOfShape", "", {shape_in}, {filled}, {{"value", tensor_attr(TensorData::from_double(DType::f32, {1}, {2.5}))}});
  const TensorId prod = b.result("prod", DType::f32, {6, 1, 6}), sumsq = b.result("sumsq", DType::f32, {1, 4, 1});
  b.op("ReduceProd", "", {tiled}, {prod}, {{"axes", ints_attr({1})}});
  b.op("ReduceSumSquare", "", {tiled}, {sumsq}, {{"axes", ints_attr({0, -1})}});
  check_against_cpu(b, {nan_mask, clean, picked, dwhere, dwhere0, tiled, shape, filled, prod, sumsq}, 0.0);
}

TEST_CASE("comparisons, logic ops, integer arithmetic, Cast, Sin and Cos on the GPU equal the CPU kernels, with broadcasting") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  std::mt19937 rng(9);
  OpGraph b;
  // Small integers, so that Equal is sometimes true; bools as 0/1.
  auto values = [&](const std::string& name, DType dt, const std::vector<std::int64_t>& dims) {
    std::size_t n = 1;
    for (auto k : dims) n *= static_cast<std::size_t>(k);
    std::vector<std::int64_t> v(n);
    for (auto& e : v) e = dt == DType::boolean ? static_cast<std::int64_t>(rng() % 2) : static_cast<std::int64_t>(rng() % 5) - 2;
    return b.constant(name, dt == DType::f32 ? TensorData::from_double(dt, dims, std::vector<double>(v.begin(), v.end()))
                                             : ints(dt, dims, v));
  };
  std::vector<TensorId> checked;
  for (DType dt : {DType::f32, DType::i64, DType::i32, DType::boolean}) {
    const std::string d = analysis::dtype_name(dt);
    const TensorId a = values("a_" + d, dt, {4, 1, 6});
    const TensorId c = values("c_" + d, dt, {5, 1});
    for (const char* cmp : {"Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual"}) {
      checked.push_back(b.result(std::string(cmp) + "_" + d, DType::boolean, {4, 5, 6}));
      b.op(cmp, "", {a, c}, {checked.back()});
    }
    for (DType to : {DType::f32, DType::i64, DType::i32, DType::boolean}) {
      checked.push_back(b.result("cast_" + d + "_" + analysis::dtype_name(to), to, {4, 1, 6}));
      b.op("Cast", "", {a}, {checked.back()}, {{"to", int_attr(static_cast<std::int64_t>(to))}});
    }
    if (dt == DType::boolean) {
      for (const char* logic : {"And", "Or"}) {
        checked.push_back(b.result(std::string(logic), DType::boolean, {4, 5, 6}));
        b.op(logic, "", {a, c}, {checked.back()});
      }
      checked.push_back(b.result("not", DType::boolean, {4, 1, 6}));
      b.op("Not", "", {a}, {checked.back()});
    }
    if (dt == DType::i64 || dt == DType::i32)
      for (const char* arith : {"Add", "Sub", "Mul", "Min", "Max"}) {
        checked.push_back(b.result(std::string(arith) + "_" + d, dt, {4, 5, 6}));
        b.op(arith, "", {a, c}, {checked.back()});
      }
  }
  check_against_cpu(b, checked, 0.0);
  OpGraph t;
  const TensorId x = t.input("x", random_f32({3, 7, 11}, rng, -10.0, 10.0));
  const TensorId sin = t.result("sin", DType::f32, {3, 7, 11}), cos = t.result("cos", DType::f32, {3, 7, 11});
  t.op("Sin", "", {x}, {sin});
  t.op("Cos", "", {x}, {cos});
  check_against_cpu(t, {sin, cos}, 1e-6);
}

TEST_CASE(
    "training steps of mobilenet_v2 and resnet18 at batch 2 with synthesized weights give the CPU executor's loss, "
    "weight gradients and BatchNorm running statistics on the GPU") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  for (const std::string name : {"mobilenet_v2.train", "resnet18.train"}) {
    INFO("model " << name);
    analysis::ImportOptions io;
    io.keep_weight_data = true;
    analysis::ShapeOptions so;
    so.dims["batch"] = 2;
    auto tg = analysis::build_training_graph(analysis::infer_shapes(analysis::import_onnx(models_dir() + name + ".onnx", io), so),
                                             analysis::TrainingOptions{});
    synthesize_weights(tg.graph);
    std::mt19937 rng(23);
    std::vector<TensorData> in;
    std::map<std::string, HostValue> feed;
    for (TensorId t : tg.graph.inputs) {
      const auto& x = tg.graph.tensors[t];
      in.push_back(x.dtype == DType::f32
                       ? random_f32(x.shape(), rng)
                       : TensorData::from_double(x.dtype, x.shape(), std::vector<double>(x.element_count(), 0.0)));
      feed[tg.graph.tensors[t].name] = HostValue{in.back().dtype, in.back().dims, in.back().bytes};
    }
    Reference ref;
    ref.ex = std::make_unique<runtime::Executor>(tg.graph, planner::Plan{}, ref.backend, runtime::ExecOptions{.unshared = true});
    ref.outputs = ref.ex->run(in);
    const auto r = planner::plan_training(tg, planner::TrainingPlanOptions{});
    REQUIRE(r.report.valid);
    CudaBackend ex_backend;
    runtime::Executor ex(r.graph, r.plan, ex_backend);
    const auto got = ex.run(feed);
    REQUIRE(got.size() == ref.outputs.size());
    CHECK(max_rel_diff(floats(got[0].bytes.data(), got[0].bytes.size()),
                       floats(ref.outputs[0].bytes.data(), ref.outputs[0].bytes.size())) <= 1e-4);
    // Gradients. A deep network trained at batch 2 amplifies rounding: BatchNorm's backward over a few dozen elements
    // per channel cancels large terms, and cuDNN's convolution algorithms sum in other orders than the CPU loops (the
    // single ops agree within 1e-5, the tests above). So the step is checked (a) elementwise within 2e-3 (relative
    // above 1) and (b) per tensor in relative L2 within 1e-2, for tensors whose norm is above 1e-4 of the largest:
    // the others are zero in exact arithmetic (a BatchNorm bias feeding a linear layer and another BatchNorm).
    std::vector<double> norms, errors, elementwise;
    for (const auto& [w, gt] : tg.param_grads) {
      const auto gv = ex.read(gt);
      const auto a = floats(gv.bytes.data(), gv.bytes.size()), b = ref.values(tg.graph, gt);
      double norm = 0.0, err = 0.0;
      for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
        norm += static_cast<double>(b[i]) * b[i];
        err += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
      }
      norms.push_back(std::sqrt(norm));
      errors.push_back(std::sqrt(err));
      elementwise.push_back(max_rel_diff(a, b));
    }
    const double largest = norms.empty() ? 0.0 : *std::max_element(norms.begin(), norms.end());
    double worst = 0.0, worst_l2 = 0.0;
    for (std::size_t k = 0; k < norms.size(); ++k) {
      INFO("gradient of " << tg.graph.tensors[tg.param_grads[k].first].name << ": norm " << norms[k] << ", error norm "
                          << errors[k]);
      CHECK(elementwise[k] <= 2e-3);
      worst = std::max(worst, elementwise[k]);
      if (norms[k] <= 1e-4 * largest) continue;
      CHECK(errors[k] / norms[k] <= 1e-2);
      worst_l2 = std::max(worst_l2, errors[k] / norms[k]);
    }
    std::size_t stats = 0;
    for (const auto& op : tg.graph.ops)
      if (op.type == "BatchNormTraining")
        for (std::size_t k = 1; k < 3; ++k)
          if (op.output(k) != analysis::kNoTensor) {
            INFO("running statistic " << tg.graph.tensors[op.output(k)].name);
            const auto v = ex.read(op.output(k));
            CHECK(max_rel_diff(floats(v.bytes.data(), v.bytes.size()), ref.values(tg.graph, op.output(k))) <= 1e-4);
            ++stats;
          }
    CHECK(stats > 0);
    MESSAGE(name << ": " << tg.param_grads.size() << " gradients, worst elementwise diff " << worst << ", worst relative L2 "
                 << worst_l2 << ", " << stats << " running statistics");
  }
}

TEST_CASE("the training steps of resnet50 and bert_base (Adam) run on the GPU with synthesized weights to a finite loss") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  const std::vector<std::pair<std::string, analysis::DimBindings>> models{{"resnet50.train", {{"batch", 2}}},
                                                                          {"bert_base.dyn", {{"batch", 2}, {"seq", 16}}}};
  for (const auto& [name, dims] : models) {
    INFO("model " << name);
    analysis::ImportOptions io;
    io.keep_weight_data = true;
    analysis::ShapeOptions so;
    so.dims = dims;
    analysis::TrainingOptions to;
    to.optimizer = analysis::Optimizer::adam;
    const auto tg =
        analysis::build_training_graph(analysis::infer_shapes(analysis::import_onnx(models_dir() + name + ".onnx", io), so), to);
    std::mt19937 rng(29);
    std::map<std::string, HostValue> feed;
    for (TensorId t : tg.graph.inputs) {
      const auto& x = tg.graph.tensors[t];
      // Token ids, token types and attention masks of 1 are valid for BERT; floats are uniform in [-1, 1].
      const TensorData v = x.dtype == DType::f32
                               ? random_f32(x.shape(), rng)
                               : TensorData::from_double(x.dtype, x.shape(), std::vector<double>(x.element_count(), 1.0));
      feed[x.name] = HostValue{v.dtype, v.dims, v.bytes};
    }
    const auto r = planner::plan_training(tg, planner::TrainingPlanOptions{});
    REQUIRE(r.report.valid);
    runtime::ExecOptions o;
    o.synthesize_missing_weights = true;
    CudaBackend gpu;
    runtime::Executor ex(r.graph, r.plan, gpu, o);
    const auto got = ex.run(feed);
    REQUIRE(!got.empty());
    const auto loss = floats(got[0].bytes.data(), got[0].bytes.size());
    REQUIRE(loss.size() == 1);
    CHECK(std::isfinite(loss[0]));
    std::size_t finite = 0;
    for (const auto& [w, gt] : tg.param_grads) {
      const auto gv = ex.read(gt);
      const auto g = floats(gv.bytes.data(), gv.bytes.size());
      finite += std::all_of(g.begin(), g.end(), [](float v) { return std::isfinite(v); });
    }
    CHECK(finite == tg.param_grads.size());
    MESSAGE(name << ": loss " << loss[0] << ", " << r.graph.ops.size() << " ops, " << finite << " finite gradients");
  }
}

#endif  // MEMPLAN_HAVE_CUDA
