// libFuzzer target: plan JSON (graph embedded, as `analyze --save-plan` writes it) -> plan_from_json -> verify_plan.
#include <cstddef>
#include <cstdint>

#include "analysis/import.hpp"
#include "fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace memplan;
  const nlohmann::json doc = nlohmann::json::parse(data, data + size, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("graph")) return 0;
  analysis::Graph g;
  planner::Plan p;
  try {
    g = analysis::import_json(doc.at("graph"), "<fuzz:graph>");
    p = planner::plan_from_json(g, doc);
  } catch (const Error& e) {
    fuzz::rejected(e);
    return 0;
  }
  // A hostile plan may be wrong; the verifier must say so without crashing, and a plan it accepts must
  // survive writing and reading back unchanged.
  if (!planner::verify_plan(g, p).valid) return 0;
  fuzz::check_plan_round_trip(g, p);
  return 0;
}
