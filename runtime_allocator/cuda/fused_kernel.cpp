// Fused elementwise kernels: source generation from a FusedExpr, NVRTC compilation, cache, launch.
#include "runtime_allocator/cuda/fused_kernel.hpp"

#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "runtime_allocator/cuda/cuda_context.hpp"

namespace memplan::runtime::cuda {

using analysis::ElemOp;
using analysis::ExprNode;
using analysis::FusedExpr;

namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;  // float4 loads in flight per thread and operand

void check_nvrtc(nvrtcResult r, const std::string& what) {
  if (r != NVRTC_SUCCESS) fail(ErrorKind::runtime, "NVRTC error in " + what + ": " + nvrtcGetErrorString(r));
}

}  // namespace

std::string float_literal(double v) {
  const float f = static_cast<float>(v);
  if (std::isnan(f)) return "__int_as_float(0x7fffffff)";
  if (std::isinf(f)) return f > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.9ef", static_cast<double>(f));
  return buf;
}

namespace {

std::string literal(double v) { return float_literal(v); }

std::string node_code(const ExprNode& n) {
  const std::string a = "v" + std::to_string(n.a), b = "v" + std::to_string(n.b);
  switch (n.op) {
    case ElemOp::input: return "x" + std::to_string(n.a);
    case ElemOp::constant: return literal(n.p0);
    case ElemOp::add: return a + " + " + b;
    case ElemOp::sub: return a + " - " + b;
    case ElemOp::mul: return a + " * " + b;
    case ElemOp::div: return a + " / " + b;
    case ElemOp::pow: return "powf(" + a + ", " + b + ")";
    case ElemOp::max: return "(" + a + " != " + a + " || " + b + " != " + b + ") ? __int_as_float(0x7fc00000) : fmaxf(" + a + ", " + b + ")";
    case ElemOp::min: return "(" + a + " != " + a + " || " + b + " != " + b + ") ? __int_as_float(0x7fc00000) : fminf(" + a + ", " + b + ")";
    case ElemOp::neg: return "-" + a;
    case ElemOp::abs: return "fabsf(" + a + ")";
    case ElemOp::relu: return "(" + a + " > 0.0f || " + a + " != " + a + ") ? " + a + " : 0.0f";  // NaN propagates
    case ElemOp::sigmoid: return "1.0f / (1.0f + expf(-" + a + "))";
    case ElemOp::tanh: return "tanhf(" + a + ")";
    case ElemOp::erf: return "erff(" + a + ")";
    case ElemOp::exp: return "expf(" + a + ")";
    case ElemOp::log: return "logf(" + a + ")";
    case ElemOp::sqrt: return "sqrtf(" + a + ")";
    case ElemOp::reciprocal: return "1.0f / " + a;
    case ElemOp::identity: return a;
    case ElemOp::clip: return "fminf(fmaxf(" + a + ", " + literal(n.p0) + "), " + literal(n.p1) + ")";
    case ElemOp::leaky_relu: return a + " >= 0.0f ? " + a + " : " + a + " * " + literal(n.p0);
    case ElemOp::gt: return a + " > " + b + " ? 1.0f : 0.0f";
    case ElemOp::ge: return a + " >= " + b + " ? 1.0f : 0.0f";
    case ElemOp::floor: return "floorf(" + a + ")";
    case ElemOp::ceil: return "ceilf(" + a + ")";
  }
  return a;
}

std::vector<bool> referenced_operands(const FusedExpr& e) {
  std::vector<bool> used(e.num_inputs, false);
  for (const auto& n : e.nodes)
    if (n.op == ElemOp::input && n.a < used.size()) used[n.a] = true;
  return used;
}

}  // namespace

FusedSignature make_signature(const FusedExpr& expr, const std::vector<std::vector<std::int64_t>>& operand_dims,
                              const std::vector<std::int64_t>& out_dims) {
  if (operand_dims.size() != expr.num_inputs)
    fail(ErrorKind::runtime, "fused kernel: " + std::to_string(operand_dims.size()) + " operands for an expression of " +
                                 std::to_string(expr.num_inputs));
  FusedSignature sig{expr, out_dims, {}};
  const std::size_t rank = out_dims.size();
  for (const auto& dims : operand_dims) {
    if (dims.size() > rank) fail(ErrorKind::shape, "fused kernel: an operand has a higher rank than the output");
    OperandLayout l;
    l.strides.assign(rank, 0);
    std::int64_t stride = 1, count = 1;
    bool same = true;
    for (std::size_t k = 0; k < dims.size(); ++k) {
      const std::size_t j = dims.size() - 1 - k, o = rank - 1 - k;
      if (dims[j] != 1 && dims[j] != out_dims[o]) fail(ErrorKind::shape, "fused kernel: operand does not broadcast to the output");
      if (dims[j] != out_dims[o]) same = false;
      l.strides[o] = dims[j] == 1 ? 0 : stride;
      stride *= dims[j];
      count *= dims[j];
    }
    for (std::size_t o = 0; o + dims.size() < rank; ++o) same = same && out_dims[o] == 1;
    l.kind = same ? OperandLayout::Kind::full : count == 1 ? OperandLayout::Kind::scalar : OperandLayout::Kind::strided;
    if (l.kind != OperandLayout::Kind::strided) l.strides.clear();
    sig.operands.push_back(std::move(l));
  }
  return sig;
}

