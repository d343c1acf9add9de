// Eager-framework peak: per-step live buffer bytes plus gradients accumulated so far, by a difference array.
#include "planner/eager_model.hpp"

#include <vector>

namespace memplan::planner {

EagerPeak eager_peak(const analysis::Graph& g, const Plan& plan) {
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
  for (const auto& t : g.tensors) {
    if (!t.shape_known() || t.on_host) continue;
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
