// Fused elementwise kernels: source generation from a FusedExpr, NVRTC compilation, cache, launch.
#include "runtime_allocator/cuda/fused_kernel.hpp"

#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <sstream>
#include <string_view>

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

// The CUDA expression of each ElemOp, one per enumerator in the enum's order: $a and $b stand for the argument nodes'
// values, $i for the operand index of an input node, $0 and $1 for the parameters as float literals.
struct NodeTemplate {
  ElemOp op;
  std::string_view code;
};
constexpr NodeTemplate kNodeTemplates[] = {
    {ElemOp::input, "x$i"},
    {ElemOp::constant, "$0"},
    {ElemOp::add, "$a + $b"},
    {ElemOp::sub, "$a - $b"},
    {ElemOp::mul, "$a * $b"},
    {ElemOp::div, "$a / $b"},
    {ElemOp::pow, "powf($a, $b)"},
    {ElemOp::max, "($a != $a || $b != $b) ? __int_as_float(0x7fc00000) : fmaxf($a, $b)"},
    {ElemOp::min, "($a != $a || $b != $b) ? __int_as_float(0x7fc00000) : fminf($a, $b)"},
    {ElemOp::neg, "-$a"},
    {ElemOp::abs, "fabsf($a)"},
    {ElemOp::relu, "($a > 0.0f || $a != $a) ? $a : 0.0f"},  // NaN propagates
    {ElemOp::sigmoid, "1.0f / (1.0f + expf(-$a))"},
    {ElemOp::tanh, "tanhf($a)"},
    {ElemOp::erf, "erff($a)"},
    {ElemOp::exp, "expf($a)"},
    {ElemOp::log, "logf($a)"},
    {ElemOp::sqrt, "sqrtf($a)"},
    {ElemOp::reciprocal, "1.0f / $a"},
    {ElemOp::identity, "$a"},
    {ElemOp::clip, "fminf(fmaxf($a, $0), $1)"},
    {ElemOp::leaky_relu, "$a >= 0.0f ? $a : $a * $0"},
    {ElemOp::gt, "$a > $b ? 1.0f : 0.0f"},
    {ElemOp::ge, "$a >= $b ? 1.0f : 0.0f"},
    {ElemOp::floor, "floorf($a)"},
    {ElemOp::ceil, "ceilf($a)"},
    {ElemOp::tan, "tanf($a)"},
    {ElemOp::asin, "asinf($a)"},
    {ElemOp::acos, "acosf($a)"},
    {ElemOp::atan, "atanf($a)"},
    {ElemOp::sinh, "sinhf($a)"},
    {ElemOp::cosh, "coshf($a)"},
    {ElemOp::asinh, "asinhf($a)"},
    {ElemOp::acosh, "acoshf($a)"},
    {ElemOp::atanh, "atanhf($a)"},
    {ElemOp::keep, "$b > 0.0f ? $a : 0.0f"},
};

constexpr bool templates_in_enum_order() {
  for (std::size_t i = 0; i < std::size(kNodeTemplates); ++i)
    if (static_cast<std::size_t>(kNodeTemplates[i].op) != i) return false;
  return std::size(kNodeTemplates) == static_cast<std::size_t>(ElemOp::keep) + 1;  // keep is the last enumerator
}
static_assert(templates_in_enum_order(), "one template per ElemOp, in the enum's order");

// An op outside the enum (never parsed nor built) reads as its first argument.
std::string_view node_template(ElemOp op) {
  const auto i = static_cast<std::size_t>(op);
  return i < std::size(kNodeTemplates) ? kNodeTemplates[i].code : "$a";
}

// What a placeholder of a node template stands for in node `n`.
std::string placeholder(char name, const ExprNode& n) {
  switch (name) {
    case 'a':
      return "v" + std::to_string(n.a);
    case 'b':
      return "v" + std::to_string(n.b);
    case 'i':
      return std::to_string(n.a);
    case '0':
      return float_literal(n.p0);
    case '1':
      return float_literal(n.p1);
    default:
      return std::string("$") + name;
  }
}

