// The CUDA executor's training ops (domain memplan): elementwise gradients and optimizer steps through the NVRTC
// generator, matmul gradients through cuBLAS, reductions, norm/softmax gradients, loss, Adam and fp16 loss scaling. Semantics follow the
// CPU kernels (runtime_allocator/kernels_grad_*.cpp), including their float32 formulas.
#include <cmath>
#include <limits>

#include "runtime_allocator/cuda/cuda_state.hpp"
#include "runtime_allocator/cuda/kernels.hpp"
#include "runtime_allocator/cuda/kernels_training.hpp"

namespace memplan::runtime::cuda {

using analysis::kNoTensor;
using analysis::Op;
using analysis::TensorId;

namespace {

constexpr float kPi = 3.14159265358979323846f;

std::string lit(double v) { return float_literal(v); }

// Operands of one generated elementwise kernel: each present input becomes x<k>; an absent one a literal. Operands and
// the result load and store in their dtype (float32, bf16 or f16; bool operands as 0 or 1), the arithmetic is float32.
class Elementwise {
 public:
  Elementwise(ExecState& s, const Op& op) : s_(s), op_(op) {}
  std::string in(std::size_t pos, const std::string& absent = "0.0f") {
    const TensorId t = op_.input(pos);
    if (t == kNoTensor) return absent;
    const analysis::DType d = s_.tensor(t).dtype;
    if (!fused_storage_dtype(d) && d != analysis::DType::boolean)
      unsupported(op_, std::string("input ") + std::to_string(pos) + " of dtype " + analysis::dtype_name(d) +
                           " (float32, bfloat16, float16 or bool operands)");
    dims_.push_back(s_.dims(t));
    ptrs_.push_back(s_.ptr[t]);
    dtypes_.push_back(d);
    return "x" + std::to_string(ptrs_.size() - 1);
  }
  void launch(const std::string& expr) { launch_body("return " + expr + ";"); }
  // Statements ending in `return`; operand 0 may be read as if it had `dims0` (a broadcast source of another rank).
  void launch_body(const std::string& body, const std::vector<std::int64_t>& dims0 = {}) {
    if (!dims0.empty()) dims_[0] = dims0;
    const TensorId y = op_.outputs[0];
    FusedSignature sig = make_body_signature(body, dims_, s_.dims(y));
    sig.operand_dtypes = dtypes_;
    sig.out_dtype = s_.tensor(y).dtype;
    s_.fused.launch(sig, ptrs_, s_.ptr[y], s_.ctx.stream());
  }

