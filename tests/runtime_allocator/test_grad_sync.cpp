// Data-parallel gradient reduction in the executor, on the CPU: every weight gradient reduced once, after its producer
// and before its update (the event order a GPU's streams follow), and two ranks as threads train as one process on
// the combined batch.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <thread>

#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "planner/training_plan.hpp"
#include "runtime_allocator/collectives/collectives.hpp"
#include "runtime_allocator/executor.hpp"
#include "tests/runtime_allocator/op_graph.hpp"
#include "tests/runtime_allocator/training_fixture.hpp"

using namespace memplan;
using namespace memplan::runtime;
using namespace memplan::runtime::testing;
using analysis::TensorData;
using analysis::TensorId;

namespace {

// What happened, in order: an op ran, an event was recorded or waited for on either queue, a reduction ran.
struct Entry {
  enum Kind { op, compute_record, compute_wait, queue_wait, queue_record, reduce } kind;
  std::uint64_t id = 0;  // op id or event
  const std::byte* data = nullptr;
  std::uint64_t bytes = 0;
};
using Log = std::vector<Entry>;

class LoggingKernels final : public KernelSet {
 public:
  LoggingKernels(KernelSet& k, Log& log) : k_(k), log_(log) {}
  std::string unsupported_reason(const analysis::Graph& g, const analysis::Op& op) const override {
    return k_.unsupported_reason(g, op);
  }
  bool alias_safe(const analysis::Op& op) const override { return k_.alias_safe(op); }
  void run(const OpCall& call) override {
    k_.run(call);
    log_.push_back({Entry::op, call.id});
  }

 private:
  KernelSet& k_;
  Log& log_;
};

// The host backend with its events numbered and logged.
class LoggingBackend final : public Backend {
 public:
  explicit LoggingBackend(Log& log) : log_(log), kernels_(host_.kernels(), log) {}
  std::string name() const override { return "logging host"; }
  std::byte* allocate(std::uint64_t b, std::uint64_t a) override { return host_.allocate(b, a); }
  void deallocate(std::byte* p, std::uint64_t b) noexcept override { host_.deallocate(p, b); }
  void copy_to_device(std::byte* d, const std::byte* s, std::uint64_t b) override { host_.copy_to_device(d, s, b); }
  void copy_to_host(std::byte* d, const std::byte* s, std::uint64_t b) override { host_.copy_to_host(d, s, b); }
  void copy_on_device(std::byte* d, const std::byte* s, std::uint64_t b) override { host_.copy_on_device(d, s, b); }
  KernelSet& kernels() override { return kernels_; }
  std::byte* allocate_host(std::uint64_t b, std::uint64_t a) override { return host_.allocate_host(b, a); }
  void deallocate_host(std::byte* p, std::uint64_t b) noexcept override { host_.deallocate_host(p, b); }
  Event create_event() override { return next_++; }
  void record_on_compute(Event e) override { log_.push_back({Entry::compute_record, e}); }
  void copy_async(std::byte* d, const std::byte* s, std::uint64_t b, Event a, Event x) override {
    host_.copy_async(d, s, b, a, x);
  }
  void compute_waits(Event e) override { log_.push_back({Entry::compute_wait, e}); }
  void begin_run() override { host_.begin_run(); }
  double end_run() override { return host_.end_run(); }

