// The CUDA executor's library-backed ops: MatMul/Gemm through cuBLAS; Conv (1-3 spatial axes), ConvTranspose (cuDNN
// backward data), the Conv gradients and BatchNorm through cuDNN (pools: cuda_dnn_pool.cpp) (float32 FMA math: no TF32, so results match the CPU reference). MatMul, Gemm and the convolutions also
// take bf16/f16 tensors (float32 accumulation on tensor cores); bf16/f16 pools run hand-written kernels.
#include <algorithm>

#include "runtime_allocator/cuda/cuda_dnn_desc.hpp"
#include "runtime_allocator/cuda/cuda_state.hpp"
#include "runtime_allocator/cuda/kernels.hpp"
#include "runtime_allocator/cuda/kernels_training.hpp"

namespace memplan::runtime::cuda {

using analysis::kNoTensor;
using analysis::Op;
using analysis::OpId;
using analysis::TensorId;

int as_int(std::int64_t v, const Op& op) {
  if (v < 0 || v > 0x7fffffff) fail(ErrorKind::unsupported, "op '" + op.name + "': a dimension beyond cuBLAS's int range");
  return static_cast<int>(v);
}

namespace {

// Row-major Y = A B (batched, numpy-broadcast batch dims) as cuBLAS's column-major Y^T = B^T A^T; A, B and Y of one
// float dtype (same_float_dtype_reason).
void run_matmul(ExecState& s, const Op& op) {
  auto a = s.dims(op.inputs[0]), b = s.dims(op.inputs[1]);
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  const std::int64_t m = a[a.size() - 2], k = a.back(), n = b.back();
  if (b[b.size() - 2] != k) fail(ErrorKind::shape, "op '" + op.name + "': MatMul inner dimensions differ");
  const std::int64_t batch_a = dims_product(a, 0, a.size() - 2), batch_b = dims_product(b, 0, b.size() - 2);
  const analysis::DType dt = s.tensor(op.inputs[0]).dtype;
  const int eb = elem_bytes(s, op.inputs[0]);
  const void *pa = s.ptr[op.inputs[0]], *pb = s.ptr[op.inputs[1]];
  void* pc = s.ptr[op.outputs[0]];
  if (batch_b == 1) {  // B shared by every batch: one product with the batches stacked into M
    blas_gemm(s, op, dt, BlasGemm{false, false, n, batch_a * m, k, n, k, n}, pb, pa, pc);
    return;
  }
  const std::vector<std::int64_t> ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  if (batch_a == 1 || ab == bb) {
    blas_gemm(s, op, dt, BlasGemm{false, false, n, m, k, n, k, n, k * n, batch_a == 1 ? 0 : m * k, m * n, batch_b}, pb, pa, pc);
    return;
  }
  // General broadcast of batch dims: one product per output batch.
  const auto out = s.dims(op.outputs[0]);
  const std::size_t rank = out.size() - (s.dims(op.outputs[0]).size() >= 2 ? 2 : 0);
  const std::int64_t batches = dims_product(out, 0, rank);
  for (std::int64_t i = 0; i < batches; ++i) {
    std::int64_t r = i, oa = 0, ob = 0, sa = 1, sb = 1;
    for (std::size_t d = rank; d-- > 0;) {
      const std::int64_t q = r % out[d];
      r /= out[d];
      const std::size_t da = d + ab.size() - rank, db = d + bb.size() - rank;
      if (d + ab.size() >= rank && ab[da] != 1) oa += q * sa;
      if (d + bb.size() >= rank && bb[db] != 1) ob += q * sb;
      if (d + ab.size() >= rank) sa *= ab[da];
      if (d + bb.size() >= rank) sb *= bb[db];
    }
    blas_gemm(s, op, dt, BlasGemm{false, false, n, m, k, n, k, n}, advance(pb, ob * k * n, eb), advance(pa, oa * m * k, eb),
              advance(pc, i * m * n, eb));
  }
}

void run_gemm(ExecState& s, const Op& op) {
  const auto a = s.dims(op.inputs[0]), b = s.dims(op.inputs[1]);
  const bool ta = op.attr_int("transA", 0) != 0, tb = op.attr_int("transB", 0) != 0;
  const std::int64_t m = ta ? a[1] : a[0], k = ta ? a[0] : a[1], n = tb ? b[0] : b[1];
  BlasGemm g{tb, ta, n, m, k, tb ? k : n, ta ? m : k, n};
  g.alpha = static_cast<float>(op.attr_float("alpha", 1.0));
  g.beta = static_cast<float>(op.attr_float("beta", 1.0));
  void* y = s.ptr[op.outputs[0]];
  if (op.input(2) != kNoTensor && g.beta != 0.0f) {  // Y = C broadcast, then Y = alpha*A*B + beta*Y
    const auto c = s.dims(op.input(2));
    StridedCopy cp;
    cp.rank = 2;
    cp.elem_bytes = elem_bytes(s, op.input(2));
    cp.dims[0] = m;
    cp.dims[1] = n;
    const std::int64_t c0 = c.size() == 2 ? c[0] : 1, c1 = c.empty() ? 1 : c.back();
    cp.src_strides[0] = c0 == 1 ? 0 : c1;
    cp.src_strides[1] = c1 == 1 ? 0 : 1;
    cp.dst_strides[0] = n;
    cp.dst_strides[1] = 1;
    cp.src = s.ptr[op.input(2)];
    cp.dst = y;
    strided_copy(cp, s.ctx.stream());
  } else {
    g.beta = 0.0f;
  }
  blas_gemm(s, op, s.tensor(op.inputs[0]).dtype, g, s.ptr[op.inputs[1]], s.ptr[op.inputs[0]], y);
}

#ifdef MEMPLAN_HAVE_CUDNN
// Filter and convolution descriptors of a forward Conv, or of the Conv a ConvGrad* op differentiates, with the
// algorithm of the wanted direction and its workspace.
struct ConvSetup {
  enum class Dir { forward, data, filter };
  cudnnFilterDescriptor_t filter = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  int algo = 0;
  std::size_t workspace = 0;
  bool half = false;                          // bf16/f16 data (float32 compute)
  cudnnMathType_t math = CUDNN_FMA_MATH;      // of the chosen algorithm
  ~ConvSetup() {
    if (filter) cudnnDestroyFilterDescriptor(filter);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
};

// The first algorithm cuDNN's heuristics rank that runs within the workspace limit in FMA math (float32 data: no
// TF32), or in default or tensor-op math (bf16/f16 data, float32 accumulation).
template <class Perf>
bool pick(const Perf* perf, int found, std::uint64_t limit, ConvSetup& c) {
  for (int i = 0; i < found; ++i) {
    const bool math = c.half ? perf[i].mathType == CUDNN_TENSOR_OP_MATH || perf[i].mathType == CUDNN_DEFAULT_MATH
                             : perf[i].mathType == CUDNN_FMA_MATH;
    if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > limit || !math) continue;
    c.algo = static_cast<int>(perf[i].algo);
    c.workspace = perf[i].memory;
    c.math = perf[i].mathType;
    return true;
  }
  return false;
}

// Runs cuDNN's heuristics (find) and keeps the first usable algorithm, else `fallback` with its workspace (size).
template <class Perf, int kCount, class Find, class Size>
void choose(ConvSetup& c, std::uint64_t limit, int fallback, const std::string& what, Find find, Size size) {
  Perf perf[kCount];
  int found = 0;
  check(find(kCount, &found, perf), what);
  if (!pick(perf, found, limit, c)) {
    c.algo = fallback;
    check(size(&c.workspace), what);
  }
  check(cudnnSetConvolutionMathType(c.conv, c.math), what);
}

// x: the convolution's input, y: its output, wd: the filter's dims; dt: the dtype of all three (float32 compute).
void setup_conv(ExecState& s, const Op& op, const TensorDesc& x, const TensorDesc& y, std::vector<std::int64_t> wd,
                const std::vector<std::int64_t>& xd, const std::vector<std::int64_t>& yd, ConvSetup::Dir dir, ConvSetup& c,
                std::uint64_t limit, analysis::DType dt) {
  const std::vector<std::int64_t> kernel(wd.begin() + 2, wd.end());
  const DnnWindow w = window_of(op, kernel, xd, yd);
  if (w.asymmetric) unsupported(op, "asymmetric padding (cuDNN pads both ends alike)");
  wd = dnn_dims(std::move(wd));
  std::vector<int> filter_dims;
  for (std::int64_t d : wd) filter_dims.push_back(as_int(d, op));
  check(cudnnCreateFilterDescriptor(&c.filter), "cudnnCreateFilterDescriptor");
  check(cudnnSetFilterNdDescriptor(c.filter, dnn_data_type(dt, op), CUDNN_TENSOR_NCHW, static_cast<int>(filter_dims.size()),
                                   filter_dims.data()),
        "filter of '" + op.name + "'");
  check(cudnnCreateConvolutionDescriptor(&c.conv), "cudnnCreateConvolutionDescriptor");
  check(cudnnSetConvolutionNdDescriptor(c.conv, w.spatial, w.pad.data(), w.stride.data(), w.dil.data(), CUDNN_CROSS_CORRELATION,
                                        CUDNN_DATA_FLOAT),
        "convolution of '" + op.name + "'");
  check(cudnnSetConvolutionGroupCount(c.conv, as_int(op.attr_int("group", 1), op)), "group count");
  c.half = is_half(dt);
  c.math = c.half ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;  // float32: no TF32; 16-bit: tensor cores
  check(cudnnSetConvolutionMathType(c.conv, c.math), "math type");
  const std::string what = "algorithm choice for '" + op.name + "'";
  cudnnHandle_t h = s.ctx.cudnn();
  if (dir == ConvSetup::Dir::forward)
    choose<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT>(
        c, limit, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, what,
        [&](int n, int* found, auto* perf) {
          return cudnnGetConvolutionForwardAlgorithm_v7(h, x.d, c.filter, c.conv, y.d, n, found, perf);
        },
        [&](std::size_t* ws) {
          return cudnnGetConvolutionForwardWorkspaceSize(h, x.d, c.filter, c.conv, y.d,
                                                         static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), ws);
        });
  else if (dir == ConvSetup::Dir::data)
    choose<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT>(
        c, limit, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, what,
        [&](int n, int* found, auto* perf) {
          return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, c.filter, y.d, c.conv, x.d, n, found, perf);
        },
        [&](std::size_t* ws) {
          return cudnnGetConvolutionBackwardDataWorkspaceSize(h, c.filter, y.d, c.conv, x.d,
                                                              static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo), ws);
        });
  else
    choose<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT>(
        c, limit, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, what,
        [&](int n, int* found, auto* perf) {
          return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, x.d, y.d, c.conv, c.filter, n, found, perf);
        },
        [&](std::size_t* ws) {
          return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, x.d, y.d, c.conv, c.filter,
                                                                static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo), ws);
        });
}

