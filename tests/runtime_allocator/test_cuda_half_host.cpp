// Host-side tests of the CUDA backend's bf16/f16 support (no device needed): the generated elementwise kernels
// compile with NVRTC for every storage combination, and the kernel table accepts or refuses each op by its dtypes
// before anything runs.
#include <doctest/doctest.h>

#ifdef MEMPLAN_HAVE_CUDA
#include <string>

#include "analysis/fused_expr.hpp"
#include "analysis/fused_ops.hpp"
#include "runtime_allocator/cuda/cuda_kernels.hpp"
#include "runtime_allocator/cuda/fused_kernel.hpp"
#include "tests/runtime_allocator/half_graphs.hpp"

using namespace memplan;
using namespace memplan::runtime::cuda;
using namespace memplan::runtime::testing;
using analysis::DType;
using analysis::ElemOp;
using analysis::FusedExpr;
using analysis::TensorRole;

namespace {

// tanh((x0 + x1) * x2) over three operands.
FusedExpr three_operand_expr() {
  FusedExpr e;
  e.num_inputs = 3;
  for (std::uint32_t k = 0; k < 3; ++k) e.add({ElemOp::input, k, 0, 0, 0});
  const auto s = e.add({ElemOp::add, 0, 1, 0, 0});
  e.add({ElemOp::tanh, e.add({ElemOp::mul, s, 2, 0, 0}), 0, 0, 0});
  return e;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("generated elementwise kernels over bf16, f16 and bool storage compile with NVRTC (no device needed)") {
  const FusedExpr e = three_operand_expr();
  const std::vector<std::int64_t> out = {4, 6, 8};
  // full / scalar / strided operands: the float4-style vector path and the grid-stride path.
  const std::vector<std::vector<std::vector<std::int64_t>>> layouts = {{{4, 6, 8}, {4, 6, 8}, {1}}, {{4, 6, 8}, {8}, {4, 1, 8}}};
  const std::vector<std::vector<DType>> operand_dtypes = {
      {DType::bf16, DType::bf16, DType::bf16}, {DType::f16, DType::f32, DType::f16}, {DType::bf16, DType::f32, DType::boolean}};
  for (const auto& dims : layouts)
    for (const auto& dts : operand_dtypes)
      for (DType result : {DType::f32, DType::bf16, DType::f16}) {
        FusedSignature sig = make_signature(e, dims, out);
        sig.operand_dtypes = dts;
        sig.out_dtype = result;
        const std::string src = fused_kernel_source(sig);
        CAPTURE(src);
        CHECK(contains(src, "float mp_bf16_f32"));
        if (result == DType::bf16) CHECK(contains(src, "mp_f32_bf16("));
        if (dts[0] == DType::f16) CHECK(contains(src, "const unsigned short* __restrict__ in0"));
        if (dts[2] == DType::boolean) CHECK(contains(src, "const unsigned char* __restrict__ in2"));
        CHECK_FALSE(nvrtc_compile(src, "--gpu-architecture=sm_90").empty());
      }
  // All float32: no conversion helpers, the float32 generator's text.
  const std::string f32 = fused_kernel_source(make_signature(e, layouts[0], out));
  CHECK_FALSE(contains(f32, "mp_"));
  CHECK(contains(f32, "float4"));
  FusedSignature bad = make_signature(e, layouts[0], out);
  bad.operand_dtypes = {DType::f64, DType::f32, DType::f32};
  CHECK_THROWS_WITH_AS(fused_kernel_source(bad), doctest::Contains("float64"), Error);
}

TEST_CASE("the CUDA kernel table declares bf16/f16 per op and names the op's dtype where it refuses one") {
  for (DType d : {DType::bf16, DType::f16}) {
    CAPTURE(analysis::dtype_name(d));
    OpGraph b;
    HalfValues val{d, d};
    auto act = [&](const std::string& name, DType t, const std::vector<std::int64_t>& dims) {
      return b.tensor(name, t, dims, TensorRole::activation);
    };
    const auto a = b.input("a", val({4, 8})), w = b.input("w", val({8, 6}));
    const auto wf = b.input("wf", analysis::TensorData::from_double(DType::f32, {8, 6}, std::vector<double>(48, 0.5)));
    const auto y = act("y", d, {4, 6}), ym = act("ym", d, {4, 6}), s = act("s", d, {4, 6}), ln = act("ln", d, {4, 6});
    const auto c32 = act("c32", DType::f32, {4, 8}), ci = act("ci", DType::i64, {4, 8}), add = act("add", d, {4, 6});
    const auto q = b.input("q", val({1, 2, 16, 8})), k = b.input("k", val({1, 2, 16, 8})), v = b.input("v", val({1, 2, 16, 8}));
    const auto o = act("o", d, {1, 2, 16, 8}), lse = act("lse", DType::f32, {1, 2, 16}), lse_h = act("lse_h", d, {1, 2, 16});
    const auto o2 = act("o2", d, {1, 2, 16, 8});
    b.op("MatMul", "", {a, w}, {y});                                   // 0: cuBLAS GemmEx
    b.op("MatMul", "", {a, wf}, {ym});                                 // 1: mixed dtypes
    b.op("Softmax", "", {y}, {s});                                     // 2: float32 only (autocast upcasts)
    b.op("LayerNormalization", "", {y}, {ln});                         // 3: float32 only
    b.op("Cast", "", {a}, {c32}, {{"to", cast_to(DType::f32)}});       // 4: generated kernel
    b.op("Cast", "", {a}, {ci}, {{"to", cast_to(DType::i64)}});        // 5: the cast kernel
    b.op("Add", "", {y, s}, {add});                                    // 6: generated kernel
    b.op("FusedAttention", "memplan", {q, k, v}, {o, lse}, {{"scale", float_attr(0.35)}});    // 7
    b.op("FusedAttention", "memplan", {q, k, v}, {o2, lse_h}, {{"scale", float_attr(0.35)}});  // 8: LSE must be float32
    b.g.relink();
    auto reason = [&](std::size_t i) { return cuda_unsupported_reason(b.g, b.g.ops.at(i)); };
    CHECK(reason(0).empty());
    CHECK(contains(reason(1), "float32"));
    CHECK(contains(reason(2), analysis::dtype_name(d)));
    CHECK(contains(reason(3), analysis::dtype_name(d)));
    CHECK(reason(4).empty());
    CHECK(reason(5).empty());
    CHECK(reason(6).empty());
    CHECK(reason(7).empty());
    CHECK(contains(reason(8), "output 1"));
  }
}

TEST_CASE("a bf16/f16 MLP training graph in torch.autocast's form runs on CUDA kernels only, with 16-bit products") {
  for (DType d : {DType::bf16, DType::f16}) {
    CAPTURE(analysis::dtype_name(d));
    const auto tg = autocast_mlp_training(d, d);
    std::size_t half_products = 0;
    for (const auto& op : tg.graph.ops) {
      CAPTURE(op.name);
      CAPTURE(op.type);
      CHECK(cuda_unsupported_reason(tg.graph, op) == "");
      const bool product = op.type == "MatMul" || op.type == "MatMulGradA" || op.type == "MatMulGradB" || op.type == "MatMulT";
      if (product && tg.graph.tensors[op.outputs.at(0)].dtype == d) ++half_products;
    }
    CHECK(half_products >= 4);  // two forward products and at least dA, dB of the second
    for (const auto& [w, g] : tg.param_grads) CHECK(tg.graph.tensors[g].dtype == DType::f32);  // through the Casts' backward
  }
}

TEST_CASE("generated kernels read broadcast operands as vectors over merged dims (no device needed)") {
  const FusedExpr e = three_operand_expr();
  // A bias [C] and a per-row scale [B, S, 1] over [B, S, C]: the bias is one vector load per 4 elements at an offset
  // found with one division ([B*S, C] merged), the scale one element per vector; 32-bit index arithmetic.
  const std::string src = fused_kernel_source(make_signature(e, {{4, 6, 8}, {8}, {4, 6, 1}}, {4, 6, 8}));
  CAPTURE(src);
  CHECK(contains(src, "reinterpret_cast<const float4*>(in1)[o1 >> 2]"));
  CHECK(contains(src, "b2[u] = in2[o2]"));
  CHECK(contains(src, "typedef unsigned int idx_t"));
  CHECK(contains(src, "r % 8u"));
  CHECK_FALSE(contains(src, "r % 6u"));  // B and S merged for both operands
  CHECK_FALSE(nvrtc_compile(src, "--gpu-architecture=sm_90").empty());
  // An inner group of 3 cannot be read in vectors: only the scalar path reads the strided operand.
  const std::string odd = fused_kernel_source(make_signature(e, {{4, 6, 3}, {3}, {1}}, {4, 6, 3}));
  CHECK_FALSE(contains(odd, "if (vec)"));
  // Past 2^30 elements the indices are 64-bit.
  CHECK(contains(fused_kernel_source(make_signature(e, {{1 << 16, 1 << 15}, {1 << 15}, {1}}, {1 << 16, 1 << 15})),
                 "typedef unsigned long long idx_t"));
}
#endif
