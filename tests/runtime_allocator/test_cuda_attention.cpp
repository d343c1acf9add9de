// GPU tests of FusedAttention and FusedAttentionGrad's CUDA kernels against the CPU reference kernels; the GPU cases
// exit with 77 (ctest: skipped) on a machine without a CUDA device.
#include <doctest/doctest.h>

#ifdef MEMPLAN_HAVE_CUDA
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <sstream>

#include "analysis/fused_ops.hpp"
#include "runtime_allocator/cuda/cuda_backend.hpp"
#include "runtime_allocator/cuda/cuda_state.hpp"
#include "tests/runtime_allocator/op_graph.hpp"

using namespace memplan;
using namespace memplan::runtime::testing;
using analysis::DType;
using analysis::HeadLayout;
using analysis::TensorData;
using analysis::TensorId;

namespace {

enum class Bias { none, scores, matrix, padding, mask };

struct Spec {
  HeadLayout q = HeadLayout::bhsd, k = HeadLayout::bhsd, v = HeadLayout::bhsd, o = HeadLayout::bhsd;
  std::int64_t b = 2, hq = 2, hkv = 2, sq = 16, sk = 16, d = 64, dv = 64;
  bool causal = false;
  double dropout = 0.0;
  Bias bias = Bias::none;
  unsigned grads = 0xf;  // the backward's outputs: bit 0 dQ, 1 dK, 2 dV, 3 dBias (with a float bias)
  std::string describe() const {
    std::ostringstream s;
    s << analysis::head_layout_name(q) << "/" << analysis::head_layout_name(k) << "/" << analysis::head_layout_name(v) << "/"
      << analysis::head_layout_name(o) << " B=" << b << " Hq=" << hq << " Hkv=" << hkv << " Sq=" << sq << " Sk=" << sk << " D=" << d
      << " Dv=" << dv << " causal=" << causal << " dropout=" << dropout << " bias=" << static_cast<int>(bias) << " grads=" << grads;
    return s.str();
  }
  void all(HeadLayout l) { q = k = v = o = l; }
};

std::map<std::string, analysis::Attribute> attrs_of(const Spec& s) {
  return {{"q_layout", string_attr(analysis::head_layout_name(s.q))},
          {"k_layout", string_attr(analysis::head_layout_name(s.k))},
          {"v_layout", string_attr(analysis::head_layout_name(s.v))},
          {"o_layout", string_attr(analysis::head_layout_name(s.o))},
          {"scale", float_attr(1.0 / std::sqrt(static_cast<double>(s.d)))},
          {"causal", int_attr(s.causal ? 1 : 0)},
          {"dropout_ratio", float_attr(s.dropout)},
          {"seed", int_attr(1234)}};
}

// The bias's value: float scores [1, 1, Sq, Sk] or [Sq, Sk], padding [B, 1, 1, Sk] (-inf on batch 1's last keys),
// or a boolean mask [B, 1, Sq, Sk] with about a third masked and query row 1 fully masked.
TensorData bias_value(const Spec& s, std::mt19937& rng) {
  switch (s.bias) {
    case Bias::scores: return random_f32({1, 1, s.sq, s.sk}, rng, -2.0, 2.0);
    case Bias::matrix: return random_f32({s.sq, s.sk}, rng, -2.0, 2.0);
    case Bias::padding: {
      TensorData t = random_f32({s.b, 1, 1, s.sk}, rng, -1.0, 1.0);
      auto* f = reinterpret_cast<float*>(t.bytes.data());
      for (std::int64_t j = s.sk - s.sk / 3; j < s.sk && s.b > 1; ++j) f[s.sk + j] = -INFINITY;
      return t;
    }
    case Bias::mask: {
      std::vector<std::int64_t> v(static_cast<std::size_t>(s.b * s.sq * s.sk));
      for (std::size_t i = 0; i < v.size(); ++i) {
        const std::int64_t row = static_cast<std::int64_t>(i) / s.sk % s.sq;
        v[i] = row == 1 ? 0 : (rng() % 3 != 0);
      }
      return ints(DType::boolean, {s.b, 1, s.sq, s.sk}, v);
    }
    case Bias::none: break;
  }
  return {};
}

// Runs op 0 of g on `backend`'s kernels with one value per op input (an absent input has none) and returns the
// bytes of its outputs (empty for an absent output). Outputs start as NaN so an element the kernel skips shows.
std::vector<std::vector<std::byte>> run_op(runtime::Backend& backend, const analysis::Graph& g, const std::vector<TensorData>& in) {
  const analysis::Op& op = g.ops[0];
  runtime::KernelSet& ks = backend.kernels();
  ks.prepare(g);
  std::vector<std::pair<std::byte*, std::uint64_t>> owned;
  auto bind = [&](TensorId t, const TensorData* value) {
    runtime::TensorRef r;
    if (t == analysis::kNoTensor) return r;
    const auto& x = g.tensors[t];
    r.dtype = x.dtype;
    r.shape = x.shape();
    r.bytes = x.bytes();
    const std::uint64_t n = std::max<std::uint64_t>(r.bytes, 1);
    r.data = backend.allocate(n, 256);
    owned.emplace_back(r.data, n);
    const std::vector<std::byte> nan(r.bytes, std::byte{0xff});
    backend.copy_to_device(r.data, value ? value->bytes.data() : nan.data(), r.bytes);
    return r;
  };
  std::vector<runtime::TensorRef> ins, outs;
  for (std::size_t k = 0; k < op.inputs.size(); ++k) ins.push_back(bind(op.inputs[k], &in.at(k)));
  for (TensorId t : op.outputs) outs.push_back(bind(t, nullptr));
  ks.run(runtime::OpCall{op, 0, ins, outs, nullptr, 0});
  backend.synchronize();
  std::vector<std::vector<std::byte>> res;
  for (const auto& r : outs) {
    res.emplace_back(r.bytes);
    if (r.data) backend.copy_to_host(res.back().data(), r.data, r.bytes);
  }
  for (const auto& [p, n] : owned) backend.deallocate(p, n);
  return res;
}

// Largest |a - b| / max(1, |b|); equal infinities match, a NaN never does.
double max_rel_diff(const std::vector<std::byte>& got, const std::vector<std::byte>& want) {
  const auto a = as_floats(got.data(), got.size()), b = as_floats(want.data(), want.size());
  double m = a.size() == b.size() ? 0.0 : INFINITY;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i] == b[i]) continue;
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]) / std::max(1.0, std::fabs(static_cast<double>(b[i])));
    m = std::isnan(d) ? INFINITY : std::max(m, d);
  }
  return m;
}

