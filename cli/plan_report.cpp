// Training plans in words: step time against keep-all, recomputed and swapped tensors, device memory, export warning.
#include "cli/plan_report.hpp"

#include <cstdio>
#include <iostream>

#include "analysis/export_mode.hpp"
#include "cli/common.hpp"

namespace memplan::cli {

double step_overhead(double step_seconds, double keep_all_seconds) {
  return keep_all_seconds > 0.0 ? (step_seconds - keep_all_seconds) / keep_all_seconds : 0.0;
}

std::string step_text(double step_seconds, double keep_all_seconds) {
  char buf[128];
  if (keep_all_seconds > 0.0)
    std::snprintf(buf, sizeof buf, "%.3f ms = %+.1f%% over keep-all %.3f ms", 1e3 * step_seconds,
                  100.0 * step_overhead(step_seconds, keep_all_seconds), 1e3 * keep_all_seconds);
  else
    std::snprintf(buf, sizeof buf, "%.3f ms", 1e3 * step_seconds);
  return buf;
}

nlohmann::json planned_tensors_json(const std::vector<planner::PlannedTensor>& list) {
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t k = 0; k < list.size() && k < kListedTensors; ++k)
    out.push_back({{"tensor", list[k].tensor}, {"op", list[k].op}, {"op_type", list[k].op_type}, {"bytes", list[k].bytes}});
  return out;
}

std::string planned_tensors_text(const std::vector<planner::PlannedTensor>& list) {
  std::string out;
  for (std::size_t k = 0; k < list.size() && k < kListedTensors; ++k) {
    char bytes[32];
    std::snprintf(bytes, sizeof bytes, "  %12s  ", human_bytes(list[k].bytes).c_str());
    out += bytes + list[k].tensor + "  (made by " + (list[k].op.empty() ? "?" : list[k].op + ", " + list[k].op_type) + ")\n";
  }
  if (list.size() > kListedTensors) out += "  ... " + std::to_string(list.size() - kListedTensors) + " more (smaller)\n";
  return out;
}

void warn_if_eval_export(const analysis::Graph& forward, const std::string& model_path) {
  const analysis::ExportModeSigns s = analysis::export_mode_signs(forward);
  if (!s.eval_mode()) return;
  std::string lost;  // what PyTorch's training step holds that this graph cannot give back
  if (s.folded_batchnorm) lost += "the folded BatchNorms' outputs and batch statistics";
  if (s.inference_dropout) lost += std::string(lost.empty() ? "" : ", ") + "the Dropout masks";
  std::cerr << "memplan: warning: " << model_path << " looks like an eval-mode export (" << s.summary() << "): "
            << (lost.empty() ? "" : "the training step planned from it lacks " + lost + ", which PyTorch's training step holds; ")
            << (s.inference_batchnorm ? "inference BatchNormalization is planned as training BatchNorm; " : "")
            << "export with training=torch.onnx.TrainingMode.TRAINING and do_constant_folding=False: README.md, section "
               "\"Exporting from PyTorch for memplan\".\n";
}

nlohmann::json schedule_json(const planner::ScheduleResult& s) {
  return {{"kind", planner::schedule_kind_name(s.kind)}, {"method", s.method}, {"file_order_peak_bytes", s.file_peak_bytes},
          {"peak_bytes", s.peak_bytes}, {"proven_optimal", s.proven_optimal}, {"seconds", s.seconds}};
}

std::string schedule_text(const planner::ScheduleResult& s) {
  if (s.kind == planner::ScheduleKind::file) return "file order: live peak " + human_bytes(s.file_peak_bytes) + " (--schedule memory searches for a lower one)";
  char pct[32];
  const double d = s.file_peak_bytes ? 100.0 * (static_cast<double>(s.peak_bytes) - static_cast<double>(s.file_peak_bytes)) / static_cast<double>(s.file_peak_bytes) : 0.0;
  std::snprintf(pct, sizeof pct, "%+.1f%%", d);
  return "memory order (" + s.method + (s.proven_optimal ? ", proven least" : "") + "): live peak " + human_bytes(s.peak_bytes) +
         ", file order " + human_bytes(s.file_peak_bytes) + " (" + pct + ")";
}

}  // namespace memplan::cli
