// Eager-framework peak: per-step live buffer bytes plus gradients accumulated so far, by a difference array.
#include "planner/eager_model.hpp"

#include <algorithm>
#include <vector>

#include "analysis/ops.hpp"

namespace memplan::planner {

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
  std::vector<std::uint64_t> add(steps + 1, 0), remove(steps + 1, 0);
  for (const auto& b : plan.buffers) {
    add[b.interval.first] = checked_add(add[b.interval.first], b.size, "eager peak");
    remove[b.interval.last + 1] = checked_add(remove[b.interval.last + 1], b.size, "eager peak");
  }
  for (std::uint32_t s = 0; s < steps; ++s) {  // PyTorch's mse_loss (see the header)
    const auto& op = g.ops[plan.schedule[s]];
    if (op.type != analysis::memplan_ops::kMSELoss || op.inputs.empty()) continue;
    const auto& y = g.tensors[op.inputs[0]];
    if (!y.shape_known() || y.on_host) continue;
    const std::uint64_t bytes = align_up(y.bytes(), plan.alignment);
    add[s] = checked_add(add[s], 2 * bytes, "eager peak");  // the loss's storage (held) + the mean's temporary
    remove[s + 1] = checked_add(remove[s + 1], bytes, "eager peak");
  }
  // optimizer.step(): its temporaries live while it runs, at the first update's step (gradients still held).
  std::vector<analysis::OpId> updates;
  for (std::uint32_t s = 0; s < steps; ++s)
    if (g.ops[plan.schedule[s]].phase == analysis::Phase::optimizer) updates.push_back(plan.schedule[s]);
  if (!updates.empty()) {
    const auto s = step_of[updates.front()];
    const std::uint64_t temp = optimizer_step_temporaries(g, updates, options.optimizer_impl, plan.alignment);
    add[s] = checked_add(add[s], temp, "eager peak");
    remove[s + 1] = checked_add(remove[s + 1], temp, "eager peak");
  }
  for (const auto& t : g.tensors) {
    if (!t.shape_known() || t.on_host) continue;
    // An in-place update (an optimizer's weight or state, an accumulated gradient) is its storage's bytes.
    if (analysis::rewritten_source(g, static_cast<analysis::TensorId>(&t - g.tensors.data())) != analysis::kNoTensor) continue;
    if (t.role == TensorRole::gradient && t.producer != analysis::kNoOp) {
      if (plan.tensor_offset.size() > 0 && plan.tensor_offset[static_cast<std::size_t>(&t - g.tensors.data())] != kNotInArena)
        continue;  // planned in the arena: already counted with the buffers
      const auto s = step_of[t.producer];
      add[s] = checked_add(add[s], align_up(t.bytes(), plan.alignment), "eager peak");  // held to the end
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
