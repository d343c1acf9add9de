// CUDA benchmark of memplan::FusedAttention: forward and forward+backward device time of the CUDA kernels at
// transformer shapes (float32, bhsd), printed as JSON in bench/torch_sdpa_bench.py's form so one run compares both.
// Usage: bench_attention [B H D [S,S,...]] (default 8 8 64 256,1024); each shape runs non-causal and causal.
#ifdef MEMPLAN_HAVE_CUDA
#include <algorithm>
#include <cmath>
#include <deque>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "analysis/graph.hpp"
#include "analysis/ops.hpp"
#include "runtime_allocator/backend.hpp"
#include "runtime_allocator/cuda/cuda_backend.hpp"
#include "runtime_allocator/cuda/cuda_context.hpp"

using namespace memplan;
using analysis::DType;
using analysis::Graph;
using analysis::TensorId;
using nlohmann::json;

namespace {

struct Shape {
  std::int64_t b = 8, h = 8, s = 256, d = 64;
  bool causal = false;
};

analysis::Attribute attr_f(double v) {
  analysis::Attribute a;
  a.kind = analysis::Attribute::Kind::f;
  a.f = v;
  return a;
}
analysis::Attribute attr_i(std::int64_t v) {
  analysis::Attribute a;
  a.kind = analysis::Attribute::Kind::i;
  a.i = v;
  return a;
}

TensorId add_tensor(Graph& g, const std::string& name, const std::vector<std::int64_t>& dims) {
  analysis::Tensor t;
  t.name = name;
  t.dtype = DType::f32;
  t.rank_known = true;
  for (auto d : dims) t.dims.push_back(analysis::Dim::of(d));
  return g.add_tensor(std::move(t));
}

// Op 0: FusedAttention (q, k, v) -> (o, lse); op 1: FusedAttentionGrad (do, q, k, v, o, lse) -> (dq, dk, dv).
Graph attention_graph(const Shape& s) {
  Graph g;
  const std::vector<std::int64_t> x = {s.b, s.h, s.s, s.d};
  const TensorId q = add_tensor(g, "q", x), k = add_tensor(g, "k", x), v = add_tensor(g, "v", x), o = add_tensor(g, "o", x);
  const TensorId lse = add_tensor(g, "lse", {s.b, s.h, s.s}), d_o = add_tensor(g, "do", x);
  const TensorId dq = add_tensor(g, "dq", x), dk = add_tensor(g, "dk", x), dv = add_tensor(g, "dv", x);
  const std::map<std::string, analysis::Attribute> attrs = {{"scale", attr_f(1.0 / std::sqrt(static_cast<double>(s.d)))},
                                                            {"causal", attr_i(s.causal ? 1 : 0)}};
  auto op = [&](std::string_view type, std::vector<TensorId> in, std::vector<TensorId> out) {
    analysis::Op a;
    a.name = std::string(type);
    a.type = std::string(type);
    a.domain = "memplan";
    a.inputs = std::move(in);
    a.outputs = std::move(out);
    a.attrs = attrs;
    g.add_op(std::move(a));
  };
  op(analysis::memplan_ops::kFusedAttention, {q, k, v}, {o, lse});
  op(analysis::memplan_ops::kFusedAttentionGrad, {d_o, q, k, v, o, lse}, {dq, dk, dv});
  return g;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// `g` is attention_graph(s); it outlives the backend's kernels, which keep state per graph.
json bench_shape(runtime::cuda::CudaBackend& backend, const Graph& g, const Shape& s, int runs) {
  runtime::KernelSet& ks = backend.kernels();
  for (const auto& op : g.ops)
    if (const std::string why = ks.unsupported_reason(g, op); !why.empty()) fail(ErrorKind::unsupported, op.type + ": " + why);
  ks.prepare(g);
  std::vector<runtime::TensorRef> ref(g.tensors.size());
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (TensorId t = 0; t < g.tensors.size(); ++t) {
    const auto& x = g.tensors[t];
    ref[t] = {backend.allocate(x.bytes(), 256), x.dtype, x.shape(), x.bytes()};
    std::vector<float> host(x.bytes() / 4);
    for (auto& f : host) f = u(rng);
    backend.copy_to_device(ref[t].data, reinterpret_cast<const std::byte*>(host.data()), x.bytes());
  }
  auto run = [&](analysis::OpId id) {
    const auto& op = g.ops[id];
    std::vector<runtime::TensorRef> in, out;
    for (TensorId t : op.inputs) in.push_back(ref[t]);
    for (TensorId t : op.outputs) out.push_back(ref[t]);
    ks.run(runtime::OpCall{op, id, in, out});
  };
  auto timed = [&](bool backward) {
    std::vector<double> t;
    for (int r = 0; r < runs + 3; ++r) {
      backend.begin_run();
      run(0);
      if (backward) run(1);
      const double sec = backend.end_run();
      if (r >= 3) t.push_back(sec);  // after warm-up
    }
    return median(t);
  };
  const double fwd = timed(false), fwd_bwd = timed(true);
  for (TensorId t = 0; t < g.tensors.size(); ++t) backend.deallocate(ref[t].data, ref[t].bytes);
  // Matmul FLOPs as FlashAttention counts them: 4 B H S^2 D forward, 2.5x that for the backward; half when causal.
  const double flops = 4.0 * static_cast<double>(s.b * s.h) * static_cast<double>(s.s * s.s) * static_cast<double>(s.d) *
                       (s.causal ? 0.5 : 1.0);
  return {{"b", s.b},
          {"h", s.h},
          {"s", s.s},
          {"d", s.d},
          {"causal", s.causal},
          {"forward_ms", fwd * 1e3},
          {"forward_backward_ms", fwd_bwd * 1e3},
          {"forward_tflops", flops / fwd / 1e12},
          {"forward_backward_tflops", 3.5 * flops / fwd_bwd / 1e12}};
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (!runtime::cuda::cuda_available()) {
      std::cerr << "bench_attention: no CUDA device\n";
      return 77;
    }
    Shape base;
    std::vector<std::int64_t> lengths = {256, 1024};
    if (argc > 1) {
      if (argc < 4) {
        std::cerr << "usage: bench_attention [B H D [S,S,...]]\n";
        return 2;
      }
      base.b = std::stoll(argv[1]);
      base.h = std::stoll(argv[2]);
      base.d = std::stoll(argv[3]);
      if (argc > 4) {
        lengths.clear();
        std::stringstream list(argv[4]);
        for (std::string item; std::getline(list, item, ',');) lengths.push_back(std::stoll(item));
      }
    }
    std::deque<Graph> graphs;  // declared before the backend: destroyed after it
    runtime::cuda::CudaBackend backend;
    json results = json::array();
    for (std::int64_t len : lengths)
      for (bool causal : {false, true}) {
        Shape s = base;
        s.s = len;
        s.causal = causal;
        results.push_back(bench_shape(backend, graphs.emplace_back(attention_graph(s)), s, 20));
      }
    cudaDeviceProp prop{};
    runtime::cuda::check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    const json out = {{"impl", "memplan FusedAttention (CUDA, float32)"}, {"device", prop.name}, {"results", results}};
    std::cout << out.dump(2) << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "bench_attention: " << e.what() << "\n";
    return 1;
  }
}
#else
#include <iostream>
int main() {
  std::cerr << "bench_attention: built without the CUDA backend\n";
  return 77;
}
#endif