 private:
  Log& log_;
  HostBackend host_;
  LoggingKernels kernels_;
  Event next_ = 1;
};

// A world of one whose all-reduce multiplies by `factor` (2: what a sum over two identical ranks would give).
class ScalingCollectives final : public Collectives {
 public:
  ScalingCollectives(Log* log, float factor) : log_(log), factor_(factor) {}
  std::string name() const override { return "scaling"; }
  int rank() const noexcept override { return 0; }
  int world_size() const noexcept override { return 1; }
  void queue_waits(Backend::Event e) override { push({Entry::queue_wait, e}); }
  void record(Backend::Event e) override { push({Entry::queue_record, e}); }
  void all_reduce_mean(std::byte* data, std::uint64_t count, analysis::DType dtype) override {
    REQUIRE(dtype == analysis::DType::f32);
    for (std::uint64_t i = 0; i < count; ++i) {
      float v;
      std::memcpy(&v, data + i * 4, 4);
      v *= factor_;
      std::memcpy(data + i * 4, &v, 4);
    }
    push({Entry::reduce, 0, data, count * 4});
  }
  void reduce_scatter_mean(const std::byte*, std::byte*, std::uint64_t, analysis::DType) override { FAIL("not used"); }
  void all_gather(const std::byte*, std::byte*, std::uint64_t, analysis::DType) override { FAIL("not used"); }
  void synchronize() override {}

 private:
  void push(Entry e) {
    if (log_) log_->push_back(e);
  }
  Log* log_;
  float factor_;
};

std::vector<TensorId> gradients_of(const analysis::TrainingGraph& tg) {
  std::vector<TensorId> v;
  for (const auto& pg : tg.param_grads) v.push_back(pg.second);
  return v;
}

std::size_t position(const Log& log, Entry::Kind kind, std::uint64_t id) {
  for (std::size_t k = 0; k < log.size(); ++k)
    if (log[k].kind == kind && log[k].id == id) return k;
  return log.size();
}

// An MLP of batch b: x[b,16] -> MatMul W1 + b1 -> Relu -> MatMul W2 -> y[b,8], MSE.
analysis::TrainingGraph mlp(std::int64_t batch, double lr) {
  OpGraph m;
  std::mt19937 rng(5);  // the weights: the same at every batch
  std::mt19937 feed_rng(6);
  const TensorId x = m.input("x", random_f32({batch, 16}, feed_rng));
  const TensorId w1 = m.constant("w1", random_f32({16, 32}, rng, -0.5, 0.5));
  const TensorId b1 = m.constant("b1", random_f32({32}, rng, -0.1, 0.1));
  const TensorId w2 = m.constant("w2", random_f32({32, 8}, rng, -0.5, 0.5));
  const TensorId h = m.tensor("h", analysis::DType::f32, {batch, 32}, analysis::TensorRole::activation);
  const TensorId hb = m.tensor("hb", analysis::DType::f32, {batch, 32}, analysis::TensorRole::activation);
  const TensorId r = m.tensor("r", analysis::DType::f32, {batch, 32}, analysis::TensorRole::activation);
  const TensorId y = m.result("y", analysis::DType::f32, {batch, 8});
  m.op("MatMul", "", {x, w1}, {h});
  m.op("Add", "", {h, b1}, {hb});
  m.op("Relu", "", {hb}, {r});
  m.op("MatMul", "", {r, w2}, {y});
  analysis::TrainingOptions to;
  to.learning_rate = lr;
  return analysis::build_training_graph(analysis::infer_shapes(m.g, {}), to);
}

// Rows [from, from + rows) of a [N, ...] value.
TensorData rows(const TensorData& v, std::int64_t from, std::int64_t count) {
  TensorData out = v;
  const std::size_t row = v.bytes.size() / static_cast<std::size_t>(v.dims[0]);
  out.dims[0] = count;
  out.bytes.assign(v.bytes.begin() + static_cast<std::ptrdiff_t>(row * static_cast<std::size_t>(from)),
                   v.bytes.begin() + static_cast<std::ptrdiff_t>(row * static_cast<std::size_t>(from + count)));
  return out;
}

std::vector<TensorData> global_batch(const analysis::Graph& g, std::int64_t batch) {
  std::mt19937 rng(23);
  std::vector<TensorData> v;
  for (TensorId t : g.inputs) {
    auto dims = g.tensors[t].shape();
    dims[0] = batch;
    v.push_back(random_f32(dims, rng));
  }
  return v;
}

}  // namespace