// Both backends support op 0 of g: the CPU one is the reference (absent: the test fails, it does not pass).
void require_kernels(runtime::Backend& cpu, runtime::Backend& gpu, const analysis::Graph& g) {
  const std::string cpu_why = cpu.kernels().unsupported_reason(g, g.ops[0]);
  if (!cpu_why.empty()) FAIL("the CPU reference kernel of " << g.ops[0].type << " is missing or refuses the op: " << cpu_why);
  const std::string gpu_why = gpu.kernels().unsupported_reason(g, g.ops[0]);
  REQUIRE_MESSAGE(gpu_why.empty(), "CUDA refuses " << g.ops[0].type << ": " << gpu_why);
}

void compare(const std::vector<std::vector<std::byte>>& got, const std::vector<std::vector<std::byte>>& want, const char* const* names) {
  REQUIRE(got.size() == want.size());
  for (std::size_t k = 0; k < got.size(); ++k) {
    INFO("output " << names[k]);
    REQUIRE(got[k].size() == want[k].size());
    CHECK(max_rel_diff(got[k], want[k]) <= 1e-4);
  }
}

struct Backends {
  std::deque<OpGraph> graphs;  // first: the kernels keep per-graph state, so every graph outlives them
  runtime::HostBackend cpu;
  runtime::cuda::CudaBackend gpu;
};

std::unique_ptr<Backends> backends_or_skip() {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  return std::make_unique<Backends>();
}