// The right-hand side of node n's statement in the generated element function.
std::string node_code(const ExprNode& n) {
  const std::string_view t = node_template(n.op);
  std::string code;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '$' && i + 1 < t.size())
      code += placeholder(t[++i], n);
    else
      code += t[i];
  }
  return code;
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

namespace {

// The output's index space with its dims merged where every strided operand steps on contiguously (fewer divisions
// per element; a bias [C] over [B, S, C] reads through [B*S, C]), innermost group first; dims of extent 1 dropped.
struct IndexSpace {
  std::vector<std::int64_t> extents;
  std::vector<std::vector<std::int64_t>> strides;  // per operand (strided ones), per group
};

IndexSpace index_space(const FusedSignature& sig, const std::vector<bool>& used) {
  IndexSpace sp;
  std::vector<std::size_t> strided;
  for (std::size_t k = 0; k < sig.operands.size(); ++k)
    if (used[k] && sig.operands[k].kind == OperandLayout::Kind::strided) strided.push_back(k);
  sp.strides.resize(sig.operands.size());
  for (std::size_t d = sig.out_dims.size(); d-- > 0;) {
    const std::int64_t extent = sig.out_dims[d];
    if (extent == 1) continue;
    bool merge = !sp.extents.empty();
    for (std::size_t k : strided) merge = merge && sig.operands[k].strides[d] == sp.strides[k].back() * sp.extents.back();
    if (merge) {
      sp.extents.back() *= extent;
      continue;
    }
    sp.extents.push_back(extent);
    for (std::size_t k : strided) sp.strides[k].push_back(sig.operands[k].strides[d]);
  }
  return sp;
}

// The storage dtype of each operand (all f32 where the signature names none): ErrorKind::runtime for a count other
// than the expression's, ErrorKind::unsupported for an operand or result dtype the kernels do not load or store.
std::vector<DType> checked_operand_dtypes(const FusedSignature& sig) {
  const std::uint32_t n = sig.expr.num_inputs;
  if (!sig.operand_dtypes.empty() && sig.operand_dtypes.size() != n)
    fail(ErrorKind::runtime,
         "fused kernel: " + std::to_string(sig.operand_dtypes.size()) + " operand dtypes for " + std::to_string(n) + " operands");
  std::vector<DType> dt(n, DType::f32);
  if (!sig.operand_dtypes.empty()) dt = sig.operand_dtypes;
  for (DType d : dt)
    if (!fused_storage_dtype(d) && d != DType::boolean)
      fail(ErrorKind::unsupported, std::string("fused kernel: operand dtype ") + analysis::dtype_name(d));
  if (!fused_storage_dtype(sig.out_dtype))
    fail(ErrorKind::unsupported, std::string("fused kernel: result dtype ") + analysis::dtype_name(sig.out_dtype));
  return dt;
}

// Writes the source of one signature's kernel, a method per part of it; the members are the facts every part reads.
class KernelWriter {
 public:
  explicit KernelWriter(const FusedSignature& sig);
  std::string source();

 private:
  bool is(std::uint32_t k, OperandLayout::Kind kind) const { return used_[k] && sig_.operands[k].kind == kind; }
  // A strided operand whose innermost group broadcasts it: a vector of four elements reads one element of it.
  bool inner_broadcast(std::uint32_t k) const {
    return sig_.operands[k].kind == OperandLayout::Kind::strided && sp_.strides[k][0] == 0;
  }
  std::string u(std::int64_t v) const { return std::to_string(v) + (narrow_index_ ? "u" : "ull"); }  // an idx_t literal
  void header();
  void element_function();
  void kernel_head();
  void unrolled_loop_head(const std::string& indent, const std::string& bound);
  void offsets(const std::string& at, const std::string& indent);
  std::string call(const std::string& lane) const;
  void vector_path();
  void vector_loads();
  void vector_stores();
  void scalar_path();

