// NumPy .npy reading and writing: magic, a Python-dict header read by a small strict parser, raw C-order little-endian data.
#include "runtime_allocator/npy.hpp"

#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "analysis/output_files.hpp"

namespace memplan::runtime {

namespace {
using analysis::DType;

struct Descr {
  const char* text;
  DType dtype;
};
constexpr Descr kDescrs[] = {{"<f4", DType::f32}, {"<f8", DType::f64},     {"<i8", DType::i64},
                             {"<i4", DType::i32}, {"|b1", DType::boolean}, {"|u1", DType::u8}};

// The header NumPy writes is repr() of a dict with exactly the keys 'descr' (a string), 'fortran_order'
// (True or False) and 'shape' (a tuple of ints), read back with ast.literal_eval (numpy/lib/format.py).
// This parser accepts that literal grammar and nothing else: whitespace anywhere between tokens, single or
// double quoted strings, a trailing comma in the dict and the tuple, "(n,)" for one dim. Each key must come
// exactly once; a key's text inside a string value is only part of that string. No recursion: the header's
// length is bounded by its size field alone (65535 bytes in version 1.0, 4 GiB in 2.0 and 3.0).
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& origin) : s_(text), origin_(origin) {}

  analysis::TensorData parse() {
    analysis::TensorData t;
    bool seen[3] = {false, false, false};
    std::string descr_text;
    bool structured = false, fortran = false;
    skip_space();
    expect('{');
    skip_space();
    while (!at('}')) {
      const std::string key = string_literal("a key");
      const int which = key == "descr" ? 0 : key == "fortran_order" ? 1 : key == "shape" ? 2 : -1;
      if (which < 0) bad("unexpected key '" + key + "' (an .npy header has 'descr', 'fortran_order' and 'shape')");
      if (seen[which]) bad("the key '" + key + "' is given twice");
      seen[which] = true;
      skip_space();
      expect(':');
      skip_space();
      if (which == 0) {
        structured = at('[') || at('(');
        if (structured)
          skip_structured();
        else
          descr_text = string_literal("the 'descr' string");
      } else if (which == 1) {
        fortran = fortran_order();
      } else {
        t.dims = shape();
      }
      skip_space();
      if (at('}')) break;
      expect(',');
      skip_space();
    }
    expect('}');
    skip_space();
    if (pos_ != s_.size()) bad("unexpected text after the dict");
    for (int k = 0; k < 3; ++k)
      if (!seen[k]) bad(std::string("no '") + (k == 0 ? "descr" : k == 1 ? "fortran_order" : "shape") + "' key");
    // The structure is sound: now what memplan can hold.
    if (structured)
      fail(ErrorKind::unsupported,
           origin_ + ": structured npy dtypes are not supported (little-endian float32/64, int32/64, bool, uint8)");
    t.dtype = dtype_of(descr_text);
    if (fortran) fail(ErrorKind::unsupported, origin_ + ": Fortran-order npy arrays are not supported");
    return t;
  }

