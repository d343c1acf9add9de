// NumPy .npy reading and writing: magic, a Python-dict header, raw C-order little-endian data.
#include "runtime_allocator/npy.hpp"

#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

namespace memplan::runtime {

namespace {
using analysis::DType;

struct Descr {
  const char* text;
  DType dtype;
};
constexpr Descr kDescrs[] = {{"<f4", DType::f32}, {"<f8", DType::f64}, {"<i8", DType::i64},
                             {"<i4", DType::i32}, {"|b1", DType::boolean}, {"|u1", DType::u8}};

std::string field(const std::string& header, const std::string& key, const std::string& value_re,
                  const std::string& origin) {
  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'" + key + "'\\s*:\\s*(" + value_re + ")")))
    fail(ErrorKind::malformed, origin + ": npy header has no valid '" + key + "': " + header);
  return m[1].str();
}
}  // namespace

analysis::TensorData parse_npy(std::string_view bytes, const std::string& origin) {
  if (bytes.size() < 10 || bytes.substr(0, 6) != std::string_view("\x93NUMPY", 6))
    fail(ErrorKind::malformed, origin + ": not an .npy file (bad magic)");
  const int major = static_cast<unsigned char>(bytes[6]);
  std::uint64_t header_len = 0, header_at = 10;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) fail(ErrorKind::malformed, origin + ": truncated npy header");
    for (int k = 3; k >= 0; --k) header_len = header_len << 8 | static_cast<unsigned char>(bytes[8 + k]);
    header_at = 12;
  } else {
    fail(ErrorKind::unsupported, origin + ": npy format version " + std::to_string(major) + " is not supported");
  }
  if (header_at + header_len > bytes.size()) fail(ErrorKind::malformed, origin + ": truncated npy header");
  const std::string header(bytes.substr(header_at, header_len));

  analysis::TensorData t;
  const std::string descr = field(header, "descr", "'[^']*'", origin);
  for (const auto& d : kDescrs)
    if (descr == std::string("'") + d.text + "'") t.dtype = d.dtype;
  if (t.dtype == DType::undefined)
    fail(ErrorKind::unsupported, origin + ": npy dtype " + descr + " is not supported (float32/64, int32/64, bool)");
  if (field(header, "fortran_order", "True|False", origin) == "True")
    fail(ErrorKind::unsupported, origin + ": Fortran-order npy arrays are not supported");
  const std::string shape = field(header, "shape", "\\([0-9,\\s]*\\)", origin);
  std::stringstream ss(shape.substr(1, shape.size() - 2));
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.find_first_not_of(" \t") == std::string::npos) continue;
    try {
      t.dims.push_back(std::stoll(item));
    } catch (const std::exception&) {
      fail(ErrorKind::malformed, origin + ": bad npy shape " + shape);
    }
  }
  const std::uint64_t n = checked_mul(t.element_count(), analysis::dtype_bits(t.dtype) / 8, origin + " data size");
  const std::uint64_t data_at = header_at + header_len;
  if (bytes.size() - data_at != n)
    fail(ErrorKind::malformed, origin + ": npy data is " + std::to_string(bytes.size() - data_at) + " bytes, shape " +
                                   shape + " needs " + std::to_string(n));
  t.bytes.resize(n);
  if (n) std::memcpy(t.bytes.data(), bytes.data() + data_at, n);
  return t;
}

analysis::TensorData read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(ErrorKind::io, "cannot open '" + path + "'");
  std::stringstream buf;
  buf << f.rdbuf();
  if (f.bad()) fail(ErrorKind::io, "cannot read '" + path + "'");
  return parse_npy(buf.str(), path);
}

std::string format_npy(const analysis::TensorData& t) {
  const char* descr = nullptr;
  for (const auto& d : kDescrs)
    if (d.dtype == t.dtype) descr = d.text;
  if (!descr) fail(ErrorKind::unsupported, std::string("npy: cannot write dtype ") + analysis::dtype_name(t.dtype));
  std::string shape = "(";
  for (auto d : t.dims) shape += std::to_string(d) + ",";
  if (t.dims.size() > 1) shape.pop_back();
  shape += ")";
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64, as NumPy writes it.
  header.append(63 - (10 + header.size()) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  return out;
}

void write_npy(const std::string& path, const analysis::TensorData& t) {
  const std::string bytes = format_npy(t);
  std::ofstream f(path, std::ios::binary);
  if (!f || !f.write(bytes.data(), static_cast<std::streamsize>(bytes.size())))
    fail(ErrorKind::io, "cannot write '" + path + "'");
}

}  // namespace memplan::runtime