  const FusedSignature& sig_;
  const FusedExpr& e_;
  std::vector<bool> used_;
  std::vector<DType> dt_;
  IndexSpace sp_;
  bool any_strided_ = false, vectorisable_ = true, narrow_index_ = true;
  std::ostringstream s_;
};

KernelWriter::KernelWriter(const FusedSignature& sig)
    : sig_(sig),
      e_(sig.expr),
      used_(referenced_operands(sig.expr)),
      dt_(checked_operand_dtypes(sig)),
      sp_(index_space(sig, used_)) {
  for (std::uint32_t k = 0; k < e_.num_inputs; ++k)
    if (is(k, OperandLayout::Kind::strided)) {
      any_strided_ = true;
      // Four consecutive elements read four consecutive operand elements (a vector load at an offset that is a
      // multiple of 4), or one element (broadcast along the innermost group).
      vectorisable_ =
          vectorisable_ && !sp_.extents.empty() && sp_.extents[0] % 4 == 0 && (sp_.strides[k][0] == 0 || sp_.strides[k][0] == 1);
    }
  std::int64_t total = 1;
  for (auto d : sig.out_dims) total *= d;
  // 32-bit indices where every index, and an index plus one grid of elements, fits (the divisions by the constant
  // extents are then a multiply and a shift).
  narrow_index_ = total < (std::int64_t{1} << 30);
}

std::string KernelWriter::source() {
  header();
  element_function();
  kernel_head();
  // Each thread handles kUnroll vectors (or elements) kThreads apart within its block's chunk: all loads are issued
  // before the first result is computed, and one chunk per block covers the tensor in one pass (a grid-stride loop
  // only past the grid limit).
  if (vectorisable_) vector_path();
  scalar_path();
  return s_.str();
}

// The expression as a comment, and with 16-bit storage anywhere the dtypes and the conversions.
void KernelWriter::header() {
  s_ << "// memplan fused elementwise: " << (sig_.body.empty() ? e_.to_string() : "custom body") << "\n";
  bool low = sig_.out_dtype != DType::f32;
  for (DType d : dt_) low = low || d != DType::f32;
  if (!low) return;
  s_ << "// storage:";
  for (DType d : dt_) s_ << " " << analysis::dtype_name(d);
  s_ << " -> " << analysis::dtype_name(sig_.out_dtype) << "\n" << kHalfPrelude;
}

// memplan_expr(x0, ..., xN-1): the expression's nodes (or the custom body) on one element's float values.
void KernelWriter::element_function() {
  s_ << "__device__ __forceinline__ float memplan_expr(";
  for (std::uint32_t k = 0; k < e_.num_inputs; ++k) s_ << (k ? ", " : "") << "float x" << k;
  s_ << ") {\n";
  if (!sig_.body.empty()) {
    s_ << "  " << sig_.body << "\n}\n";
    return;
  }
  for (std::size_t i = 0; i < e_.nodes.size(); ++i) s_ << "  const float v" << i << " = " << node_code(e_.nodes[i]) << ";\n";
  s_ << "  return v" << e_.nodes.size() - 1 << ";\n}\n";
}

// The kernel's parameters, index type, this block's chunk and the scalar operands' values.
void KernelWriter::kernel_head() {
  s_ << "extern \"C\" __global__ void __launch_bounds__(" << kThreads << ") memplan_fused(";
  for (std::uint32_t k = 0; k < e_.num_inputs; ++k) s_ << "const " << storage_type(dt_[k]) << "* __restrict__ in" << k << ", ";
  s_ << storage_type(sig_.out_dtype) << "* __restrict__ out, unsigned long long n, int vec) {\n";
  s_ << "  typedef " << (narrow_index_ ? "unsigned int" : "unsigned long long") << " idx_t;\n";
  s_ << "  const idx_t chunk = (idx_t)gridDim.x * " << u(kThreads * kUnroll) << ";\n";
  s_ << "  const idx_t first = (idx_t)blockIdx.x * " << u(kThreads * kUnroll) << " + threadIdx.x;\n";
  for (std::uint32_t k = 0; k < e_.num_inputs; ++k)
    if (is(k, OperandLayout::Kind::scalar))
      s_ << "  const float s" << k << " = " << widen(dt_[k], "in" + std::to_string(k) + "[0]") << ";\n";
}

// for (u < kUnroll) over the indices i of a thread within the chunk at `base`, up to `bound`.
void KernelWriter::unrolled_loop_head(const std::string& indent, const std::string& bound) {
  s_ << indent << "#pragma unroll\n" << indent << "for (int u = 0; u < " << kUnroll << "; ++u) {\n";
  s_ << indent << "  const idx_t i = base + u * " << u(kThreads) << ";\n" << indent << "  if (i >= " << bound << ") break;\n";
}

// Offsets o<k> of the strided operands for element index `at` (a variable name), over the merged index space.
void KernelWriter::offsets(const std::string& at, const std::string& indent) {
  if (!any_strided_) return;
  s_ << indent << "idx_t r = " << at << ";\n";
  for (std::uint32_t k = 0; k < e_.num_inputs; ++k)
    if (is(k, OperandLayout::Kind::strided)) s_ << indent << "idx_t o" << k << " = 0;\n";
  for (std::size_t g = 0; g < sp_.extents.size(); ++g) {
    const bool last = g + 1 == sp_.extents.size();
    s_ << indent << "{ const idx_t q = " << (last ? std::string("r") : "r % " + u(sp_.extents[g])) << ";";
    if (!last) s_ << " r /= " << u(sp_.extents[g]) << ";";
    for (std::uint32_t k = 0; k < e_.num_inputs; ++k)
      if (is(k, OperandLayout::Kind::strided) && sp_.strides[k][g] != 0)
        s_ << " o" << k << " += q * " << u(sp_.strides[k][g]) << ";";
    s_ << " }\n";
  }
}

// memplan_expr of the operands' values for one element: lane "" is the scalar path, x/y/z/w a lane of the vector path.
std::string KernelWriter::call(const std::string& lane) const {
  std::string c = "memplan_expr(";
  for (std::uint32_t k = 0; k < e_.num_inputs; ++k) {
    if (k) c += ", ";
    const auto& l = sig_.operands[k];
    const std::string K = std::to_string(k);
    if (!used_[k])
      c += "0.0f";
    else if (l.kind == OperandLayout::Kind::scalar)
      c += "s" + K;
    else if (lane.empty())
      c += widen(dt_[k], l.kind == OperandLayout::Kind::full ? "in" + K + "[i]" : "in" + K + "[o" + K + "]");
    else if (inner_broadcast(k))
      c += "b" + K + "[u]";
    else
      c += widen(dt_[k], "a" + K + "[u]." + lane);
  }
  return c + ")";
}

// Four elements per index (when the launch finds every pointer 16-byte aligned and n a multiple of 4).
void KernelWriter::vector_path() {
  s_ << "  if (vec) {\n    const idx_t n4 = (idx_t)(n >> 2);\n";
  for (std::uint32_t k = 0; k < e_.num_inputs; ++k) {
    if (!used_[k] || sig_.operands[k].kind == OperandLayout::Kind::scalar) continue;
    if (inner_broadcast(k))
      s_ << "    float b" << k << "[" << kUnroll << "];\n";
    else
      s_ << "    " << vector_type(dt_[k]) << " a" << k << "[" << kUnroll << "];\n";
  }
  s_ << "    for (idx_t base = first; base < n4; base += chunk) {\n";
  vector_loads();
  vector_stores();
  s_ << "    }\n    return;\n  }\n";
}

void KernelWriter::vector_loads() {
  unrolled_loop_head("      ", "n4");
  offsets("i * " + u(4), "        ");
  for (std::uint32_t k = 0; k < e_.num_inputs; ++k) {
    const auto& l = sig_.operands[k];
    if (!used_[k] || l.kind == OperandLayout::Kind::scalar) continue;
    const std::string K = std::to_string(k), vt = vector_type(dt_[k]);
    if (l.kind == OperandLayout::Kind::full)
      s_ << "        a" << K << "[u] = reinterpret_cast<const " << vt << "*>(in" << K << ")[i];\n";
    else if (sp_.strides[k][0] == 0)
      s_ << "        b" << K << "[u] = " << widen(dt_[k], "in" + K + "[o" + K + "]") << ";\n";
    else
      s_ << "        a" << K << "[u] = reinterpret_cast<const " << vt << "*>(in" << K << ")[o" << K << " >> 2];\n";
  }
  s_ << "      }\n";
}

void KernelWriter::vector_stores() {
  unrolled_loop_head("      ", "n4");
  s_ << "        " << vector_type(sig_.out_dtype) << " r;\n";
  for (const char* lane : {"x", "y", "z", "w"})
    s_ << "        r." << lane << " = " << narrow(sig_.out_dtype, call(lane)) << ";\n";
  s_ << "        reinterpret_cast<" << vector_type(sig_.out_dtype) << "*>(out)[i] = r;\n      }\n";
}

// One element per index: every launch that is not vectorised, and the whole kernel where no vector path exists.
void KernelWriter::scalar_path() {
  s_ << "  for (idx_t base = first; base < (idx_t)n; base += chunk) {\n";
  unrolled_loop_head("    ", "(idx_t)n");
  offsets("i", "      ");
  s_ << "      out[i] = " << narrow(sig_.out_dtype, call("")) << ";\n    }\n  }\n}\n";
}

}  // namespace