TEST_CASE("every weight gradient is reduced exactly once, after its producer and before any op touches it again") {
  for (const std::string name : {"tiny_mlp", "tiny_gpt", "tiny_cnn"}) {
    for (auto opt : {analysis::Optimizer::sgd, analysis::Optimizer::adam}) {
      const auto tg = training(name, opt);
      for (const std::string strategy : {"none", "sqrt"}) {
        for (std::uint64_t bucket : {std::uint64_t{0}, std::uint64_t{1} << 20}) {
          INFO(name << " " << analysis::optimizer_name(opt) << " " << strategy << " bucket " << bucket);
          const auto r = plan_strategy(tg, strategy);
          REQUIRE(r);
          Log log;
          LoggingBackend backend(log);
          ScalingCollectives coll(&log, 1.0f);
          ExecOptions eo;
          eo.data_parallel = {&coll, gradients_of(tg), bucket};
          Executor ex(r->graph, r->plan, backend, eo);
          ex.run(feeds(name, tg.graph));
          const auto& buckets = ex.gradient_buckets();
          CHECK(ex.stats().reduce_calls == buckets.size());
          if (bucket == 0) CHECK(buckets.size() == tg.param_grads.size());
          std::size_t reduced = 0;
          for (const auto& pg : tg.param_grads) {
            const TensorId w = pg.first, gt = pg.second;  // not bindings: INFO and CHECK capture them (clang 14)
            const std::byte* lo = ex.address(gt);
            const std::byte* hi = lo + r->graph.tensors[gt].bytes();
            INFO("gradient of " << r->graph.tensors[w].name);
            // Exactly one reduction covers its bytes.
            std::size_t covering = 0, at = log.size();
            for (std::size_t k = 0; k < log.size(); ++k)
              if (log[k].kind == Entry::reduce && log[k].data <= lo && hi <= log[k].data + log[k].bytes) {
                ++covering;
                at = k;
              }
            REQUIRE(covering == 1);
            const GradBucket* b = nullptr;
            for (const auto& x : buckets)
              if (std::find(x.gradients.begin(), x.gradients.end(), gt) != x.gradients.end()) b = &x;
            REQUIRE(b);
            // producer ran -> ready recorded on compute -> the comm queue waits for it -> reduce -> done recorded ->
            // compute waits for done -> every later op touching the gradient.
            const std::size_t produced = position(log, Entry::op, r->graph.tensors[gt].producer);
            const std::size_t ready = position(log, Entry::compute_record, b->ready);
            const std::size_t queued = position(log, Entry::queue_wait, b->ready);
            const std::size_t done = position(log, Entry::queue_record, b->done);
            const std::size_t waited = position(log, Entry::compute_wait, b->done);
            CHECK(produced < ready);
            CHECK(ready < queued);
            CHECK(queued < at);
            CHECK(at < done);
            CHECK(done < waited);
            CHECK(waited < log.size());
            for (analysis::OpId c : r->graph.tensors[gt].consumers) CHECK(waited < position(log, Entry::op, c));
            ++reduced;
          }
          CHECK(reduced == tg.param_grads.size());
        }
      }
    }
  }
}

TEST_CASE("the plan keeps each weight gradient's bytes untouched from its producer to its optimizer update") {
  for (const std::string name : {"tiny_mlp", "tiny_gpt", "tiny_cnn"}) {
    const auto tg = training(name, analysis::Optimizer::adam);
    const auto r = plan_strategy(tg, "none");
    REQUIRE(r);
    HostBackend backend;
    ScalingCollectives coll(nullptr, 1.0f);
    ExecOptions eo;
    eo.data_parallel = {&coll, gradients_of(tg), 0};
    Executor ex(r->graph, r->plan, backend, eo);
    std::map<analysis::OpId, std::size_t> step_of;
    for (std::size_t s = 0; s < r->plan.schedule.size(); ++s) step_of[r->plan.schedule[s]] = s;
    for (const auto& b : ex.gradient_buckets()) {
      REQUIRE(b.gradients.size() == 1);
      const TensorId gt = b.gradients[0];
      INFO(name << ": gradient " << r->graph.tensors[gt].name);
      // The first op touching the gradient's bytes after its producer reads the gradient itself (its update): no
      // other tensor is planned over them in between, so the reduction overlaps everything the backward still does.
      REQUIRE(b.wait_step < r->plan.schedule.size());
      const auto& first = r->graph.ops[r->plan.schedule[b.wait_step]];
      CHECK(std::find(first.inputs.begin(), first.inputs.end(), gt) != first.inputs.end());
      CHECK(first.phase == analysis::Phase::optimizer);
    }
  }
}