// The tensors of a Conv (forward) or ConvGrad* op in the forward's terms: x, y and the filter dims.
struct ConvTensors {
  TensorId x, y, filter;  // filter: the weight (forward, ConvGradInput) or the weight gradient
  ConvSetup::Dir dir;
};

// ConvTranspose is the input gradient of the convolution from its Y to its X (analysis/conv_geometry.hpp).
ConvTensors conv_tensors(const Op& op) {
  if (op.type == "ConvGradInput" || op.type == "ConvTranspose") return {op.outputs[0], op.inputs[0], op.inputs[1], ConvSetup::Dir::data};
  if (op.type == "ConvGradWeight") return {op.inputs[1], op.inputs[0], op.outputs[0], ConvSetup::Dir::filter};
  return {op.inputs[0], op.outputs[0], op.inputs[1], ConvSetup::Dir::forward};
}

bool is_conv(const Op& op) {
  return (op.domain.empty() && (op.type == "Conv" || op.type == "ConvTranspose")) ||
         (op.domain == "memplan" && (op.type == "ConvGradInput" || op.type == "ConvGradWeight"));
}

constexpr std::uint64_t kWorkspaceLimit = 256ull << 20;

// A convolution's descriptors and algorithm, chosen once per op for the workspace it may use: cuDNN's
// heuristics query costs about as much as a small convolution.
struct PreparedConv {
  ConvTensors t;
  TensorDesc x, y;
  ConvSetup c;
  PreparedConv(ExecState& s, const Op& op, std::uint64_t limit)
      : t(conv_tensors(op)), x(s.dims(t.x), op, s.tensor(t.x).dtype), y(s.dims(t.y), op, s.tensor(t.x).dtype) {
    setup_conv(s, op, x, y, s.dims(t.filter), s.dims(t.x), s.dims(t.y), t.dir, c, limit, s.tensor(t.x).dtype);
    if (c.workspace > limit)
      fail(ErrorKind::runtime, "op '" + op.name + "': every cuDNN algorithm needs more workspace than the " + std::to_string(limit) +
                                   " bytes planned for it");
  }
};