std::string fused_kernel_source(const FusedSignature& sig) { return KernelWriter(sig).source(); }

FusedKernelCache::FusedKernelCache() {
  int dev = 0, major = 0, minor = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "compute capability");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev), "compute capability");
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

namespace {

template <class T>
void append_raw(std::string& key, const T& v) {
  key.append(reinterpret_cast<const char*>(&v), sizeof v);
}

// Everything the generated source depends on, as bytes: a map key far cheaper to build than the source itself
// (the executor launches the same signatures every step).
std::string signature_key(const FusedSignature& sig) {
  std::string key;
  key.reserve(64 + sig.body.size() + 24 * sig.expr.nodes.size());
  append_raw(key, sig.expr.num_inputs);
  append_raw(key, sig.expr.nodes.size());
  for (const auto& n : sig.expr.nodes) {
    append_raw(key, n.op);
    append_raw(key, n.a);
    append_raw(key, n.b);
    append_raw(key, n.p0);
    append_raw(key, n.p1);
  }
  append_raw(key, sig.out_dims.size());
  for (auto d : sig.out_dims) append_raw(key, d);
  for (const auto& l : sig.operands) {
    append_raw(key, l.kind);
    append_raw(key, l.strides.size());
    for (auto st : l.strides) append_raw(key, st);
  }
  append_raw(key, sig.operand_dtypes.size());
  for (auto d : sig.operand_dtypes) append_raw(key, d);
  append_raw(key, sig.out_dtype);
  key += sig.body;
  return key;
}

}  // namespace

