// libFuzzer target: .npy bytes -> parse_npy -> format_npy -> parse_npy again (same dtype, dims and bytes).
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_common.hpp"
#include "runtime_allocator/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace memplan;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  analysis::TensorData t;
  try {
    t = runtime::parse_npy(bytes, "<fuzz>");
  } catch (const Error& e) {
    fuzz::require(e.kind() == ErrorKind::malformed || e.kind() == ErrorKind::unsupported || e.kind() == ErrorKind::overflow,
                  "a bad .npy is malformed, unsupported or overflow");
    return 0;
  }
  // What the reader accepted is consistent, and what the writer makes of it reads back the same.
  fuzz::require(t.bytes.size() == t.element_count() * (analysis::dtype_bits(t.dtype) / 8), "data size matches dtype and dims");
  const analysis::TensorData back = runtime::parse_npy(runtime::format_npy(t), "<fuzz:format>");
  fuzz::require(back.dtype == t.dtype && back.dims == t.dims && back.bytes == t.bytes, "format_npy round-trips");
  return 0;
}
