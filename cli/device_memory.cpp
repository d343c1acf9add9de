// Total device memory part by part, as text lines and JSON keys, and the fits / does not fit answer.
#include "cli/device_memory.hpp"

#include <algorithm>
#include <cstdio>

#include "cli/common.hpp"

namespace memplan::cli {

namespace {
std::string line(const char* part, std::uint64_t bytes, const std::string& note = "") {
  char buf[64];
  std::snprintf(buf, sizeof buf, "  %-19s%12s", part, human_bytes(bytes).c_str());
  return std::string(buf) + (note.empty() ? "" : "  " + note) + "\n";
}
}  // namespace

std::string device_memory_text(const DeviceMemory& m) {
  std::string head = "device memory        " + human_bytes(m.total()) + " in total";
  if (const auto f = m.fits()) {
    const std::uint64_t b = *m.budget, t = m.total();
    head += *f ? ": FITS the budget " + human_bytes(b) + " (" + human_bytes(b - t) + " to spare)"
               : ": DOES NOT FIT the budget " + human_bytes(b) + " (" + human_bytes(t - b) + " over)";
  } else {
    head += " (give --budget SIZE to ask whether it fits)";
  }
  std::string out = head + "\n";
  out += line("weights", m.weights);
  out += line("optimizer state", m.optimizer_state);
  if (m.other_persistent) out += line("other persistent", m.other_persistent, "kept across steps (neither weights nor optimizer state)");
  out += line("graph inputs", m.inputs);
  out += line("activation arena", m.arena, "the planned arena; peak = the lines above = " + human_bytes(m.peak()));
  out += line("conv scratch", m.scratch, m.scratch ? "planned in the arena (included in it, not added)" : "none planned");
  out += line("libraries", m.library, "CUDA context + cuBLAS/cuDNN workspaces (--library-bytes; measured 67-69 MiB on an H100)");
  return out;
}

void add_device_memory_json(nlohmann::json& j, const DeviceMemory& m) {
  j["weights_bytes"] = m.weights;
  j["optimizer_state_bytes"] = m.optimizer_state;
  j["other_persistent_bytes"] = m.other_persistent;
  j["input_bytes"] = m.inputs;
  j["activation_arena_bytes"] = m.arena;
  j["scratch_bytes"] = m.scratch;
  j["scratch_in_arena"] = true;
  j["library_bytes"] = m.library;
  j["peak_bytes"] = m.peak();
  j["total_device_bytes"] = m.total();
  j["budget_bytes"] = m.budget ? nlohmann::json(*m.budget) : nlohmann::json();
  const auto f = m.fits();
  j["fits"] = f ? nlohmann::json(*f) : nlohmann::json();
}

}  // namespace memplan::cli
