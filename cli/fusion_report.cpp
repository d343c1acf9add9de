// Fusion summaries for the commands: count groups by kind, write them as JSON or a line.
#include "cli/fusion_report.hpp"

#include <algorithm>

#include "cli/common.hpp"

namespace memplan::cli {

std::vector<std::pair<std::string, std::size_t>> groups_by_kind(const FusionSummary& s) {
  std::vector<std::pair<std::string, std::size_t>> out;
  for (const auto& g : s.groups) {
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& kc) { return kc.first == g.kind; });
    if (it == out.end()) out.emplace_back(g.kind, 1);
    else ++it->second;
  }
  return out;
}

nlohmann::json fusion_json(const FusionSummary& s) {
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& g : s.groups) groups.push_back({{"kind", g.kind}, {"op", g.op}, {"members", g.members}});
  nlohmann::json by_kind = nlohmann::json::object();
  for (const auto& [kind, n] : groups_by_kind(s)) by_kind[kind] = n;
  return {{"enabled", s.enabled}, {"groups", std::move(groups)}, {"by_kind", std::move(by_kind)},
          {"intermediate_bytes_removed", s.intermediate_bytes_removed}};
}

std::string fusion_text(const FusionSummary& s) {
  if (!s.enabled) return "off (--no-fuse)";
  if (s.groups.empty()) return "nothing to fuse";
  std::string kinds;
  for (const auto& [kind, n] : groups_by_kind(s)) kinds += (kinds.empty() ? "" : ", ") + kind + " " + std::to_string(n);
  return std::to_string(s.groups.size()) + (s.groups.size() == 1 ? " group (" : " groups (") + kinds + "): " +
         human_bytes(s.intermediate_bytes_removed) + " of intermediates not planned";
}

}  // namespace memplan::cli