// The forward and the backward of one spec on the CPU and the GPU, from the same random operands; the backward's
// O and LSE are the CPU forward's, and it returns dBias too with a float bias.
void check_spec(const Spec& s, Backends& be) {
  runtime::Backend &cpu = be.cpu, &gpu = be.gpu;
  INFO(s.describe());
  std::mt19937 rng(7);
  const TensorData q = random_f32(analysis::head_shape(s.q, s.b, s.hq, s.sq, s.d), rng);
  const TensorData k = random_f32(analysis::head_shape(s.k, s.b, s.hkv, s.sk, s.d), rng);
  const TensorData v = random_f32(analysis::head_shape(s.v, s.b, s.hkv, s.sk, s.dv), rng);
  const TensorData bias = bias_value(s, rng);
  const auto o_dims = analysis::head_shape(s.o, s.b, s.hq, s.sq, s.dv);
  const std::vector<std::int64_t> lse_dims = {s.b, s.hq, s.sq};
  const bool has_bias = s.bias != Bias::none;

  OpGraph& f = be.graphs.emplace_back();
  std::vector<TensorId> f_in = {f.input("q", q), f.input("k", k), f.input("v", v)};
  std::vector<TensorData> f_vals = {q, k, v};
  if (has_bias) {
    f_in.push_back(f.input("bias", bias));
    f_vals.push_back(bias);
  }
  f.op("FusedAttention", "memplan", f_in, {f.result("o", DType::f32, o_dims), f.result("lse", DType::f32, lse_dims)}, attrs_of(s));
  require_kernels(cpu, gpu, f.g);
  const auto want_f = run_op(cpu, f.g, f_vals);
  const char* const f_names[] = {"O", "LSE"};
  compare(run_op(gpu, f.g, f_vals), want_f, f_names);

  const TensorData o{DType::f32, o_dims, want_f[0]}, lse{DType::f32, lse_dims, want_f[1]};
  const TensorData d_o = random_f32(o_dims, rng);
  OpGraph& g = be.graphs.emplace_back();
  std::vector<TensorId> g_in = {g.input("do", d_o), g.input("q", q), g.input("k", k), g.input("v", v), g.input("o", o), g.input("lse", lse)};
  std::vector<TensorData> g_vals = {d_o, q, k, v, o, lse};
  auto grad = [&](unsigned bit, const char* name, const std::vector<std::int64_t>& dims) {
    return s.grads & bit ? g.result(name, DType::f32, dims) : analysis::kNoTensor;
  };
  std::vector<TensorId> g_out = {grad(1, "dq", q.dims), grad(2, "dk", k.dims), grad(4, "dv", v.dims)};
  if (has_bias) {
    g_in.push_back(g.input("bias", bias));
    g_vals.push_back(bias);
    if (bias.dtype == DType::f32 && (s.grads & 8)) g_out.push_back(g.result("dbias", DType::f32, bias.dims));
  }
  g.op("FusedAttentionGrad", "memplan", g_in, g_out, attrs_of(s));
  require_kernels(cpu, gpu, g.g);
  const char* const g_names[] = {"dQ", "dK", "dV", "dBias"};
  compare(run_op(gpu, g.g, g_vals), run_op(cpu, g.g, g_vals), g_names);
}

}  // namespace

TEST_CASE("FusedAttention on CUDA matches the CPU kernels in both layouts, mixed layouts and odd lengths") {
  const auto be = backends_or_skip();
  Spec s;
  s.sq = s.sk = 77;
  check_spec(s, *be);
  s.all(HeadLayout::bshd);
  s.hq = s.hkv = 3;
  s.sq = 50;
  check_spec(s, *be);
  s.q = HeadLayout::bhsd;
  s.v = HeadLayout::bhsd;
  s.sq = 130;
  s.sk = 65;
  check_spec(s, *be);
}

TEST_CASE("FusedAttention on CUDA matches the CPU kernels for head dims 32, 64, 128, unequal D and Dv, tiny lengths") {
  const auto be = backends_or_skip();
  for (std::int64_t d : {32, 64, 128}) {
    Spec s;
    s.d = s.dv = d;
    s.sq = s.sk = 100;
    check_spec(s, *be);
  }
  Spec s;
  s.d = 32;
  s.dv = 96;
  s.sq = 40;
  s.sk = 70;
  check_spec(s, *be);
  s.d = s.dv = 6;  // not a multiple of 4: scalar loads
  s.sq = 3;
  s.sk = 5;
  check_spec(s, *be);
  s.d = s.dv = 8;
  s.sq = s.sk = 1;
  check_spec(s, *be);
}

TEST_CASE("FusedAttention on CUDA matches the CPU kernels with GQA 8/2, causal masks and Sq != Sk") {
  const auto be = backends_or_skip();
  Spec s;
  s.hq = 8;
  s.hkv = 2;
  s.sq = s.sk = 130;
  s.causal = true;
  check_spec(s, *be);
  s.hq = s.hkv = 2;
  s.sq = 77;
  s.sk = 150;
  check_spec(s, *be);
  s.sq = 150;
  s.sk = 77;
  s.all(HeadLayout::bshd);
  check_spec(s, *be);
}

TEST_CASE("FusedAttention on CUDA matches the CPU kernels with float biases, boolean masks and their dBias") {
  const auto be = backends_or_skip();
  Spec s;
  s.sq = 77;
  s.sk = 90;
  for (Bias b : {Bias::scores, Bias::matrix, Bias::padding, Bias::mask}) {
    s.bias = b;
    check_spec(s, *be);
  }
  s.bias = Bias::padding;
  s.causal = true;
  s.hq = 8;
  s.hkv = 2;
  s.d = s.dv = 128;
  check_spec(s, *be);
  s.grads = 1 | 8;  // dQ and dBias alone
  check_spec(s, *be);
  s.grads = 4;  // dV alone
  s.bias = Bias::scores;
  check_spec(s, *be);
}