TEST_CASE("a reduction that doubles the gradient is applied exactly once before the SGD update") {
  // SGD: w - lr * (2 g) and w - (2 lr) * g are the same float (doubling is exact): bit-identical weights show that
  // every update read its gradient reduced once, neither before its reduction nor after two.
  const auto tg = mlp(8, 0.05), doubled = mlp(8, 0.1);
  const auto in = global_batch(tg.graph, 8);
  const auto r = planner::plan_training(tg, {}), r2 = planner::plan_training(doubled, {});
  HostBackend b1, b2;
  ScalingCollectives coll(nullptr, 2.0f);
  ExecOptions eo;
  eo.data_parallel = {&coll, gradients_of(tg), std::uint64_t{1} << 20};
  Executor ex(r.graph, r.plan, b1, eo), ref(r2.graph, r2.plan, b2);
  for (int step = 0; step < 2; ++step) {
    ex.run(in);
    ref.run(in);
  }
  REQUIRE(tg.updated_weights.size() == 3);
  for (std::size_t k = 0; k < tg.param_grads.size(); ++k) {
    const auto got = ex.read(tg.param_grads[k].first), want = ref.read(doubled.param_grads[k].first);
    CHECK(got.bytes == want.bytes);
  }
}

TEST_CASE("two ranks as threads, each on half the batch, average to one process's gradients on the whole batch") {
  const auto whole = mlp(8, 0.05), half = mlp(4, 0.05);
  const auto in = global_batch(whole.graph, 8);
  const auto r = planner::plan_training(whole, {}), rh = planner::plan_training(half, {});
  HostBackend ref_backend;
  Executor ref(r.graph, r.plan, ref_backend);
  ref.run(in);
  LocalGroup group(2);
  std::vector<std::vector<TensorData>> grads(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank)
    ranks.emplace_back([&, rank] {
      try {
        auto coll = group.member(rank);
        HostBackend backend;
        ExecOptions eo;
        eo.data_parallel = {coll.get(), gradients_of(half), std::uint64_t{1} << 20};
        Executor ex(rh.graph, rh.plan, backend, eo);
        std::vector<TensorData> shard;
        for (const auto& v : in) shard.push_back(rows(v, 4 * rank, 4));
        ex.run(shard);
        for (const auto& pg : half.param_grads) grads[static_cast<std::size_t>(rank)].push_back(ex.read(pg.second));
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(rank)] = e.what();
        group.abort();
      }
    });
  for (auto& t : ranks) t.join();
  REQUIRE(errors[0].empty());
  REQUIRE(errors[1].empty());
  for (std::size_t k = 0; k < whole.param_grads.size(); ++k) {
    const auto want = ref.read(whole.param_grads[k].second).as_double();
    const auto a = grads[0][k].as_double(), b = grads[1][k].as_double();
    CHECK(a == b);  // every rank holds the same mean
    double worst = 0.0, scale = 0.0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, std::fabs(a[i] - want[i]));
      scale = std::max(scale, std::fabs(want[i]));
    }
    INFO("gradient " << k << ": max |diff| " << worst << " of max |g| " << scale);
    CHECK(worst <= 1e-5 * scale);
  }
}
