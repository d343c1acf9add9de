// Eager-framework peak: per-step live buffer bytes plus gradients accumulated so far, by a difference array.
#include "planner/pytorch/eager_model.hpp"

#include <algorithm>
#include <vector>

#include "analysis/ops.hpp"
#include "planner/pytorch/cuda_reduce.hpp"
#include "planner/pytorch/cudnn_conv.hpp"
#include "planner/pytorch/eager_views.hpp"

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

// x's last use before step b other than by `grad` (views of x included); 0 when x is not in the arena.
std::uint32_t last_use_before(const analysis::Graph& g, const Plan& plan, const std::vector<std::uint32_t>& step_of,
                              analysis::TensorId x, analysis::OpId grad, std::uint32_t b) {
  std::uint32_t last = 0;
  if (plan.tensor_buffer.size() <= x || plan.tensor_buffer[x] == UINT32_MAX) return last;
  for (analysis::TensorId t : plan.buffers[plan.tensor_buffer[x]].tensors) {
    if (g.tensors[t].producer != analysis::kNoOp && step_of[g.tensors[t].producer] >= b) continue;
    for (analysis::OpId c : g.tensors[t].consumers)
      if (c != grad && step_of[c] < b) last = std::max(last, step_of[c]);
  }
  return last;
}

// One F.cross_entropy as PyTorch runs it beside memplan's CrossEntropyLoss: its logits y (16-bit `src` under
// autocast), the forward's step f and the gradient's op and step b.
struct CrossEntropyAt {
  analysis::TensorId y, src;
  analysis::OpId grad;
  std::uint32_t f, b;
  std::uint64_t logits, y_bytes;  // fp32 log-probabilities' bytes; the plan's logits' bytes
  bool upcast;                    // 16-bit logits
};

// The backward at b: nll_loss_backward's logits-sized gradient, and the logits freed or held as PyTorch does.
void cross_entropy_backward_eager(const analysis::Graph& g, const Plan& plan, const std::vector<std::uint32_t>& step_of,
                                  const CrossEntropyAt& c, bool hold_outputs, Steps& add, Steps& remove) {
  const analysis::TensorId dy = g.ops[c.grad].output(0);
  const auto& yt = g.tensors[c.y];
  const bool y_in_arena = plan.tensor_buffer.size() > c.y && plan.tensor_buffer[c.y] != UINT32_MAX;
  const bool shared = y_in_arena && dy != analysis::kNoTensor && dy < plan.tensor_buffer.size() &&
                      plan.tensor_buffer[dy] == plan.tensor_buffer[c.y];
  if (c.src != c.y) {
    // The plan's fp32 y is not there; the plan's fp32 dy at b stands for nll_loss_backward's gradient (the
    // 16-bit logits' gradient comes after it is freed); the 16-bit logits stay until b.
    if (y_in_arena) release(add, remove, step_of[yt.producer], shared ? c.b - 1 : c.b, c.y_bytes);
    if (!hold_outputs) hold_until(g, plan, step_of, c.src, c.b, c.grad, add, remove);  // held: see held_outputs
    return;
  }
  // nll_loss_backward's zeroed logits-sized gradient. With 16-bit logits the logits' gradient (the plan's dy,
  // made at b) comes after it is freed: its bytes are in the plan at b already.
  hold(add, remove, c.b, c.b, c.upcast ? c.logits - std::min(c.logits, c.y_bytes) : c.logits);
  if (c.upcast || !y_in_arena) return;
  if (hold_outputs) {
    // The held logits and their gradient share one buffer in memplan's plan (the gradient written over them); in
    // PyTorch the gradient is an allocation of its own while the loop holds the logits.
    if (shared) hold(add, remove, c.b, plan.buffers[plan.tensor_buffer[c.y]].interval.last, c.y_bytes);
    return;
  }
  if (const std::uint32_t last = std::max(last_use_before(g, plan, step_of, c.y, c.grad, c.b), c.f); last < c.b)
    release(add, remove, last + 1, shared ? c.b - 1 : c.b, c.y_bytes);
}