TEST_CASE("FusedAttention on CUDA replays the CPU kernels' dropout mask") {
  const auto be = backends_or_skip();
  Spec s;
  s.dropout = 0.1;
  s.sq = s.sk = 77;
  check_spec(s, *be);
  s.causal = true;
  s.hq = 8;
  s.hkv = 2;
  s.bias = Bias::scores;
  s.all(HeadLayout::bshd);
  check_spec(s, *be);
}

TEST_CASE("FusedAttention on CUDA matches the CPU kernels at length 512") {
  const auto be = backends_or_skip();
  Spec s;
  s.b = 1;
  s.sq = s.sk = 512;
  s.causal = true;
  s.bias = Bias::padding;
  check_spec(s, *be);
}

TEST_CASE("FusedAttention on CUDA reads packed Q, K, V slots of one [B, S, 3, H, D] tensor and writes its one gradient") {
  auto be = backends_or_skip();
  std::mt19937 rng(9);
  for (const bool causal : {false, true})
    for (const std::int64_t len : {std::int64_t{77}, std::int64_t{130}}) {
      CAPTURE(causal);
      CAPTURE(len);
      constexpr std::int64_t B = 2, H = 3, D = 64;
      const TensorData x = random_f32({B, len, 3, H, D}, rng);
      std::map<std::string, analysis::Attribute> attrs = {
          {"q_layout", string_attr("packed")}, {"k_layout", string_attr("packed")}, {"v_layout", string_attr("packed")},
          {"q_slot", int_attr(2)},             {"k_slot", int_attr(0)},             {"v_slot", int_attr(1)},
          {"scale", float_attr(0.125)},        {"causal", int_attr(causal ? 1 : 0)}, {"dropout_ratio", float_attr(0.1)},
          {"seed", int_attr(77)}};
      const std::vector<std::int64_t> o_dims = {B, H, len, D}, lse_dims = {B, H, len};
      OpGraph& f = be->graphs.emplace_back();
      const TensorId fx = f.input("x", x);
      f.op("FusedAttention", "memplan", {fx, fx, fx}, {f.result("o", DType::f32, o_dims), f.result("lse", DType::f32, lse_dims)}, attrs);
      require_kernels(be->cpu, be->gpu, f.g);
      const auto want_f = run_op(be->cpu, f.g, {x, x, x});
      const char* const f_names[] = {"O", "LSE"};
      compare(run_op(be->gpu, f.g, {x, x, x}), want_f, f_names);
      const TensorData o{DType::f32, o_dims, want_f[0]}, lse{DType::f32, lse_dims, want_f[1]};
      const TensorData d_o = random_f32(o_dims, rng);
      OpGraph& g = be->graphs.emplace_back();
      const TensorId gx = g.input("x", x);
      g.op("FusedAttentionGrad", "memplan", {g.input("do", d_o), gx, gx, gx, g.input("o", o), g.input("lse", lse)},
           {g.result("dx", DType::f32, x.dims)}, attrs);
      require_kernels(be->cpu, be->gpu, g.g);
      const char* const g_names[] = {"dX"};
      const std::vector<TensorData> vals = {d_o, x, x, x, o, lse};
      compare(run_op(be->gpu, g.g, vals), run_op(be->cpu, g.g, vals), g_names);
    }
}

TEST_CASE("the CUDA attention kernels say before a run which head dims and biases they refuse") {
  // No device needed: the reasons read only the graph.
  Spec s;
  s.d = s.dv = 160;
  std::mt19937 rng(1);
  OpGraph f;
  const TensorId q = f.input("q", random_f32({1, 1, 4, 160}, rng)), k = f.input("k", random_f32({1, 1, 4, 160}, rng));
  const TensorId v = f.input("v", random_f32({1, 1, 4, 160}, rng));
  const TensorId bias = f.input("bias", random_f32({3, 4, 4}, rng));
  f.op("FusedAttention", "memplan", {q, k, v}, {f.result("o", DType::f32, {1, 1, 4, 160})}, attrs_of(s));
  CHECK(runtime::cuda::attention_unsupported_reason(f.g, f.g.ops[0]).find("head dim 160 above 128") != std::string::npos);
  f.op("FusedAttention", "memplan", {q, k, v, bias}, {f.result("o2", DType::f32, {1, 1, 4, 160})}, attrs_of(s));
  f.g.tensors[q].dims.back() = analysis::Dim::of(64);
  f.g.tensors[k].dims.back() = analysis::Dim::of(64);
  f.g.tensors[v].dims.back() = analysis::Dim::of(64);
  CHECK(runtime::cuda::attention_unsupported_reason(f.g, f.g.ops[1]).find("does not broadcast") != std::string::npos);
  CHECK(runtime::cuda::attention_unsupported_reason(f.g, f.g.ops[0]).empty());
}

#endif  // MEMPLAN_HAVE_CUDA