 private:
  ExecState& s_;
  const Op& op_;
  std::vector<std::vector<std::int64_t>> dims_;
  std::vector<const void*> ptrs_;
  std::vector<analysis::DType> dtypes_;
};

float attr(const Op& op, const char* key, double fallback) { return static_cast<float>(op.attr_float(key, fallback)); }

// The elementwise gradients and one-output optimizer steps; false when `op` is none of them.
bool run_elementwise_grad(ExecState& s, const Op& op) {
  const std::string& t = op.type;
  Elementwise e(s, op);
  if (t == "ReluGrad" || t == "LeakyReluGrad") {
    const std::string g = e.in(0), x = e.in(1);
    const std::string neg = t == "ReluGrad" ? "0.0f" : lit(attr(op, "alpha", 0.01)) + " * " + g;
    e.launch(x + " > 0.0f ? " + g + " : " + neg);
  } else if (t == "SigmoidGrad") {
    const std::string g = e.in(0), y = e.in(1);
    e.launch(g + " * " + y + " * (1.0f - " + y + ")");
  } else if (t == "TanhGrad") {
    const std::string g = e.in(0), y = e.in(1);
    e.launch(g + " * (1.0f - " + y + " * " + y + ")");
  } else if (t == "SqrtGrad") {
    const std::string g = e.in(0), y = e.in(1);
    e.launch(g + " / (2.0f * " + y + ")");
  } else if (t == "ErfGrad") {
    const std::string g = e.in(0), x = e.in(1);
    e.launch(g + " * " + lit(2.0f / std::sqrt(kPi)) + " * expf(-" + x + " * " + x + ")");
  } else if (t == "GeluGrad") {
    const std::string g = e.in(0), x = e.in(1);
    if (op.attr_string("approximate", "none") != "tanh") {
      e.launch(g + " * (0.5f * (1.0f + erff(" + x + " / " + lit(std::sqrt(2.0f)) + ")) + " + x + " * expf(-0.5f * " + x + " * " +
               x + ") / " + lit(std::sqrt(2.0f * kPi)) + ")");
    } else {
      const std::string c = lit(std::sqrt(2.0f / kPi)), k = "0.044715f";
      e.launch_body("const float t = tanhf(" + c + " * (" + x + " + " + k + " * " + x + " * " + x + " * " + x + ")); return " +
                    g + " * (0.5f * (1.0f + t) + 0.5f * " + x + " * (1.0f - t * t) * " + c + " * (1.0f + 3.0f * " + k + " * " +
                    x + " * " + x + "));");
    }
  } else if (t == "ClipGrad") {
    const std::string g = e.in(0), x = e.in(1);
    const std::string lo = e.in(2, lit(op.attr_float("min", -std::numeric_limits<double>::infinity())));
    const std::string hi = e.in(3, lit(op.attr_float("max", std::numeric_limits<double>::infinity())));
    e.launch(lo + " <= " + x + " && " + x + " <= " + hi + " ? " + g + " : 0.0f");
  } else if (t == "DropoutGrad") {
    const std::string g = e.in(0), mask = e.in(1), ratio = e.in(2, "0.5f");
    e.launch(g + " * " + mask + " / (1.0f - " + ratio + ")");
  } else if (t == "DivGradB") {
    const std::string g = e.in(0), a = e.in(1), b = e.in(2);
    e.launch("-" + g + " * " + a + " / (" + b + " * " + b + ")");
  } else if (t == "PowGradBase") {
    const std::string g = e.in(0), b = e.in(1), p = e.in(2);
    e.launch(g + " * " + p + " * powf(" + b + ", " + p + " - 1.0f)");
  } else if (t == "PowGradExponent") {
    const std::string g = e.in(0), b = e.in(1), p = e.in(2);
    e.launch(b + " == 0.0f ? 0.0f : " + g + " * " + p + " * logf(" + b + ")");
  } else if (t == "WhereGrad") {
    const std::string g = e.in(0), c = e.in(1);
    e.launch("(" + c + " != 0.0f) == " + (op.attr_int("select", 1) ? "true" : "false") + " ? " + g + " : 0.0f");
  } else if (t == "MSELossGrad") {  // times dloss (input 2: the loss scale under fp16 loss scaling)
    const std::string y = e.in(0), target = e.in(1), dloss = e.in(2, "1.0f");
    e.launch("2.0f * (" + y + " - " + target + ") / " + lit(static_cast<double>(s.tensor(op.inputs[0]).element_count())) + " * " +
             dloss);
  } else if (t == "SGDUpdate") {  // in place over w: torch.optim.SGD without momentum, L2 weight decay; kept on found_inf
    const std::string w = e.in(0), g = e.in(1), found = e.in(2);
    e.launch(found + " != 0.0f ? " + w + " : " + w + " - " + lit(attr(op, "lr", 0.01)) + " * (" + g + " + " +
             lit(attr(op, "weight_decay", 0.0)) + " * " + w + ")");
  } else if (t == "GradAccumulate") {  // in place over the accumulator
    const std::string acc = e.in(0), g = e.in(1);
    e.launch(acc + " + " + g);
  } else if (t == "AdamStep") {  // not counted when found_inf skips the step
    const std::string step = e.in(0), found = e.in(1);
    e.launch(step + " + (" + found + " != 0.0f ? 0.0f : 1.0f)");
  } else {
    return false;
  }
  return true;
}

// BroadcastTo: dY (the reduced tensor, its reduced axes dropped when keepdims=0) spread over X's shape, scaled.
void run_broadcast_to(ExecState& s, const Op& op) {
  std::vector<std::int64_t> shape = s.dims(op.inputs[0]);
  const auto out = s.dims(op.outputs[0]);
  if (op.attr_int("keepdims", 1) == 0) {
    std::vector<bool> reduced(out.size(), false);
    for (auto a : op.attr_ints("axes")) reduced[norm_axis(a, out.size(), op)] = true;
    const auto in = shape;
    shape.clear();
    std::size_t next = 0;
    for (std::size_t k = 0; k < out.size(); ++k) shape.push_back(reduced[k] ? 1 : in.at(next++));
  }
  Elementwise e(s, op);
  const std::string x = e.in(0);
  e.launch_body("return " + x + " * " + lit(attr(op, "scale", 1.0)) + ";", shape);
}

// ReduceSumTo: dY summed down to the shape of the operand it was broadcast from (numpy rules), scaled.
void run_reduce_sum_to(ExecState& s, const Op& op) {
  const auto g = s.dims(op.inputs[0]), o = s.dims(op.outputs[0]);
  std::vector<bool> reduced(g.size(), true);
  for (std::size_t k = 0; k < g.size(); ++k) {
    const std::size_t lead = g.size() - o.size();
    reduced[k] = k < lead || o[k - lead] != g[k];
  }
  reduce_axes(s, op, op.inputs[0], op.outputs[0], reduced, ReduceSpec::sum, attr(op, "scale", 1.0));
}

void run_conv_grad_bias(ExecState& s, const Op& op) {
  std::vector<bool> reduced(s.dims(op.inputs[0]).size(), true);
  reduced.at(1) = false;
  reduce_axes(s, op, op.inputs[0], op.outputs[0], reduced, ReduceSpec::sum, 1.0f);
}

void run_mse_loss(ExecState& s, const Op& op) {
  mse_loss(s.f32(op.inputs[0]), s.f32(op.inputs[1]), s.f32(op.outputs[0]),
           static_cast<std::int64_t>(s.tensor(op.inputs[0]).element_count()), s.ctx.stream());
}

// found_inf (the last input under fp16 loss scaling, else absent): a float32 scalar that skips the step when set.
const float* found_inf(ExecState& s, const Op& op, std::size_t i) {
  const TensorId t = op.input(i);
  if (t == kNoTensor) return nullptr;
  if (s.tensor(t).dtype != analysis::DType::f32 || s.tensor(t).element_count() != 1)
    unsupported(op, "input " + std::to_string(i) + " (found_inf) must be a float32 scalar");
  return s.f32(t);
}

void run_optimizer(ExecState& s, const Op& op) {
  const auto n = static_cast<std::int64_t>(s.tensor(op.inputs[0]).element_count());
  if (op.type == "AdamUpdate") {
    const AdamHyper h{attr(op, "lr", 0.001), attr(op, "beta1", 0.9), attr(op, "beta2", 0.999), attr(op, "epsilon", 1e-8),
                      attr(op, "weight_decay", 0.0), op.attr_int("decoupled", 0) != 0};
    adam_update(s.f32(op.inputs[0]), s.f32(op.inputs[1]), s.f32(op.inputs[2]), s.f32(op.inputs[3]), s.f32(op.inputs[4]),
                s.f32(op.outputs[0]), s.f32(op.outputs[1]), s.f32(op.outputs[2]), found_inf(s, op, 5), n, h, s.ctx.stream());
  } else {
    momentum_update(s.f32(op.inputs[0]), s.f32(op.inputs[1]), s.f32(op.inputs[2]), s.f32(op.outputs[0]), s.f32(op.outputs[1]),
                    found_inf(s, op, 3), n, attr(op, "lr", 0.01), attr(op, "momentum", 0.9), attr(op, "weight_decay", 0.0),
                    s.ctx.stream());
  }
}

// AmpUnscale: found_inf' starts as found_inf (or 0 with `reset`) in the output's bytes, then the kernel sets it where a
// gradient element is not finite; the gradient is multiplied by 1 / scale, in place or into its own output.
void run_amp_unscale(ExecState& s, const Op& op) {
  const TensorId found_out = op.outputs.at(1);
  if (op.attr_int("reset", 0) != 0)
    check(cudaMemsetAsync(s.ptr[found_out], 0, sizeof(float), s.ctx.stream()), "found_inf reset of '" + op.name + "'");
  else if (s.ptr[op.inputs.at(2)] != s.ptr[found_out])
    check(cudaMemcpyAsync(s.ptr[found_out], s.ptr[op.inputs[2]], sizeof(float), cudaMemcpyDeviceToDevice, s.ctx.stream()),
          "found_inf copy of '" + op.name + "'");
  amp_unscale(s.f32(op.inputs[0]), s.f32(op.inputs.at(1)), s.f32(op.outputs[0]), s.f32(found_out),
              static_cast<std::int64_t>(s.tensor(op.inputs[0]).element_count()), s.ctx.stream());
}

void run_amp_update_scale(ExecState& s, const Op& op) {
  amp_update_scale(s.f32(op.inputs.at(0)), reinterpret_cast<const std::int32_t*>(s.ptr[op.inputs.at(1)]), s.f32(op.inputs.at(2)),
                   s.f32(op.outputs.at(0)), reinterpret_cast<std::int32_t*>(s.ptr[op.outputs.at(1)]), attr(op, "growth_factor", 2.0),
                   attr(op, "backoff_factor", 0.5), static_cast<std::int32_t>(op.attr_int("growth_interval", 2000)), s.ctx.stream());
}

float* optional_out(ExecState& s, const Op& op, std::size_t k) {
  return op.output(k) == kNoTensor ? nullptr : s.f32(op.output(k));
}

void run_layer_norm_grad(ExecState& s, const Op& op) {
  const auto x = s.dims(op.inputs[1]);
  const std::size_t axis = norm_axis(op.attr_int("axis", -1), x.size(), op);
  layer_norm_grad(s.f32(op.inputs[0]), s.f32(op.inputs[1]), s.f32(op.inputs[2]), s.f32(op.inputs[3]), s.f32(op.inputs[4]),
                  optional_out(s, op, 0), optional_out(s, op, 1), optional_out(s, op, 2), dims_product(x, 0, axis), dims_product(x, axis),
                  s.ctx.stream());
}

void run_softmax_grad(ExecState& s, const Op& op, bool log) {
  const auto y = s.dims(op.inputs[1]);
  const std::size_t axis = norm_axis(op.attr_int("axis", -1), y.size(), op);
  const bool coerce = op.attr_int("coerce_2d", 0) != 0;
  softmax_grad(s.f32(op.inputs[0]), s.f32(op.inputs[1]), s.f32(op.outputs[0]), dims_product(y, 0, axis),
               coerce ? dims_product(y, axis) : y[axis], coerce ? 1 : dims_product(y, axis + 1), log, s.ctx.stream());
}

// float32: dY scattered to the indices (atomics); bf16/f16: each dX element sums, in float32, the dY of the windows
// covering it whose index is its own, and is rounded once.
void run_max_pool_grad(ExecState& s, const Op& op) {
  if (s.tensor(op.inputs[2]).dtype != analysis::DType::i64)
    fail(ErrorKind::unsupported, "op '" + op.name + "': int64 indices only");
  const analysis::DType dt = s.tensor(op.inputs[0]).dtype;
  if (is_half(dt))
    return max_pool_grad_windows(s.ptr[op.inputs[0]], reinterpret_cast<const std::int64_t*>(s.ptr[op.inputs[2]]),
                                 s.ptr[op.outputs[0]], float_storage(op, dt), pool_window(s, op, op.outputs[0], op.inputs[0]),
                                 s.ctx.stream());
  max_pool_grad(s.f32(op.inputs[0]), reinterpret_cast<const std::int64_t*>(s.ptr[op.inputs[2]]), s.f32(op.outputs[0]),
                static_cast<std::int64_t>(s.tensor(op.inputs[0]).element_count()),
                static_cast<std::int64_t>(s.tensor(op.outputs[0]).element_count()), s.ctx.stream());
}

}  // namespace

bool run_training_op(ExecState& s, const Op& op) {
  if (op.domain != "memplan") return false;
  const std::string& t = op.type;
  if (run_layer_training_op(s, op) || run_elementwise_grad(s, op)) return true;
  if (t == "MatMulGradA" || t == "MatMulGradB") return run_matmul_grad(s, op, t == "MatMulGradA"), true;
  if (t == "ReduceSumTo") return run_reduce_sum_to(s, op), true;
  if (t == "BroadcastTo") return run_broadcast_to(s, op), true;
  if (t == "ConvGradBias") return run_conv_grad_bias(s, op), true;
  if (t == "MSELoss") return run_mse_loss(s, op), true;
  if (t == "AdamUpdate" || t == "MomentumUpdate") return run_optimizer(s, op), true;
  if (t == "LayerNormGrad") return run_layer_norm_grad(s, op), true;
  if (t == "SoftmaxGrad" || t == "LogSoftmaxGrad") return run_softmax_grad(s, op, t == "LogSoftmaxGrad"), true;
  if (t == "MaxPoolGrad") return run_max_pool_grad(s, op), true;
  if (t == "AmpUnscale") return run_amp_unscale(s, op), true;
  if (t == "AmpUpdateScale") return run_amp_update_scale(s, op), true;
  return run_dnn_grad_op(s, op);
}

}  // namespace memplan::runtime::cuda
