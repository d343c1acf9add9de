// How training plans are stated to the user: step time against keep-all, what is recomputed and swapped,
// device memory part by part, and the eval-mode export warning. plan, fit, viz and trace share these words.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "analysis/graph.hpp"
#include "cli/device_memory.hpp"
#include "planner/training_plan.hpp"

namespace memplan::cli {

// "12.300 ms = +14.0% over keep-all 10.800 ms"; without a keep-all time (<= 0) only "12.300 ms".
std::string step_text(double step_seconds, double keep_all_seconds);
// (step - keep_all) / keep_all; 0 without a keep-all time.
double step_overhead(double step_seconds, double keep_all_seconds);

// How many recomputed / swapped tensors plan lists (largest first).
inline constexpr std::size_t kListedTensors = 20;
// The first kListedTensors of `list` as [{"tensor", "op", "op_type", "bytes"}].
nlohmann::json planned_tensors_json(const std::vector<planner::PlannedTensor>& list);
// One line per listed tensor: "  1.50 MiB  tensor  (made by op, OpType)", and "  ... N more" past them.
std::string planned_tensors_text(const std::vector<planner::PlannedTensor>& list);

// The op order planned on: {"kind", "method", "file_order_peak_bytes", "peak_bytes", "proven_optimal", "seconds"}
// (peaks: live arena bytes with in-place and views, before recompute and swap).
nlohmann::json schedule_json(const planner::ScheduleResult& s);
// "memory order (least_peak_first+local): live peak 1.2 GiB, file order 1.4 GiB (-14.3%)".
std::string schedule_text(const planner::ScheduleResult& s);

using planner::training_device_memory;

// Warns on stderr when `forward` (as imported) looks like an eval-mode export (analysis/export_mode.hpp):
// the training step planned from it lacks what PyTorch's training step holds. Points to README.md.
void warn_if_eval_export(const analysis::Graph& forward, const std::string& model_path);

}  // namespace memplan::cli