void FusedKernelCache::launch(const FusedSignature& sig, const std::vector<const void*>& operands, void* out,
                              cudaStream_t stream) {
  if (operands.size() != sig.operands.size()) fail(ErrorKind::runtime, "fused kernel: operand count mismatch");
  unsigned long long n = 1;
  for (auto d : sig.out_dims) n *= static_cast<unsigned long long>(d);
  if (n == 0) return;
  std::string key = signature_key(sig);
  auto hit = by_signature_.find(key);
  if (hit == by_signature_.end()) hit = by_signature_.emplace(std::move(key), get(fused_kernel_source(sig))).first;
  cudaKernel_t fn = hit->second;
  auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  int vec = n % 4 == 0 && aligned(out);
  for (std::size_t k = 0; k < operands.size(); ++k)
    if (sig.operands[k].kind != OperandLayout::Kind::scalar) vec = vec && aligned(operands[k]);
  // One chunk of kThreads * kUnroll vectors (or elements) per block, the grid covering the tensor once (the kernel's
  // grid-stride loop only runs past the cap).
  const unsigned long long per_block = static_cast<unsigned long long>(kThreads) * kUnroll * (vec ? 4 : 1);
  const unsigned long long want = (n + per_block - 1) / per_block;
  const unsigned blocks = static_cast<unsigned>(std::min<unsigned long long>(want, 1ull << 30));
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
