// A memplan_torch allocation trace as a picture source: the recorded step's graph and its verified offsets.
#include <filesystem>

#include "analysis/json_read.hpp"
#include "cli/viz_source.hpp"
#include "planner/verify.hpp"
#include "torch_allocator/step_plan.hpp"
#include "torch_allocator/trace.hpp"
#include "viz/svg.hpp"

namespace memplan::cli {

PlannedModel load_trace_file(const std::string& path) {
  const torch_allocator::Trace t = torch_allocator::read_trace(analysis::read_json_file(path, "allocation trace"));
  PlannedModel m;
  m.graph = torch_allocator::step_graph(t.step);
  m.plan = torch_allocator::step_as_plan(m.graph, t.step, t.plan);
  planner::require_valid(m.graph, m.plan);
  m.title = std::filesystem::path(path).filename().string() + " \u00b7 PyTorch step on device " + std::to_string(t.device);
  m.arena_budget = m.budget = t.caching_reserved_bytes;
  m.lower_bound_bytes = t.plan.peak_live_bytes;
  m.budget_label = "PyTorch's caching allocator would reserve " + viz::bytes_label(t.caching_reserved_bytes);
  m.lower_bound_label = "peak live " + viz::bytes_label(t.plan.peak_live_bytes);
  std::size_t elsewhere = 0;
  for (std::size_t k = 0; k < t.step.blocks.size(); ++k) elsewhere += !t.step.in_arena(k);
  m.note = std::to_string(t.step.blocks.size()) + " allocations, " + std::to_string(t.step.event_count()) + " events \u00b7 planned arena " +
           viz::bytes_label(t.plan.arena_bytes) + " (" + t.plan.packer + ") \u00b7 caching allocator would reserve " +
           viz::bytes_label(t.caching_reserved_bytes) + " (max allocated " + viz::bytes_label(t.caching_max_allocated_bytes) + ")";
  if (elsewhere) m.note += " \u00b7 " + std::to_string(elsewhere) + " blocks outside the arena (other streams or live past the step; not drawn)";
  std::size_t periodic = 0;
  for (std::size_t k = 0; k < t.step.blocks.size(); ++k) periodic += t.step.periodic(k);
  if (periodic)
    m.note += " \u00b7 " + std::to_string(periodic) + " periodic blocks (live past the step, freed by the next before made again: two " +
              "rectangles at one offset, the previous step's until its free and this step's from its allocation; region " +
              viz::bytes_label(t.plan.periodic_bytes) + ")";
  return m;
}

}  // namespace memplan::cli