FusedSignature make_body_signature(std::string body, const std::vector<std::vector<std::int64_t>>& operand_dims,
                                   const std::vector<std::int64_t>& out_dims) {
  FusedExpr e;
  e.num_inputs = static_cast<std::uint32_t>(operand_dims.size());
  for (std::uint32_t k = 0; k < e.num_inputs; ++k) e.add({ElemOp::input, k, 0, 0, 0});
  FusedSignature sig = make_signature(e, operand_dims, out_dims);
  sig.body = std::move(body);
  return sig;
}

bool fused_storage_dtype(analysis::DType d) noexcept {
  return d == analysis::DType::f32 || d == analysis::DType::bf16 || d == analysis::DType::f16;
}

namespace {

using analysis::DType;

// Conversions of the generated source for 16-bit storage, bit-exact and header-free: bf16 widens by a shift and
// narrows rounding to nearest even (NaN stays a quiet NaN of its sign); f16 converts with PTX cvt (.rn to narrow).
constexpr const char* kHalfPrelude = R"(__device__ __forceinline__ float mp_bf16_f32(unsigned short h) {
  return __uint_as_float(((unsigned int)h) << 16);
}
__device__ __forceinline__ unsigned short mp_f32_bf16(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
__device__ __forceinline__ float mp_f16_f32(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ unsigned short mp_f32_f16(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
)";

// Bool operands (masks, conditions) are bytes read as 0.0f or 1.0f.
const char* storage_type(DType d) { return d == DType::f32 ? "float" : d == DType::boolean ? "unsigned char" : "unsigned short"; }
const char* vector_type(DType d) { return d == DType::f32 ? "float4" : d == DType::boolean ? "uchar4" : "ushort4"; }
// The float value of a stored element `v`, and the stored element of a float `v`.
std::string widen(DType d, const std::string& v) {
  if (d == DType::boolean) return "(" + v + " != 0 ? 1.0f : 0.0f)";
  return d == DType::f32 ? v : (d == DType::bf16 ? "mp_bf16_f32(" : "mp_f16_f32(") + v + ")";
}
std::string narrow(DType d, const std::string& v) {
  return d == DType::f32 ? v : (d == DType::bf16 ? "mp_f32_bf16(" : "mp_f32_f16(") + v + ")";
}

}  // namespace

std::string fused_kernel_source(const FusedSignature& sig) {
  const FusedExpr& e = sig.expr;
  const auto used = referenced_operands(e);
  if (!sig.operand_dtypes.empty() && sig.operand_dtypes.size() != e.num_inputs)
    fail(ErrorKind::runtime, "fused kernel: " + std::to_string(sig.operand_dtypes.size()) + " operand dtypes for " +
                                 std::to_string(e.num_inputs) + " operands");
  std::vector<DType> dt(e.num_inputs, DType::f32);
  if (!sig.operand_dtypes.empty()) dt = sig.operand_dtypes;
  bool low = sig.out_dtype != DType::f32;
  for (DType d : dt) low = low || d != DType::f32;
  for (DType d : dt)
    if (!fused_storage_dtype(d) && d != DType::boolean)
      fail(ErrorKind::unsupported, std::string("fused kernel: operand dtype ") + analysis::dtype_name(d));
  if (!fused_storage_dtype(sig.out_dtype))
    fail(ErrorKind::unsupported, std::string("fused kernel: result dtype ") + analysis::dtype_name(sig.out_dtype));
  std::ostringstream s;
  s << "// memplan fused elementwise: " << (sig.body.empty() ? e.to_string() : "custom body") << "\n";
  if (low) {
    s << "// storage:";
    for (DType d : dt) s << " " << analysis::dtype_name(d);
    s << " -> " << analysis::dtype_name(sig.out_dtype) << "\n" << kHalfPrelude;
  }
  s << "__device__ __forceinline__ float memplan_expr(";
  for (std::uint32_t k = 0; k < e.num_inputs; ++k) s << (k ? ", " : "") << "float x" << k;
  s << ") {\n";
  if (!sig.body.empty()) {
    s << "  " << sig.body << "\n}\n";
  } else {
    for (std::size_t i = 0; i < e.nodes.size(); ++i) s << "  const float v" << i << " = " << node_code(e.nodes[i]) << ";\n";
    s << "  return v" << e.nodes.size() - 1 << ";\n}\n";
  }
  s << "extern \"C\" __global__ void __launch_bounds__(" << kThreads << ") memplan_fused(";
  for (std::uint32_t k = 0; k < e.num_inputs; ++k) s << "const " << storage_type(dt[k]) << "* __restrict__ in" << k << ", ";
  s << storage_type(sig.out_dtype) << "* __restrict__ out, unsigned long long n, int vec) {\n";
  s << "  const unsigned long long stride = (unsigned long long)gridDim.x * "
       "blockDim.x;\n";
  s << "  const unsigned long long tid = (unsigned long long)blockIdx.x * "
       "blockDim.x + threadIdx.x;\n";
  bool vectorisable = true, any_strided = false;
  for (std::uint32_t k = 0; k < e.num_inputs; ++k) {
    const auto kind = sig.operands[k].kind;
    if (!used[k]) continue;
    if (kind == OperandLayout::Kind::scalar) s << "  const float s" << k << " = " << widen(dt[k], "in" + std::to_string(k) + "[0]") << ";\n";
    vectorisable = vectorisable && kind != OperandLayout::Kind::strided;
    any_strided = any_strided || kind == OperandLayout::Kind::strided;
  }
  auto call = [&](const std::string& lane, const std::string& idx) {
    std::string c = "memplan_expr(";
    for (std::uint32_t k = 0; k < e.num_inputs; ++k) {
      if (k) c += ", ";
      const auto kind = sig.operands[k].kind;
      const std::string K = std::to_string(k);
      if (!used[k]) c += "0.0f";
      else if (kind == OperandLayout::Kind::scalar) c += "s" + K;
      else if (kind == OperandLayout::Kind::full) c += widen(dt[k], lane.empty() ? "in" + K + "[" + idx + "]" : "a" + K + "[u]." + lane);
      else c += widen(dt[k], "in" + K + "[o" + K + "]");
    }
    return c + ")";
  };
  if (vectorisable) {
    // The caller sets vec only when n % 4 == 0 and every pointer is 16-byte aligned. Each thread keeps
    // kUnroll vectors of 4 elements (float4, or ushort4 for 16-bit storage) per operand in flight, and loads the
    // next tile before computing the current one, so long expressions overlap their arithmetic with the loads.
    auto load = [&](const std::string& arr, const std::string& at) {
      for (std::uint32_t k = 0; k < e.num_inputs; ++k)
        if (used[k] && sig.operands[k].kind == OperandLayout::Kind::full)
          s << "      #pragma unroll\n      for (int u = 0; u < " << kUnroll << "; ++u) { const unsigned long long i = " << at
            << " + u * stride; if (i < n4) " << arr << k << "[u] = reinterpret_cast<const " << vector_type(dt[k]) << "*>(in" << k
            << ")[i]; }\n";
    };
    s << "  if (vec) {\n    const unsigned long long n4 = n >> 2, step = " << kUnroll << " * stride;\n";
    for (std::uint32_t k = 0; k < e.num_inputs; ++k)
      if (used[k] && sig.operands[k].kind == OperandLayout::Kind::full)
        s << "    " << vector_type(dt[k]) << " a" << k << "[" << kUnroll << "], b" << k << "[" << kUnroll << "];\n";
    load("a", "tid");
    s << "    for (unsigned long long base = tid; base < n4; base += step) {\n";
    load("b", "base + step");
    s << "      #pragma unroll\n      for (int u = 0; u < " << kUnroll << "; ++u) {\n";
    s << "        const unsigned long long i = base + u * stride;\n        if "
         "(i >= n4) break;\n        " << vector_type(sig.out_dtype) << " r;\n";
    for (const char* lane : {"x", "y", "z", "w"}) s << "        r." << lane << " = " << narrow(sig.out_dtype, call(lane, "")) << ";\n";
    s << "        reinterpret_cast<" << vector_type(sig.out_dtype) << "*>(out)[i] = r;\n      }\n";
    for (std::uint32_t k = 0; k < e.num_inputs; ++k)
      if (used[k] && sig.operands[k].kind == OperandLayout::Kind::full)
        s << "      #pragma unroll\n      for (int u = 0; u < " << kUnroll << "; ++u) a" << k << "[u] = b" << k << "[u];\n";
    s << "    }\n    return;\n  }\n";
  }
  s << "  for (unsigned long long i = tid; i < n; i += stride) {\n";
  if (any_strided) {
    s << "    unsigned long long r = i;\n";
    for (std::uint32_t k = 0; k < e.num_inputs; ++k)
      if (used[k] && sig.operands[k].kind == OperandLayout::Kind::strided) s << "    long long o" << k << " = 0;\n";
    for (std::size_t d = sig.out_dims.size(); d-- > 0;) {
      s << "    { const long long q = (long long)(r % " << sig.out_dims[d] << "ULL); r /= " << sig.out_dims[d] << "ULL;";
      for (std::uint32_t k = 0; k < e.num_inputs; ++k)
        if (used[k] && sig.operands[k].kind == OperandLayout::Kind::strided && sig.operands[k].strides[d] != 0)
          s << " o" << k << " += q * " << sig.operands[k].strides[d] << "LL;";
      s << " }\n";
    }
  }
  s << "    out[i] = " << narrow(sig.out_dtype, call("", "i")) << ";\n  }\n}\n";
  return s.str();
}

FusedKernelCache::FusedKernelCache() {
  int dev = 0, major = 0, minor = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "compute capability");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev), "compute capability");
  check(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, dev), "multiprocessor count");
  arch_ = "--gpu-architecture=sm_" + std::to_string(major) + std::to_string(minor);
}

