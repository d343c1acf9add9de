// Eager-framework peak: per-step live buffer bytes plus gradients accumulated so far, by a difference array.
#include "planner/pytorch/eager_model.hpp"

#include <algorithm>
#include <vector>

#include "analysis/ops.hpp"
#include "planner/pytorch/cuda_reduce.hpp"

namespace memplan::planner {

namespace {

using Steps = std::vector<std::uint64_t>;

// Adds `bytes` to the live count over steps [first, last].
void hold(Steps& add, Steps& remove, std::uint32_t first, std::uint32_t last, std::uint64_t bytes) {
  if (first > last || bytes == 0) return;
  add[first] = checked_add(add[first], bytes, "eager peak");
  remove[last + 1] = checked_add(remove[last + 1], bytes, "eager peak");
}
// Takes `bytes` off the live count over steps [first, last] (bytes the plan keeps that PyTorch has freed).
void release(Steps& add, Steps& remove, std::uint32_t first, std::uint32_t last, std::uint64_t bytes) {
  hold(remove, add, first, last, bytes);
}

// PyTorch's F.cross_entropy for one memplan CrossEntropyLoss at step `f` and its gradient at step `b`
// (see the header): fp32 log-probabilities held from f to b and the nll_loss gradient at b. fp32 logits are
// freed after their last forward use instead of being read at b (LogSoftmaxBackward saves its output alone).
// 16-bit logits (autocast) go to fp32 log-probabilities in one log_softmax(dtype=float) with a temporary of
// the logits' size and dtype at f, no fp32 copy; they stay until b (saved for the backward's dtype), and
// log_softmax_backward writes their gradient in their own dtype once the nll gradient is freed (measured on an
// H100, torch 2.11: bench/results/cnn_gpu_h100_2026-11-24/ce_probe.txt).
// The 16-bit tensor an fp32 Cast of the same elements made `y` from (the autocast pass's cast of a loss's
// input), else kNoTensor. PyTorch keeps such 16-bit logits until the loss's backward (measured:
// bench/results/cnn_gpu_h100_2026-11-24/ce_probe.txt; bench/results/recipes_h100_2026-11-23/peak_breakdown.md).
analysis::TensorId autocast_source(const analysis::Graph& g, analysis::TensorId y) {
  const auto& yt = g.tensors[y];
  const analysis::OpId p = yt.producer;
  if (p == analysis::kNoOp || !g.ops[p].domain.empty() || g.ops[p].type != "Cast" || yt.dtype != analysis::DType::f32 ||
      g.ops[p].inputs.empty())
    return analysis::kNoTensor;
  const analysis::TensorId in = g.ops[p].inputs[0];
  if (in == analysis::kNoTensor || analysis::dtype_bits(g.tensors[in].dtype) != 16 || g.tensors[in].on_host ||
      g.tensors[in].element_count() != yt.element_count())
    return analysis::kNoTensor;
  return in;
}

// Holds x's bytes from after its last use before step `until` (its buffer's tensors' uses, `except` left out) to `until`.
void hold_until(const analysis::Graph& g, const Plan& plan, const std::vector<std::uint32_t>& step_of, analysis::TensorId x,
                std::uint32_t until, analysis::OpId except, Steps& add, Steps& remove) {
  if (plan.tensor_buffer.size() <= x || plan.tensor_buffer[x] == UINT32_MAX) return;
  std::uint32_t last = 0;
  for (analysis::TensorId t : plan.buffers[plan.tensor_buffer[x]].tensors) {
    if (g.tensors[t].producer != analysis::kNoOp && step_of[g.tensors[t].producer] >= until) continue;
    if (g.tensors[t].producer != analysis::kNoOp) last = std::max(last, step_of[g.tensors[t].producer]);
    for (analysis::OpId c : g.tensors[t].consumers)
      if (c != except && step_of[c] < until) last = std::max(last, step_of[c]);
  }
  if (last < until) hold(add, remove, last + 1, until, align_up(g.tensors[x].bytes(), plan.alignment));
}

void cross_entropy_eager(const analysis::Graph& g, const Plan& plan, const std::vector<std::uint32_t>& step_of,
                         analysis::OpId ce, bool hold_outputs, Steps& add, Steps& remove) {
  const auto& op = g.ops[ce];
  const analysis::TensorId y = op.inputs.at(0), lse = op.output(1);
  const auto& yt = g.tensors[y];
  if (!yt.shape_known() || yt.on_host || lse == analysis::kNoTensor) return;
  analysis::OpId grad = analysis::kNoOp;
  for (analysis::OpId c : g.tensors[lse].consumers)
    if (g.ops[c].type == analysis::memplan_ops::kCrossEntropyLossGrad) grad = c;
  const std::uint32_t f = step_of[ce];
  const std::uint64_t logits = align_up(checked_mul(yt.element_count(), 4, "eager peak"), plan.alignment);
  const std::uint64_t y_bytes = align_up(yt.bytes(), plan.alignment);
  // The logits as PyTorch holds them: the plan's fp32 Cast of 16-bit logits (the autocast pass puts losses on
  // the fp32 list) has no tensor of its own there.
  const analysis::TensorId cast_from = autocast_source(g, y);
  const analysis::TensorId src = cast_from == analysis::kNoTensor ? y : cast_from;
  const std::uint64_t src_bytes = align_up(g.tensors[src].bytes(), plan.alignment);
  const bool upcast = g.tensors[src].dtype != analysis::DType::f32;
  if (upcast) hold(add, remove, f, f, src_bytes);  // log_softmax's temporary in the logits' dtype
  if (grad == analysis::kNoOp) return hold(add, remove, f, f, logits);  // log_softmax's output, no backward
  const std::uint32_t b = step_of[grad];
  hold(add, remove, f, b, logits);  // log_softmax's output, saved by LogSoftmaxBackward and NllLossBackward
  const analysis::TensorId dy = g.ops[grad].output(0);
  auto last_use_before_b = [&](analysis::TensorId x) {  // x's last use but the gradient (views of x included)
    std::uint32_t last = 0;
    if (plan.tensor_buffer.size() <= x || plan.tensor_buffer[x] == UINT32_MAX) return last;
    for (analysis::TensorId t : plan.buffers[plan.tensor_buffer[x]].tensors) {
      if (g.tensors[t].producer != analysis::kNoOp && step_of[g.tensors[t].producer] >= b) continue;
      for (analysis::OpId c : g.tensors[t].consumers)
        if (c != grad && step_of[c] < b) last = std::max(last, step_of[c]);
    }
    return last;
  };
  const bool y_in_arena = plan.tensor_buffer.size() > y && plan.tensor_buffer[y] != UINT32_MAX;
  const bool shared = y_in_arena && dy != analysis::kNoTensor && dy < plan.tensor_buffer.size() &&
                      plan.tensor_buffer[dy] == plan.tensor_buffer[y];
  if (src != y) {
    // The plan's fp32 y is not there; the plan's fp32 dy at b stands for nll_loss_backward's gradient (the
    // 16-bit logits' gradient comes after it is freed); the 16-bit logits stay until b.
    if (y_in_arena) release(add, remove, step_of[yt.producer], shared ? b - 1 : b, y_bytes);
    return hold_outputs ? void() : hold_until(g, plan, step_of, src, b, grad, add, remove);  // held: see held_outputs
  }
  // nll_loss_backward's zeroed logits-sized gradient. With 16-bit logits the logits' gradient (the plan's dy,
  // made at b) comes after it is freed: its bytes are in the plan at b already.
  hold(add, remove, b, b, upcast ? logits - std::min(logits, y_bytes) : logits);
  if (upcast || !y_in_arena) return;
  if (hold_outputs) {
    // The held logits and their gradient share one buffer in memplan's plan (the gradient written over them); in
    // PyTorch the gradient is an allocation of its own while the loop holds the logits.
    if (shared) hold(add, remove, b, plan.buffers[plan.tensor_buffer[y]].interval.last, y_bytes);
    return;
  }
  if (const std::uint32_t last = std::max(last_use_before_b(y), f); last < b) release(add, remove, last + 1, shared ? b - 1 : b, y_bytes);
}

// The training loop holds the model's output (`out = model(x); loss = loss_fn(out, y)`): the prediction a loss reads
// (its 16-bit original under autocast) lives from its last use to the end of the step, and the previous step's
// until the forward has made the new one (the loop rebinds `out` then).
void held_outputs(const analysis::Graph& g, const Plan& plan, const std::vector<std::uint32_t>& step_of, Steps& add,
                  Steps& remove) {
  const auto last = static_cast<std::uint32_t>(plan.schedule.size() - 1);
  for (std::uint32_t s = 0; s <= last; ++s) {
    const auto& op = g.ops[plan.schedule[s]];
    if (op.phase != analysis::Phase::forward || op.inputs.empty()) continue;
    if (op.type != analysis::memplan_ops::kCrossEntropyLoss && op.type != analysis::memplan_ops::kMSELoss) continue;
    const analysis::TensorId cast_from = autocast_source(g, op.inputs[0]);
    const analysis::TensorId out = cast_from == analysis::kNoTensor ? op.inputs[0] : cast_from;
    const auto& t = g.tensors[out];
    if (!t.shape_known() || t.on_host || t.producer == analysis::kNoOp) continue;
    hold_until(g, plan, step_of, out, last, analysis::kNoOp, add, remove);
    hold(add, remove, 0, step_of[t.producer], align_up(t.bytes(), plan.alignment));  // the previous step's
  }
}

// torch.autocast caches the low-precision copy of each weight (a Cast of an initializer in the forward pass)
// until the autocast region ends, the end of the forward pass (the loss included): the copy's storage lives
// to the later of that and its last use (a backward op that saved it).
void extend_autocast_cache(const analysis::Graph& g, const Plan& plan, const std::vector<std::uint32_t>& step_of, Steps& add,
                           Steps& remove) {
  std::uint32_t forward_end = 0;
  for (std::uint32_t s = 0; s < plan.schedule.size(); ++s)
    if (g.ops[plan.schedule[s]].phase == analysis::Phase::forward) forward_end = s;
  for (analysis::OpId o = 0; o < g.ops.size(); ++o) {
    const auto& op = g.ops[o];
    if (op.type != "Cast" || op.phase != analysis::Phase::forward || op.inputs.empty() || op.outputs.empty()) continue;
    const auto& w = g.tensors[op.inputs[0]];
    if (w.role != analysis::TensorRole::weight || w.producer != analysis::kNoOp) continue;
    const analysis::TensorId c = op.outputs[0];
    if (c >= plan.tensor_buffer.size() || plan.tensor_buffer[c] == UINT32_MAX) continue;
    const auto& b = plan.buffers[plan.tensor_buffer[c]];
    if (b.interval.last >= forward_end || step_of[o] > forward_end) continue;
    hold(add, remove, b.interval.last + 1, forward_end, b.size);
  }
}

// The dims a reduction op reduces: where the output keeps a 1 (keepdims), else its axes (attribute or constant
// input; none: all, unless noop_with_empty_axes). Empty when they cannot be told.
std::vector<bool> reduced_dims(const analysis::Graph& g, const analysis::Op& op) {
  const auto& x = g.tensors[op.inputs[0]];
  const auto in = x.shape();
  std::vector<bool> out(in.size(), false);
  if (op.outputs.empty() || !g.tensors[op.outputs[0]].shape_known()) return {};
  const auto y = g.tensors[op.outputs[0]].shape();
  if (op.type == analysis::memplan_ops::kReduceSumTo) {  // broadcasting's reverse: y right-aligned with x
    if (y.size() > in.size()) return {};
    const std::size_t lead = in.size() - y.size();
    for (std::size_t k = 0; k < in.size(); ++k) out[k] = k < lead || y[k - lead] != in[k];
    return out;
  }
  if (y.size() == in.size()) {
    for (std::size_t k = 0; k < in.size(); ++k) out[k] = y[k] != in[k];
    return out;
  }
  std::vector<std::int64_t> axes = op.attr_ints("axes");
  if (!op.attr("axes") && op.inputs.size() > 1 && op.inputs[1] != analysis::kNoTensor && g.tensors[op.inputs[1]].data)
    axes = g.tensors[op.inputs[1]].data->as_int64();
  if (axes.empty()) {
    if (op.attr_int("noop_with_empty_axes", 0) != 0) return {};
    return std::vector<bool>(in.size(), true);
  }
  const auto rank = static_cast<std::int64_t>(in.size());
  for (auto a : axes) {
    if (a < -rank || a >= rank) return {};
    out[static_cast<std::size_t>(a < 0 ? a + rank : a)] = true;
  }
  return out;
}

// PyTorch's CUDA reductions (sum, mean, amax, amin; a bias gradient and autograd's sum over broadcast dims, memplan's
// ReduceSumTo) take a
// staging buffer inside the op when each output's work is split across thread blocks (cuda_reduce.hpp).
void reduction_staging(const analysis::Graph& g, const Plan& plan, Steps& add, Steps& remove) {
  for (std::uint32_t s = 0; s < plan.schedule.size(); ++s) {
    const auto& op = g.ops[plan.schedule[s]];
    const bool onnx_reduce = op.domain.empty() && (op.type == "ReduceSum" || op.type == "ReduceMean" ||
                                                   op.type == "ReduceMax" || op.type == "ReduceMin");
    if (op.inputs.empty() || !(onnx_reduce || op.type == analysis::memplan_ops::kReduceSumTo)) continue;
    const auto& x = g.tensors[op.inputs[0]];
    if (!x.shape_known() || x.on_host || !analysis::dtype_is_float(x.dtype)) continue;
    const auto reduced = reduced_dims(g, op);
    if (reduced.empty()) continue;
    const std::uint64_t bytes = cuda_reduction_staging_bytes(x.shape(), reduced, analysis::dtype_bits(x.dtype) / 8);
    if (bytes) hold(add, remove, s, s, align_up(bytes, plan.alignment));
  }
}

}  // namespace

std::uint64_t optimizer_step_temporaries(const analysis::Graph& g, const std::vector<analysis::OpId>& order,
                                         analysis::OptimizerImpl impl, std::uint64_t alignment) {
  namespace ops = analysis::memplan_ops;
  using analysis::OptimizerImpl;
  if (impl == OptimizerImpl::fused) return 0;
  std::uint64_t all = 0, one = 0, previous_denom = 0;
  for (analysis::OpId o : order) {
    const analysis::Op& op = g.ops[o];
    const bool adam = op.type == ops::kAdamUpdate;
    if (!adam && op.type != ops::kSGDUpdate && op.type != ops::kMomentumUpdate) continue;
    const analysis::Tensor& w = g.tensors[op.inputs.at(0)];
    if (!w.shape_known()) continue;
    const std::uint64_t p = align_up(w.bytes(), alignment);
    const bool l2 = op.attr_float("weight_decay", 0.0) != 0.0 && !(adam && op.attr_int("decoupled", 0) != 0);
    if (impl == OptimizerImpl::foreach) {
      if (adam || l2) all = checked_add(all, p, "optimizer temporaries");
      continue;
    }
    std::uint64_t here = l2 ? p : 0;
    if (adam) here = checked_add(checked_add(here, 2 * p, "optimizer temporaries"), previous_denom, "optimizer temporaries");
    one = std::max(one, here);
    previous_denom = adam ? p : 0;
  }
  return impl == OptimizerImpl::foreach ? all : one;
}

EagerPeak eager_peak(const analysis::Graph& g, const Plan& plan, const EagerOptions& options) {
  using analysis::TensorRole;
  EagerPeak out;
  const std::size_t steps = plan.schedule.size();
  std::vector<std::uint32_t> step_of(g.ops.size(), 0);
  for (std::uint32_t s = 0; s < steps; ++s) step_of[plan.schedule[s]] = s;
  Steps add(steps + 1, 0), remove(steps + 1, 0);
  for (const auto& b : plan.buffers) hold(add, remove, b.interval.first, b.interval.last, b.size);
  for (std::uint32_t s = 0; s < steps; ++s) {  // PyTorch's mse_loss (see the header)
    const auto& op = g.ops[plan.schedule[s]];
    if (op.type == analysis::memplan_ops::kCrossEntropyLoss && op.phase == analysis::Phase::forward)
      cross_entropy_eager(g, plan, step_of, plan.schedule[s], options.hold_outputs, add, remove);
    if (op.type != analysis::memplan_ops::kMSELoss || op.inputs.empty()) continue;
    const auto& y = g.tensors[op.inputs[0]];
    if (!y.shape_known() || y.on_host) continue;
    const std::uint64_t bytes = align_up(y.bytes(), plan.alignment);
    hold(add, remove, s, s, bytes);                            // the mean's temporary
    if (const analysis::TensorId src = autocast_source(g, op.inputs[0]); src != analysis::kNoTensor && !options.hold_outputs) {
      std::uint32_t grad_step = s;  // the 16-bit output is kept until the loss's gradient has read its fp32 copy
      for (analysis::OpId c : y.consumers) grad_step = std::max(grad_step, step_of[c]);
      hold_until(g, plan, step_of, src, grad_step, analysis::kNoOp, add, remove);
    }
    hold(add, remove, s, static_cast<std::uint32_t>(steps - 1), bytes);  // the loss's storage, held to the end
  }
  extend_autocast_cache(g, plan, step_of, add, remove);
  reduction_staging(g, plan, add, remove);
  if (options.hold_outputs) held_outputs(g, plan, step_of, add, remove);
  // optimizer.step(): its temporaries live while it runs, at the first update's step (gradients still held).
  std::vector<analysis::OpId> updates;
  for (std::uint32_t s = 0; s < steps; ++s)
    if (g.ops[plan.schedule[s]].phase == analysis::Phase::optimizer) updates.push_back(plan.schedule[s]);
  if (!updates.empty()) {
    const auto s = step_of[updates.front()];
    const std::uint64_t temp = optimizer_step_temporaries(g, updates, options.optimizer_impl, plan.alignment);
    hold(add, remove, s, s, temp);
  }
  for (const auto& t : g.tensors) {
    if (!t.shape_known() || t.on_host) continue;
    // An in-place update (an optimizer's weight or state, an accumulated gradient) is its storage's bytes.
    if (analysis::rewritten_source(g, static_cast<analysis::TensorId>(&t - g.tensors.data())) != analysis::kNoTensor) continue;
    if (t.role == TensorRole::gradient && t.producer != analysis::kNoOp) {
      if (plan.tensor_offset.size() > 0 && plan.tensor_offset[static_cast<std::size_t>(&t - g.tensors.data())] != kNotInArena)
        continue;  // planned in the arena: already counted with the buffers
      const auto s = step_of[t.producer];
      hold(add, remove, s, static_cast<std::uint32_t>(steps - 1), align_up(t.bytes(), plan.alignment));  // held to the end
    } else if (t.role == TensorRole::weight || t.role == TensorRole::input ||
               t.role == TensorRole::optimizer_state || (t.role == TensorRole::gradient && t.producer == analysis::kNoOp)) {
      if (t.role == TensorRole::optimizer_state && t.producer != analysis::kNoOp) continue;  // updated copies
      if (t.role == TensorRole::weight && t.producer != analysis::kNoOp) continue;
      out.resident_bytes = checked_add(out.resident_bytes, t.bytes(), "eager peak");
    }
  }
  std::uint64_t live = 0, worst = 0;
  for (std::uint32_t s = 0; s < steps; ++s) {
    live = checked_add(live, add[s], "eager peak") - remove[s];  // added first: a release may start where its buffer does
    if (options.timeline) out.live.push_back(live);
    if (live > worst) {
      worst = live;
      out.peak_step = s;
    }
  }
  out.peak_bytes = checked_add(out.resident_bytes, worst, "eager peak");
  return out;
}

}  // namespace memplan::planner
