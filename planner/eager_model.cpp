// Eager-framework peak: per-step live buffer bytes plus gradients accumulated so far, by a difference array.
#include "planner/eager_model.hpp"

#include <algorithm>
#include <vector>

#include "analysis/ops.hpp"

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
// (see the header): log-probabilities held from f to b, the fp32 copy of non-fp32 logits at f, the
// nll_loss gradient and (non-fp32) the fp32 logits gradient at b, and the logits freed after their last
// forward use instead of being read at b.
void cross_entropy_eager(const analysis::Graph& g, const Plan& plan, const std::vector<std::uint32_t>& step_of,
                         analysis::OpId ce, Steps& add, Steps& remove) {
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
  const bool upcast = yt.dtype != analysis::DType::f32;
  if (upcast) hold(add, remove, f, f, logits);  // autocast's fp32 copy of the logits, input of log_softmax
  if (grad == analysis::kNoOp) return hold(add, remove, f, f, logits);  // log_softmax's output, no backward
  const std::uint32_t b = step_of[grad];
  hold(add, remove, f, b, logits);  // log_softmax's output, saved by LogSoftmaxBackward and NllLossBackward
  // nll_loss_backward's zeroed logits-sized gradient; with non-fp32 logits also log_softmax_backward's fp32
  // result, before ToCopyBackward makes the gradient in the logits' dtype (the plan's dy, not yet made).
  hold(add, remove, b, b, upcast ? 2 * logits - std::min(2 * logits, y_bytes) : logits);
  if (plan.tensor_buffer.size() <= y || plan.tensor_buffer[y] == UINT32_MAX) return;
  const std::uint32_t buffer = plan.tensor_buffer[y];
  std::uint32_t last_use = f;  // the logits' last use but the gradient (views of them included)
  for (analysis::TensorId t : plan.buffers[buffer].tensors) {
    if (g.tensors[t].producer != analysis::kNoOp && step_of[g.tensors[t].producer] >= b) continue;
    for (analysis::OpId c : g.tensors[t].consumers)
      if (c != grad) last_use = std::max(last_use, step_of[c]);
  }
  const analysis::TensorId dy = g.ops[grad].output(0);
  const bool shared = dy != analysis::kNoTensor && dy < plan.tensor_buffer.size() && plan.tensor_buffer[dy] == buffer;
  if (last_use < b) release(add, remove, last_use + 1, shared ? b - 1 : b, y_bytes);
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
      cross_entropy_eager(g, plan, step_of, plan.schedule[s], add, remove);
    if (op.type != analysis::memplan_ops::kMSELoss || op.inputs.empty()) continue;
    const auto& y = g.tensors[op.inputs[0]];
    if (!y.shape_known() || y.on_host) continue;
    const std::uint64_t bytes = align_up(y.bytes(), plan.alignment);
    hold(add, remove, s, s, bytes);                            // the mean's temporary
    hold(add, remove, s, static_cast<std::uint32_t>(steps - 1), bytes);  // the loss's storage, held to the end
  }
  extend_autocast_cache(g, plan, step_of, add, remove);
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
    live = checked_add(live - remove[s], add[s], "eager peak");
    if (live > worst) {
      worst = live;
      out.peak_step = s;
    }
  }
  out.peak_bytes = checked_add(out.resident_bytes, worst, "eager peak");
  return out;
}

}  // namespace memplan::planner