FusedKernelCache::~FusedKernelCache() {
  for (auto& [src, mod] : modules_) (void)cudaLibraryUnload(mod.first);
}

std::string nvrtc_compile(const std::string& source, const std::string& arch) {
  nvrtcProgram prog = nullptr;
  check_nvrtc(nvrtcCreateProgram(&prog, source.c_str(), "memplan_fused.cu", 0, nullptr, nullptr), "nvrtcCreateProgram");
  const char* opts[] = {arch.c_str(), "--std=c++17", "--device-as-default-execution-space"};
  const nvrtcResult built = nvrtcCompileProgram(prog, 3, opts);
  if (built != NVRTC_SUCCESS) {
    std::size_t log_size = 0;
    nvrtcGetProgramLogSize(prog, &log_size);
    std::string log(log_size, '\0');
    nvrtcGetProgramLog(prog, log.data());
    nvrtcDestroyProgram(&prog);
    fail(ErrorKind::runtime, "NVRTC could not compile a fused kernel: " + log + "\n--- source ---\n" + source);
  }
  std::size_t size = 0;
  check_nvrtc(nvrtcGetCUBINSize(prog, &size), "nvrtcGetCUBINSize");
  std::string cubin(size, '\0');
  check_nvrtc(nvrtcGetCUBIN(prog, cubin.data()), "nvrtcGetCUBIN");
  nvrtcDestroyProgram(&prog);
  return cubin;
}

