// Parsing memory sizes such as "16GiB", "512MB" and "1e9" for budgets.
#include <cctype>
#include <cmath>
#include <string>

#include "planner/remat.hpp"

namespace memplan::planner {

std::uint64_t parse_size(std::string_view text) {
  const std::string s(text);
  std::size_t used = 0;
  double value = 0.0;
  try {
    value = std::stod(s, &used);
  } catch (const std::exception&) {
    fail(ErrorKind::usage, "size '" + s + "' does not start with a number");
  }
  std::string unit;
  for (std::size_t i = used; i < s.size(); ++i)
    if (!std::isspace(static_cast<unsigned char>(s[i]))) unit += static_cast<char>(std::toupper(static_cast<unsigned char>(s[i])));
  static const std::pair<const char*, double> units[] = {
      {"", 1.0},         {"B", 1.0},           {"KIB", 1024.0},     {"MIB", 1048576.0}, {"GIB", 1073741824.0},
      {"TIB", 1099511627776.0}, {"KB", 1e3},  {"MB", 1e6},         {"GB", 1e9},        {"TB", 1e12}};
  double scale = -1.0;
  for (const auto& [name, f] : units)
    if (unit == name) scale = f;
  if (scale < 0.0) fail(ErrorKind::usage, "size '" + s + "': unknown unit '" + unit + "' (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
  const double bytes = value * scale;
  if (!std::isfinite(bytes) || bytes < 0.0 || bytes >= 9.2e18)
    fail(ErrorKind::usage, "size '" + s + "' is out of range");
  return static_cast<std::uint64_t>(std::llround(bytes));
}

}  // namespace memplan::planner
