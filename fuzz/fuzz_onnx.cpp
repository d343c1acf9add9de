// libFuzzer target: ONNX bytes -> import -> shapes -> inference and training plans -> verifier. Only memplan::Error may escape.
#include <cstddef>
#include <cstdint>
#include <string>

#include "analysis/import.hpp"
#include "fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace memplan;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  analysis::Graph g;
  try {
    g = analysis::import_onnx_bytes(bytes, "<fuzz>");
  } catch (const Error&) {
    return 0;  // rejected with a documented kind: fine
  }
  fuzz::check_imported(g);
  fuzz::run_pipeline(g, size);
  return 0;
}
