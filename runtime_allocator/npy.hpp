// NumPy .npy files (format 1.0-3.0): float32/64, int32/64 and bool, C order, little endian.
#pragma once

#include <string>
#include <string_view>

#include "analysis/graph.hpp"

namespace memplan::runtime {

// Errors: ErrorKind::io when the file cannot be read or written; ErrorKind::malformed for a bad magic,
// header or size; ErrorKind::unsupported for Fortran order, big endian or another dtype.
analysis::TensorData read_npy(const std::string& path);
analysis::TensorData parse_npy(std::string_view bytes, const std::string& origin);
std::string format_npy(const analysis::TensorData& t);
void write_npy(const std::string& path, const analysis::TensorData& t);

}  // namespace memplan::runtime
