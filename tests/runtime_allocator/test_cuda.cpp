// GPU tests of the CUDA backend; each exits with 77 (ctest: skipped) on a machine without a CUDA device.
#include <doctest/doctest.h>

#ifdef MEMPLAN_HAVE_CUDA
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "analysis/import.hpp"
#include "analysis/shapes.hpp"
#include "planner/fusion.hpp"
#include "planner/inference.hpp"
#include "runtime_allocator/cuda/cuda_context.hpp"
#include "runtime_allocator/cuda/cuda_backend.hpp"
#include "runtime_allocator/executor.hpp"
#include "runtime_allocator/cuda/fused_kernel.hpp"
#include "runtime_allocator/npy.hpp"

using namespace memplan;
using namespace memplan::runtime::cuda;
using analysis::DType;
using planner::ElemOp;
using planner::FusedExpr;

namespace {

void require_device() {
  if (!cuda_available()) std::exit(77);
}

std::vector<float> random_floats(std::size_t n, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

FusedExpr random_expr(std::mt19937& rng, std::uint32_t inputs, int ops) {
  FusedExpr e;
  e.num_inputs = inputs;
  for (std::uint32_t k = 0; k < inputs; ++k) e.add({ElemOp::input, k, 0, 0, 0});
  const ElemOp choice[] = {ElemOp::add, ElemOp::sub, ElemOp::mul, ElemOp::max, ElemOp::relu, ElemOp::sigmoid,
                           ElemOp::tanh, ElemOp::erf, ElemOp::abs, ElemOp::clip, ElemOp::leaky_relu, ElemOp::neg,
                           ElemOp::gt,  ElemOp::ge};
  for (int i = 0; i < ops; ++i) {
    const ElemOp op = choice[rng() % std::size(choice)];
    const auto n = static_cast<std::uint32_t>(e.nodes.size());
    e.add({op, static_cast<std::uint32_t>(rng() % n), static_cast<std::uint32_t>(rng() % n), -0.5, 0.75});
  }
  return e;
}

// out[i] under numpy broadcasting, evaluated with FusedExpr::evaluate.
std::vector<float> cpu_reference(const FusedExpr& e, const std::vector<std::vector<float>>& vals,
                                 const std::vector<std::vector<std::int64_t>>& dims, const std::vector<std::int64_t>& out) {
  std::int64_t n = 1;
  for (auto d : out) n *= d;
  std::vector<float> res(static_cast<std::size_t>(n)), operands(vals.size()), scratch(e.nodes.size());
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::size_t k = 0; k < vals.size(); ++k) {
      std::int64_t r = i, off = 0, stride = 1;
      for (std::size_t d = out.size(); d-- > 0;) {
        const std::int64_t q = r % out[d];
        r /= out[d];
        const std::size_t back = out.size() - 1 - d;
        if (back < dims[k].size()) {
          const std::int64_t od = dims[k][dims[k].size() - 1 - back];
          if (od != 1) off += q * stride;
          stride *= od;
        }
      }
      operands[k] = vals[k][static_cast<std::size_t>(off)];
    }
    res[static_cast<std::size_t>(i)] = e.evaluate(operands.data(), scratch.data());
  }
  return res;
}

std::vector<float> floats(const analysis::TensorData& v) {
  std::vector<float> f(v.bytes.size() / 4);
  std::memcpy(f.data(), v.bytes.data(), f.size() * 4);
  return f;
}

// Largest |a-b| / max(1, |b|): absolute near zero, relative for large values.
double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = a.size() == b.size() ? 0.0 : INFINITY;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i)
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]) / std::max(1.0, std::fabs(static_cast<double>(b[i]))));
  return m;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = a.size() == b.size() ? 0.0 : INFINITY;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

}  // namespace

