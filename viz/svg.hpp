// Small pieces for writing SVG by hand: XML escaping, compact numbers, byte axes and the role palette.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace memplan::viz {

// Escapes &, <, >, " and ' for XML text and attribute values; drops control characters XML forbids.
std::string xml_escape(std::string_view s);

// A coordinate with at most two decimals and no trailing zeros ("12", "12.5", "0.25").
std::string num(double v);

// "512 B", "1.5 KiB", "3.25 GiB": bytes in binary units, three significant digits at most.
std::string bytes_label(std::uint64_t bytes);

// Tick values for an axis of bytes from 0 to `max_bytes`: round multiples of 1, 2 or 5 times a power
// of 1024 (or of ten below 1 KiB), between about `target` and 2*target ticks, 0 included.
std::vector<std::uint64_t> byte_ticks(std::uint64_t max_bytes, int target = 5);

// Tick values for an axis of steps 0 .. last_step: round multiples of 1, 2 or 5 times a power of ten.
std::vector<std::uint64_t> step_ticks(std::uint64_t last_step, int target = 8);

// A linear map from a data interval onto a pixel interval.
struct Scale {
  double d0 = 0, d1 = 1, p0 = 0, p1 = 1;
  double operator()(double v) const { return d1 == d0 ? p0 : p0 + (v - d0) * (p1 - p0) / (d1 - d0); }
  double per_unit() const { return d1 == d0 ? 0.0 : (p1 - p0) / (d1 - d0); }
};

}  // namespace memplan::viz