// Y += bias[c] (input 2, when present) over the output `out` of a Conv or ConvTranspose described by y.
void add_bias(ExecState& s, const Op& op, TensorId out, const TensorDesc& y, bool half) {
  if (op.input(2) == kNoTensor) return;
  const auto yd = s.dims(out);
  if (!half) {  // the bias as [1, C, 1, ...] of y's rank
    std::vector<std::int64_t> bd(yd.size(), 1);
    bd.at(1) = yd[1];
    TensorDesc bias(bd, op);
    const float one = 1.0f;
    check(cudnnAddTensor(s.ctx.cudnn(), &one, bias.d, s.ptr[op.input(2)], &one, y.d, s.ptr[out]), "bias of '" + op.name + "'");
  } else {  // 16-bit: y += bias[c] by a generated kernel (it reads element i first)
    analysis::FusedExpr e;
    e.num_inputs = 2;
    e.add({analysis::ElemOp::input, 0, 0, 0, 0});
    e.add({analysis::ElemOp::input, 1, 0, 0, 0});
    e.add({analysis::ElemOp::add, 0, 1, 0, 0});
    std::vector<std::int64_t> bd(yd.size(), 1);
    bd.at(1) = yd[1];
    FusedSignature sig = make_signature(e, {yd, bd}, yd);
    sig.operand_dtypes = {s.tensor(out).dtype, s.tensor(op.input(2)).dtype};
    sig.out_dtype = s.tensor(out).dtype;
    s.fused.launch(sig, std::vector<const void*>{s.ptr[out], s.ptr[op.input(2)]}, s.ptr[out], s.ctx.stream());
  }
}

