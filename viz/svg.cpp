// SVG text helpers: escaping, number formatting and "nice" axis ticks.
#include "viz/svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace memplan::viz {

std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\n' || c == '\t') out += c;
    }
  }
  return out;
}

std::string num(double v) {
  if (!std::isfinite(v)) return "0";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  std::string s = buf;
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  if (s == "-0") s = "0";
  return s;
}

std::string bytes_label(std::uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  const int u = bytes < 1024 ? 0 : std::min(6, static_cast<int>(std::log2(static_cast<double>(bytes))) / 10);
  const double v = std::ldexp(static_cast<double>(bytes), -10 * u);
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : v >= 100.0 ? "%.0f %s" : v >= 10.0 ? "%.1f %s" : "%.2f %s", v, units[u]);
  std::string s = buf;
  // "2.00 GiB" reads better as "2 GiB"; "1.50" as "1.5".
  auto sp = s.find(' ');
  auto dot = s.find('.');
  if (dot != std::string::npos && dot < sp) {
    std::size_t end = sp;
    while (end > dot + 1 && s[end - 1] == '0') --end;
    if (end == dot + 1) end = dot;
    s.erase(end, sp - end);
  }
  return s;
}

namespace {

// The smallest round step >= raw: 1, 2, 5 x 10^k; in binary units (base1024) 1, 2, 5, 10, 20, 50, 100,
// 256, 512 of the largest power of 1024 below raw, so that steps of MiB add up to round GiB.
std::uint64_t nice_step(double raw, bool base1024) {
  if (raw <= 1.0) return 1;
  if (base1024) {
    double unit = 1.0;
    while (raw / unit >= 1024.0) unit *= 1024.0;
    for (double m : {1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 256.0, 512.0, 1024.0})
      if (m * unit >= raw) return static_cast<std::uint64_t>(std::llround(m * unit));
  }
  double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (;;) {
    for (double m : {1.0, 2.0, 5.0})
      if (m * p >= raw) return static_cast<std::uint64_t>(std::llround(m * p));
    p *= 10.0;
  }
}

std::vector<std::uint64_t> ticks(std::uint64_t max_value, int target, bool base1024) {
  std::vector<std::uint64_t> out{0};
  if (max_value == 0 || target < 1) return out;
  const std::uint64_t step = nice_step(static_cast<double>(max_value) / target, base1024);
  for (std::uint64_t v = step; v <= max_value && v >= step; v += step) out.push_back(v);
  return out;
}

}  // namespace

std::vector<std::uint64_t> byte_ticks(std::uint64_t max_bytes, int target) { return ticks(max_bytes, target, true); }

std::vector<std::uint64_t> step_ticks(std::uint64_t last_step, int target) { return ticks(last_step, target, false); }

}  // namespace memplan::viz