TEST_CASE("NVRTC fused kernels equal the CPU evaluator under broadcasting, aligned or not") {
  require_device();
  Context ctx;
  FusedKernelCache cache;
  // Small and several blocks long; broadcast operands read as vectors (inner stride 1), as one element per vector
  // (inner stride 0: {3, 5, 1}, {7, 33, 1}) or per element (a length-3 inner group, or 33 rows not a multiple of 4).
  struct Case {
    std::vector<std::int64_t> out;
    std::vector<std::vector<std::int64_t>> shapes;
  };
  const std::vector<Case> cases = {{{3, 5, 12}, {{3, 5, 12}, {12}, {1}, {3, 1, 12}}},
                                   {{3, 5, 12}, {{3, 5, 12}, {3, 5, 1}, {5, 1}, {1, 5, 12}}},
                                   {{7, 33, 64}, {{7, 33, 64}, {64}, {7, 33, 1}, {7, 1, 64}}},
                                   {{7, 33, 3}, {{7, 33, 3}, {3}, {33, 1}, {1}}}};
  for (unsigned seed = 1; seed <= 16; ++seed) {
    CAPTURE(seed);
    const std::vector<std::int64_t>& out = cases[seed % cases.size()].out;
    const std::vector<std::vector<std::int64_t>>& shapes = cases[seed % cases.size()].shapes;
    std::mt19937 rng(seed);
    const FusedExpr e = random_expr(rng, 4, 3 + static_cast<int>(rng() % 10));
    std::vector<std::vector<float>> vals;
    for (const auto& s : shapes) {
      std::size_t n = 1;
      for (auto d : s) n *= static_cast<std::size_t>(d);
      vals.push_back(random_floats(n, rng, -2.0f, 2.0f));
    }
    const auto want = cpu_reference(e, vals, shapes, out);
    const std::size_t shift = (seed / 4) % 2;  // an odd float offset defeats the float4 path
    std::vector<Buffer> bufs;
    std::vector<const float*> ptrs;
    for (const auto& v : vals) {
      bufs.emplace_back((v.size() + 1) * 4, Buffer::Kind::device, "operand");
      float* p = reinterpret_cast<float*>(bufs.back().data()) + shift;
      check(cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice), "upload");
      ptrs.push_back(p);
    }
    Buffer ob((want.size() + 1) * 4, Buffer::Kind::device, "out");
    check(cudaMemset(ob.data(), 0xff, ob.size()), "poison");  // NaN everywhere: unwritten elements show
    float* o = reinterpret_cast<float*>(ob.data()) + shift;
    cache.launch(make_signature(e, shapes, out), ptrs, o, ctx.stream());
    check(cudaStreamSynchronize(ctx.stream()), "sync");
    std::vector<float> got(want.size());
    check(cudaMemcpy(got.data(), o, got.size() * 4, cudaMemcpyDeviceToHost), "download");
    CHECK(max_rel_diff(got, want) <= 1e-5);
  }
  CHECK(cache.compiled_count() >= 16);  // one module per distinct source
}

TEST_CASE("tiny models run on the GPU, fused or not, within 1e-4 of their reference outputs") {
  require_device();
  const char* src = std::getenv("MEMPLAN_SOURCE_DIR");  // set where the binary runs away from its checkout
  const std::string dir = std::string(src ? src : MEMPLAN_SOURCE_DIR) + "/samples/models/";
  for (const char* name : {"tiny_mlp", "tiny_cnn", "tiny_gpt"}) {
    for (bool fuse : {false, true}) {
      CAPTURE(name);
      CAPTURE(fuse);
      analysis::ImportOptions io;
      io.keep_weight_data = true;
      analysis::Graph g = analysis::infer_shapes(analysis::import_onnx(dir + name + ".onnx", io), {});
      if (fuse) {
        auto fr = planner::fuse_elementwise(g);
        CHECK(!fr.groups.empty());
        g = std::move(fr.graph);
      }
      const auto ip = planner::plan_inference(g);
      CudaBackend gpu;
      runtime::Executor ex(g, ip.plan, gpu);
      const auto input = runtime::read_npy(dir + name + ".input.npy");
      const auto want = runtime::read_npy(dir + name + ".output.npy");
      const auto outs = ex.run({{g.tensors[g.inputs[0]].name, input}});
      REQUIRE(outs.size() == 1);
      std::vector<float> ref(want.bytes.size() / 4);
      std::memcpy(ref.data(), want.bytes.data(), ref.size() * 4);
      CHECK(max_abs_diff(floats(outs[0]), ref) <= 1e-4);
      CHECK(ex.stats().arena_bytes == ip.plan.arena_bytes);
      // Running twice gives the same bytes: no state leaks between runs through the arena.
      const auto again = ex.run({{g.tensors[g.inputs[0]].name, input}});
      CHECK(again[0].bytes == outs[0].bytes);
    }
  }
}

#endif  // MEMPLAN_HAVE_CUDA