void run_conv(ExecState& s, const Op& op) {
  const OpId id = s.id_of(op);
  auto& slot = s.prepared[id];
  if (!slot) slot = std::make_shared<PreparedConv>(s, op, s.scratch_bytes[id]);
  auto& p = *static_cast<PreparedConv*>(slot.get());
  const ConvTensors& t = p.t;
  const TensorDesc &x = p.x, &y = p.y;
  const ConvSetup& c = p.c;
  std::byte* workspace = s.scratch[id];
  const float one = 1.0f, zero = 0.0f;
  const std::string what = op.type + " '" + op.name + "'";
  if (t.dir == ConvSetup::Dir::data) {
    check(cudnnConvolutionBackwardData(s.ctx.cudnn(), &one, c.filter, s.ptr[t.filter], y.d, s.ptr[t.y], c.conv,
                                       static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo), workspace, c.workspace, &zero, x.d,
                                       s.ptr[t.x]),
          what);
    if (op.type == "ConvTranspose") add_bias(s, op, t.x, x, c.half);
    return;
  }
  if (t.dir == ConvSetup::Dir::filter) {
    check(cudnnConvolutionBackwardFilter(s.ctx.cudnn(), &one, x.d, s.ptr[t.x], y.d, s.ptr[t.y], c.conv,
                                         static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo), workspace, c.workspace, &zero,
                                         c.filter, s.ptr[t.filter]),
          what);
    return;
  }
  check(cudnnConvolutionForward(s.ctx.cudnn(), &one, x.d, s.ptr[t.x], c.filter, s.ptr[t.filter], c.conv,
                                static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), workspace, c.workspace, &zero, y.d, s.ptr[t.y]),
        what);
  add_bias(s, op, t.y, y, c.half);
}