 private:
  [[noreturn]] void bad(const std::string& what) const {
    fail(ErrorKind::malformed, origin_ + ": npy header: " + what + " (at byte " + std::to_string(pos_) + " of the header)");
  }
  bool at(char c) const { return pos_ < s_.size() && s_[pos_] == c; }
  void expect(char c) {
    if (!at(c)) bad(std::string("expected '") + c + "'");
    ++pos_;
  }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\f'))
      ++pos_;
  }

  // A Python string literal without prefix, in single or double quotes, on one line; \\, \' and \" are
  // unescaped, any other escape is kept as written (it matches no key and no dtype).
  std::string string_literal(const char* what) {
    if (!at('\'') && !at('"')) bad(std::string("expected ") + what + " in quotes");
    const char quote = s_[pos_++];
    std::string out;
    for (;;) {
      if (pos_ >= s_.size() || s_[pos_] == '\n' || s_[pos_] == '\r') bad("unterminated string");
      const char c = s_[pos_++];
      if (c == quote) return out;
      if (c == '\\') {
        if (pos_ >= s_.size()) bad("unterminated string");
        const char e = s_[pos_++];
        if (e != '\\' && e != '\'' && e != '"') out += '\\';
        out += e;
      } else {
        out += c;
      }
    }
  }

  // A structured dtype's list of fields: skipped to its matching bracket, strings read as strings, depth
  // counted (no recursion). It is refused once the header is known to be sound.
  void skip_structured() {
    std::size_t depth = 0;
    do {
      if (pos_ >= s_.size()) bad("unterminated structured 'descr'");
      if (at('\'') || at('"')) {
        (void)string_literal("a string");
        continue;
      }
      if (at('[') || at('('))
        ++depth;
      else if (at(']') || at(')'))
        --depth;
      ++pos_;
    } while (depth > 0);
  }

  DType dtype_of(const std::string& d) const {
    for (const auto& k : kDescrs)
      if (d == k.text) return k.dtype;
    std::string shown = d.substr(0, 40);
    fail(ErrorKind::unsupported, origin_ + ": npy dtype '" + shown + (d.size() > 40 ? "...'" : "'") +
                                     " is not supported (little-endian float32/64, int32/64, bool, uint8)");
  }

  bool fortran_order() {
    if (s_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (s_.substr(pos_, 5) != "False") bad("'fortran_order' must be True or False");
    pos_ += 5;
    return false;
  }

  // A tuple of non-negative Python ints: "()", "(3,)", "(2, 3)", "(2, 3,)". "(3)" is an int, not a tuple.
  std::vector<std::int64_t> shape() {
    std::vector<std::int64_t> dims;
    expect('(');
    skip_space();
    bool trailing_comma = false;
    while (!at(')')) {
      dims.push_back(dim());
      skip_space();
      trailing_comma = false;
      if (at(')')) break;
      expect(',');
      trailing_comma = true;
      skip_space();
    }
    if (dims.size() == 1 && !trailing_comma) bad("'shape' must be a tuple: one dim is written (n,)");
    expect(')');
    return dims;
  }

  std::int64_t dim() {
    if (at('-')) fail(ErrorKind::overflow, origin_ + ": npy shape has a negative dim");
    const std::size_t start = pos_;
    std::uint64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      const auto digit = static_cast<std::uint64_t>(s_[pos_] - '0');
      if (v > (static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) - digit) / 10)
        fail(ErrorKind::overflow, origin_ + ": npy shape has a dim beyond 2^63 - 1");
      v = v * 10 + digit;
      ++pos_;
    }
    if (pos_ == start) bad("'shape' must hold integers");
    if (s_[start] == '0' && pos_ - start > 1) bad("a dim has a leading zero");
    return static_cast<std::int64_t>(v);
  }

  std::string_view s_;
  const std::string& origin_;
  std::size_t pos_ = 0;
};

std::uint64_t little_endian(std::string_view bytes, std::size_t at, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t k = n; k-- > 0;) v = v << 8 | static_cast<unsigned char>(bytes[at + k]);
  return v;
}
}  // namespace

analysis::TensorData parse_npy(std::string_view bytes, const std::string& origin) {
  if (bytes.size() < 10 || bytes.substr(0, 6) != std::string_view("\x93NUMPY", 6))
    fail(ErrorKind::malformed, origin + ": not an .npy file (bad magic)");
  const int major = static_cast<unsigned char>(bytes[6]), minor = static_cast<unsigned char>(bytes[7]);
  // Versions 1.0 (2-byte header length), 2.0 and 3.0 (4-byte length; 3.0's header is UTF-8): nothing else.
  if (major < 1 || major > 3 || minor != 0)
    fail(ErrorKind::unsupported, origin + ": npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                                     " is not supported (1.0, 2.0, 3.0)");
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  const std::size_t header_at = 8 + len_bytes;
  if (bytes.size() < header_at) fail(ErrorKind::malformed, origin + ": truncated npy header");
  const std::uint64_t header_len = little_endian(bytes, 8, len_bytes);
  if (header_len > bytes.size() - header_at)
    fail(ErrorKind::malformed, origin + ": truncated npy header (" + std::to_string(header_len) + " bytes announced, " +
                                   std::to_string(bytes.size() - header_at) + " in the file)");
  analysis::TensorData t = HeaderParser(bytes.substr(header_at, header_len), origin).parse();
  const std::uint64_t n = checked_mul(t.element_count(), analysis::dtype_bits(t.dtype) / 8, origin + " data size");
  const std::uint64_t data_at = header_at + header_len;
  if (bytes.size() - data_at != n)
    fail(ErrorKind::malformed, origin + ": npy data is " + std::to_string(bytes.size() - data_at) +
                                   " bytes, its shape and dtype need " + std::to_string(n));
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
  // Magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64, as NumPy writes it; a header
  // beyond version 1.0's 2-byte length (a rank in the thousands) is written as version 2.0.
  const bool v2 = 10 + header.size() + 64 > 0xffff;
  const std::size_t prefix = v2 ? 12 : 10;
  header.append(63 - (prefix + header.size()) % 64, ' ');
  header += '\n';
  std::string out(v2 ? "\x93NUMPY\x02\x00" : "\x93NUMPY\x01\x00", 8);
  for (std::size_t k = 0; k < (v2 ? 4u : 2u); ++k) out += static_cast<char>((header.size() >> (8 * k)) & 0xff);
  out += header;
  out.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  return out;
}

void write_npy(const std::string& path, const analysis::TensorData& t) { analysis::write_file_atomically(path, format_npy(t)); }

}  // namespace memplan::runtime
