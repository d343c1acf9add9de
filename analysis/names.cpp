// UTF-8 validation of imported names and their terminal-safe form.
#include "analysis/names.hpp"

#include <cstdint>

namespace memplan::analysis {

namespace {

// Length of the UTF-8 sequence starting at s[i] and its code point, or 0 when it is not well formed
// (RFC 3629: shortest form only, no surrogates, at most U+10FFFF).
std::size_t utf8_sequence(std::string_view s, std::size_t i, std::uint32_t& cp) noexcept {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  std::size_t n = 0;
  std::uint32_t min = 0;
  if ((b0 & 0xE0) == 0xC0)
    n = 2, cp = b0 & 0x1F, min = 0x80;
  else if ((b0 & 0xF0) == 0xE0)
    n = 3, cp = b0 & 0x0F, min = 0x800;
  else if ((b0 & 0xF8) == 0xF0)
    n = 4, cp = b0 & 0x07, min = 0x10000;
  else
    return 0;
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = cp << 6 | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

void require(bool ok, const std::string& origin, const std::string& what) {
  if (!ok) fail(ErrorKind::malformed, origin + ": " + what + " is not valid UTF-8");
}

}  // namespace

bool is_valid_utf8(std::string_view s) noexcept {
  std::uint32_t cp = 0;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence(s, i, cp);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

void require_utf8_names(const Graph& g, const std::string& origin) {
  require(is_valid_utf8(g.name), origin, "the graph's name");
  for (std::size_t t = 0; t < g.tensors.size(); ++t) {
    const Tensor& x = g.tensors[t];
    require(is_valid_utf8(x.name), origin, "the name of tensor " + std::to_string(t));
    require(is_valid_utf8(x.external_location), origin, "the external data location of tensor " + std::to_string(t));
  }
  for (std::size_t o = 0; o < g.ops.size(); ++o) {
    const Op& op = g.ops[o];
    const std::string which = "op " + std::to_string(o);
    require(is_valid_utf8(op.name), origin, "the name of " + which);
    require(is_valid_utf8(op.type) && is_valid_utf8(op.domain), origin, "the type or domain of " + which);
    for (const auto& [key, a] : op.attrs) {
      require(is_valid_utf8(key), origin, "an attribute name of " + which);
      bool ok = is_valid_utf8(a.s);
      for (const auto& s : a.strings) ok = ok && is_valid_utf8(s);
      require(ok, origin, "a string attribute of " + which);
    }
  }
}

std::string terminal_safe(std::string_view s) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  std::uint32_t cp = 0;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence(s, i, cp);
    if (n == 0) {  // not UTF-8: the byte, escaped
      const auto b = static_cast<unsigned char>(s[i]);
      out += "\\x";
      out += hex[b >> 4];
      out += hex[b & 15];
      ++i;
      continue;
    }
    if (cp == '\n')
      out += "\\n";
    else if (cp == '\r')
      out += "\\r";
    else if (cp == '\t')
      out += "\\t";
    else if (cp < 0x20 || cp == 0x7F) {
      out += "\\x";
      out += hex[cp >> 4];
      out += hex[cp & 15];
    } else if (cp >= 0x80 && cp < 0xA0) {  // C1 controls: CSI (U+009B) starts escape sequences too
      out += "\\u00";
      out += hex[cp >> 4];
      out += hex[cp & 15];
    } else {
      out.append(s.substr(i, n));
    }
    i += n;
  }
  return out;
}

}  // namespace memplan::analysis