void run_batchnorm(ExecState& s, const Op& op) {
  for (std::size_t i = 1; i < op.outputs.size(); ++i)
    if (op.outputs[i] != kNoTensor) fail(ErrorKind::unsupported, "op '" + op.name + "': training-mode BatchNormalization");
  const auto d = s.dims(op.inputs[0]);
  std::vector<std::int64_t> bd(d.size(), 1);  // [1, C, 1, ...] of x's rank
  bd.at(1) = d.at(1);
  TensorDesc x(d, op), bn(bd, op);
  const float one = 1.0f, zero = 0.0f;
  check(cudnnBatchNormalizationForwardInference(
            s.ctx.cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, x.d, s.ptr[op.inputs[0]], x.d, s.ptr[op.outputs[0]], bn.d,
            s.ptr[op.inputs[1]], s.ptr[op.inputs[2]], s.ptr[op.inputs[3]], s.ptr[op.inputs[4]],
            std::max(op.attr_float("epsilon", 1e-5), CUDNN_BN_MIN_EPSILON)),
        "BatchNormalization '" + op.name + "'");
}
#endif

}  // namespace

std::uint64_t op_workspace_bytes(ExecState& s, OpId id) {
#ifdef MEMPLAN_HAVE_CUDNN
  const Op& op = s.g.ops[id];
  if (!is_conv(op)) return 0;
  const ConvTensors t = conv_tensors(op);
  const auto xd = s.dims(t.x), yd = s.dims(t.y);
  const analysis::DType dt = s.tensor(t.x).dtype;
  TensorDesc x(xd, op, dt), y(yd, op, dt);
  ConvSetup c;
  setup_conv(s, op, x, y, s.dims(t.filter), xd, yd, t.dir, c, kWorkspaceLimit, dt);
  return c.workspace;
#else
  (void)s;
  (void)id;
  return 0;
#endif
}

bool run_dnn_grad_op(ExecState& s, const Op& op) {
#ifdef MEMPLAN_HAVE_CUDNN
  if (is_conv(op)) return run_conv(s, op), true;
#else
  (void)s;
  (void)op;
#endif
  return false;
}

bool run_dnn_op(ExecState& s, const Op& op) {
  if (op.type == "MatMul") return run_matmul(s, op), true;
  if (op.type == "Gemm") return run_gemm(s, op), true;
#ifdef MEMPLAN_HAVE_CUDNN
  if (op.type == "Conv" || op.type == "ConvTranspose") return run_conv(s, op), true;
  if (op.type == "MaxPool") return run_pool(s, op, true), true;
  if (op.type == "AveragePool") return run_pool(s, op, false), true;
  if (op.type == "BatchNormalization") return run_batchnorm(s, op), true;
#endif
  return false;
}

}  // namespace memplan::runtime::cuda
