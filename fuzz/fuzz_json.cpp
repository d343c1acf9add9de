// libFuzzer target: JSON text -> graph import -> export -> re-import (same fingerprint) -> pipeline.
#include <cstddef>
#include <cstdint>
#include <string>

#include "analysis/import.hpp"
#include "fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace memplan;
  nlohmann::json doc = nlohmann::json::parse(data, data + size, nullptr, false);
  if (doc.is_discarded()) return 0;  // import_json_file reports this as malformed
  analysis::Graph g;
  try {
    g = analysis::import_json(doc, "<fuzz>");
  } catch (const Error&) {
    return 0;
  }
  fuzz::check_imported(g);
  // What export_json writes, import_json reads back as the same structure.
  const analysis::Graph back = analysis::import_json(analysis::export_json(g, true), "<fuzz:export>");
  fuzz::require(back.fingerprint() == g.fingerprint(), "export_json round-trips to the same fingerprint");
  fuzz::run_pipeline(g, size);
  return 0;
}