cudaKernel_t FusedKernelCache::get(const std::string& source) {
  if (auto it = modules_.find(source); it != modules_.end()) return it->second.second;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string cubin = nvrtc_compile(source, arch_);
  cudaLibrary_t mod = nullptr;
  cudaKernel_t fn = nullptr;
  check(cudaLibraryLoadData(&mod, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0), "cudaLibraryLoadData");
  check(cudaLibraryGetKernel(&fn, mod, "memplan_fused"), "cudaLibraryGetKernel");
  modules_.emplace(source, std::make_pair(mod, fn));
  compile_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return fn;
}

void FusedKernelCache::launch(const FusedSignature& sig, const std::vector<const void*>& operands, void* out,
                              cudaStream_t stream) {
  if (operands.size() != sig.operands.size()) fail(ErrorKind::runtime, "fused kernel: operand count mismatch");
  unsigned long long n = 1;
  for (auto d : sig.out_dims) n *= static_cast<unsigned long long>(d);
  if (n == 0) return;
  cudaKernel_t fn = get(fused_kernel_source(sig));
  auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  int vec = n % 4 == 0 && aligned(out);
  for (std::size_t k = 0; k < operands.size(); ++k)
    if (sig.operands[k].kind == OperandLayout::Kind::full) vec = vec && aligned(operands[k]);
  const unsigned long long per_block = static_cast<unsigned long long>(kThreads) * (vec ? 4 * kUnroll : 1);
  const unsigned long long want = (n + per_block - 1) / per_block;
  const unsigned blocks = static_cast<unsigned>(std::min<unsigned long long>(want, static_cast<unsigned long long>(sm_count_) * 8));
  std::vector<const void*> ptrs = operands;  // cudaLaunchKernel takes the address of each argument
  std::vector<void*> args;
  for (const void*& p : ptrs) args.push_back(&p);
  args.push_back(&out);
  args.push_back(&n);
  args.push_back(&vec);
  check(cudaLaunchKernel(reinterpret_cast<const void*>(fn), dim3(blocks), dim3(kThreads), args.data(), 0, stream),
        "launch of a fused kernel");
}

}  // namespace memplan::runtime::cuda