void cross_entropy_eager(const analysis::Graph& g, const Plan& plan, const std::vector<std::uint32_t>& step_of,
                         analysis::OpId ce, bool hold_outputs, Steps& add, Steps& remove) {
  const auto& op = g.ops[ce];
  const analysis::TensorId y = op.inputs.at(0), lse = op.output(1);
  const auto& yt = g.tensors[y];
  if (!yt.shape_known() || yt.on_host || lse == analysis::kNoTensor) return;
  CrossEntropyAt c{y, y, analysis::kNoOp, step_of[ce], 0, 0, 0, false};
  for (analysis::OpId u : g.tensors[lse].consumers)
    if (g.ops[u].type == analysis::memplan_ops::kCrossEntropyLossGrad) c.grad = u;
  c.logits = align_up(checked_mul(yt.element_count(), 4, "eager peak"), plan.alignment);
  c.y_bytes = align_up(yt.bytes(), plan.alignment);
  // The logits as PyTorch holds them: the plan's fp32 Cast of 16-bit logits (the autocast pass puts losses on
  // the fp32 list) has no tensor of its own there.
  if (const analysis::TensorId cast_from = autocast_source(g, y); cast_from != analysis::kNoTensor) c.src = cast_from;
  c.upcast = g.tensors[c.src].dtype != analysis::DType::f32;
  if (c.upcast) hold(add, remove, c.f, c.f, align_up(g.tensors[c.src].bytes(), plan.alignment));  // log_softmax's temporary
  if (c.grad == analysis::kNoOp) return hold(add, remove, c.f, c.f, c.logits);  // log_softmax's output, no backward
  c.b = step_of[c.grad];
  hold(add, remove, c.f, c.b, c.logits);  // log_softmax's output, saved by LogSoftmaxBackward and NllLossBackward
  cross_entropy_backward_eager(g, plan, step_of, c, hold_outputs, add, remove);
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

// PyTorch's CUDA convolutions take, inside the op after its output, copies of operands not laid out as the kernel
// runs (held to the op's end) and the cuDNN workspace of the pass (cudnn_conv.hpp).
void convolution_allocations(const analysis::Graph& g, const Plan& plan, Steps& add, Steps& remove) {
  for (std::uint32_t s = 0; s < plan.schedule.size(); ++s) {
    const ConvOpAllocations a = pytorch_convolution_allocations(g, plan.schedule[s]);
    hold(add, remove, s, s, checked_add(align_up(a.held, plan.alignment), align_up(a.workspace, plan.alignment), "eager peak"));
  }
}

// PyTorch's losses at their steps: F.cross_entropy (cross_entropy_eager) and mse_loss (see the header).
void losses_eager(const analysis::Graph& g, const Plan& plan, const std::vector<std::uint32_t>& step_of, bool hold_outputs,
                  Steps& add, Steps& remove) {
  const std::size_t steps = plan.schedule.size();
  for (std::uint32_t s = 0; s < steps; ++s) {
    const auto& op = g.ops[plan.schedule[s]];
    if (op.type == analysis::memplan_ops::kCrossEntropyLoss && op.phase == analysis::Phase::forward)
      cross_entropy_eager(g, plan, step_of, plan.schedule[s], hold_outputs, add, remove);
    if (op.type != analysis::memplan_ops::kMSELoss || op.inputs.empty()) continue;
    const auto& y = g.tensors[op.inputs[0]];
    if (!y.shape_known() || y.on_host) continue;
    const std::uint64_t bytes = align_up(y.bytes(), plan.alignment);
    hold(add, remove, s, s, bytes);                            // the mean's temporary
    if (const analysis::TensorId src = autocast_source(g, op.inputs[0]); src != analysis::kNoTensor && !hold_outputs) {
      std::uint32_t grad_step = s;  // the 16-bit output is kept until the loss's gradient has read its fp32 copy
      for (analysis::OpId c : y.consumers) grad_step = std::max(grad_step, step_of[c]);
      hold_until(g, plan, step_of, src, grad_step, analysis::kNoOp, add, remove);
    }
    hold(add, remove, s, static_cast<std::uint32_t>(steps - 1), bytes);  // the loss's storage, held to the end
  }
}

// optimizer.step(): its temporaries live while it runs, at the first update's step (gradients still held).
void optimizer_step_eager(const analysis::Graph& g, const Plan& plan, const std::vector<std::uint32_t>& step_of,
                          analysis::OptimizerImpl impl, Steps& add, Steps& remove) {
  std::vector<analysis::OpId> updates;
  for (std::uint32_t s = 0; s < plan.schedule.size(); ++s)
    if (g.ops[plan.schedule[s]].phase == analysis::Phase::optimizer) updates.push_back(plan.schedule[s]);
  if (updates.empty()) return;
  const auto s = step_of[updates.front()];
  hold(add, remove, s, s, optimizer_step_temporaries(g, updates, impl, plan.alignment));
}

// Weight gradients outside the arena held from their producer to the end of the step; returns the bytes resident for
// the whole step (weights, inputs, optimizer state, accumulated gradients). An in-place update (an optimizer's weight
// or state, an accumulated gradient) is its storage's bytes.
std::uint64_t resident_and_gradients(const analysis::Graph& g, const Plan& plan, const std::vector<std::uint32_t>& step_of,
                                     Steps& add, Steps& remove) {
  using analysis::TensorRole;
  const auto last = static_cast<std::uint32_t>(plan.schedule.size() - 1);
  std::uint64_t resident = 0;
  for (analysis::TensorId id = 0; id < g.tensors.size(); ++id) {
    const auto& t = g.tensors[id];
    if (!t.shape_known() || t.on_host || analysis::rewritten_source(g, id) != analysis::kNoTensor) continue;
    const bool produced = t.producer != analysis::kNoOp;
    if (t.role == TensorRole::gradient && produced) {
      if (plan.tensor_offset.size() > 0 && plan.tensor_offset[id] != kNotInArena) continue;  // counted with the buffers
      hold(add, remove, step_of[t.producer], last, align_up(t.bytes(), plan.alignment));
      continue;
    }
    const bool resident_role = ((t.role == TensorRole::weight || t.role == TensorRole::optimizer_state) && !produced) ||
                               t.role == TensorRole::input || t.role == TensorRole::gradient;
    if (resident_role) resident = checked_add(resident, t.bytes(), "eager peak");
  }
  return resident;
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
  EagerPeak out;
  const std::size_t steps = plan.schedule.size();
  std::vector<std::uint32_t> step_of(g.ops.size(), 0);
  for (std::uint32_t s = 0; s < steps; ++s) step_of[plan.schedule[s]] = s;
  Steps add(steps + 1, 0), remove(steps + 1, 0);
  for (const auto& b : plan.buffers) hold(add, remove, b.interval.first, b.interval.last, b.size);
  for (const UnallocatedSpan& u : pytorch_unallocated_spans(g, plan))
    release(add, remove, u.first, u.last, plan.buffers[u.buffer].size);
  for (const HeldSource& h : pytorch_promoted_sources(g, plan))
    hold_until(g, plan, step_of, h.tensor, h.until, analysis::kNoOp, add, remove);
  losses_eager(g, plan, step_of, options.hold_outputs, add, remove);
  extend_autocast_cache(g, plan, step_of, add, remove);
  reduction_staging(g, plan, add, remove);
  convolution_allocations(g, plan, add, remove);
  if (options.hold_outputs) held_outputs(g, plan, step_of, add, remove);
  optimizer_step_eager(g, plan, step_of, options.optimizer_impl, add, remove);
  out.resident_bytes = resident_and_gradients(g, plan, step_of, add, remove);
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
