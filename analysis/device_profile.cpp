// Device profiles (FLOP/s, HBM and host-link bandwidth, launch cost) in JSON, and roofline timing.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "analysis/cost.hpp"
#include "analysis/json_read.hpp"

namespace memplan::analysis {

DeviceProfile default_device_profile() {
  // Measured on one NVIDIA H100 80GB HBM3 (driver 580, PyTorch 2.11) by bench/pytorch_yardstick.py,
  // 2026-11-23: bench/results/pytorch_yardstick_h100_2026-11-23.json. Launch latency is not measured.
  DeviceProfile p;
  p.name = "h100-measured";
  p.peak_flops = 51.5e12;               // fp32 8192^3 matmul, TF32 off
  p.hbm_bytes_per_s = 2.899e12;         // 1 GiB device-to-device copy, bytes read + written
  p.host_to_device_bytes_per_s = 53.4e9;  // 1 GiB pinned copy
  p.device_to_host_bytes_per_s = 47.1e9;
  p.kernel_launch_seconds = 5e-6;
  p.measured = true;
  p.notes = "measured on an H100 80GB HBM3, 2026-11-23 (launch latency assumed)";
  return p;
}

namespace {

// A rate or time in a range real devices lie well inside: every figure derived from it (op seconds over up to 2^63
// bytes, their sums over a step) stays finite and positive, so no profile makes a step time null or a budget
// infeasible by arithmetic alone.
double in_range(const nlohmann::json& j, const char* key, double lo, double hi, const std::string& origin) {
  if (!j.contains(key)) fail(ErrorKind::malformed, origin + ": device profile lacks \"" + key + "\"");
  const auto& v = j.at(key);
  const std::string range = json_excerpt(nlohmann::json(lo)) + " .. " + json_excerpt(nlohmann::json(hi));
  if (!v.is_number())
    fail(ErrorKind::malformed, origin + ": device profile field \"" + key + "\" is " + json_excerpt(v) + ", not a number in " + range);
  const double d = v.get<double>();
  if (!(d >= lo && d <= hi))
    fail(ErrorKind::malformed, origin + ": device profile field \"" + key + "\" is " + json_excerpt(v) + ", outside " + range);
  return d;
}

constexpr double kMinFlops = 1e6, kMaxFlops = 1e18;      // FLOP/s: a microcontroller .. beyond any accelerator
constexpr double kMinBandwidth = 1e6, kMaxBandwidth = 1e15;  // bytes/s: 1 MB/s .. 1 PB/s
constexpr double kMaxLaunch = 1.0;                       // seconds per kernel launch
constexpr double kMinScale = 1e-6, kMaxScale = 1e6;      // op_scale factors

double positive(const nlohmann::json& j, const char* key, const std::string& origin) {
  return in_range(j, key, kMinBandwidth, kMaxBandwidth, origin);
}

}  // namespace

DeviceProfile device_profile_from_json(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object()) fail(ErrorKind::malformed, origin + ": a device profile is a JSON object");
  DeviceProfile p;
  if (!j.contains("name") || !j.at("name").is_string()) fail(ErrorKind::malformed, origin + ": device profile lacks a string \"name\"");
  p.name = j.at("name").get<std::string>();
  p.peak_flops = in_range(j, "peak_flops", kMinFlops, kMaxFlops, origin);
  p.hbm_bytes_per_s = positive(j, "hbm_bytes_per_s", origin);
  p.host_to_device_bytes_per_s = positive(j, "host_to_device_bytes_per_s", origin);
  p.device_to_host_bytes_per_s = positive(j, "device_to_host_bytes_per_s", origin);
  p.kernel_launch_seconds = in_range(j, "kernel_launch_seconds", 0.0, kMaxLaunch, origin);
  if (j.contains("interconnect_bytes_per_s")) p.interconnect_bytes_per_s = positive(j, "interconnect_bytes_per_s", origin);
  if (j.contains("measured")) {
    if (!j.at("measured").is_boolean()) fail(ErrorKind::malformed, origin + ": \"measured\" must be true or false");
    p.measured = j.at("measured").get<bool>();
  }
  if (j.contains("notes")) {
    if (!j.at("notes").is_string()) fail(ErrorKind::malformed, origin + ": \"notes\" must be a string");
    p.notes = j.at("notes").get<std::string>();
  }
  if (j.contains("op_scale")) {
    const auto& m = j.at("op_scale");
    if (!m.is_object()) fail(ErrorKind::malformed, origin + ": \"op_scale\" must be an object of op type -> positive number");
    for (const auto& [type, v] : m.items()) {
      if (!v.is_number() || !(v.get<double>() >= kMinScale && v.get<double>() <= kMaxScale))
        fail(ErrorKind::malformed, origin + ": op_scale of \"" + type + "\" is " + json_excerpt(v) + ", not a number in 1e-06 .. 1e+06");
      p.op_scale[type] = v.get<double>();
    }
  }
  return p;
}

DeviceProfile read_device_profile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(ErrorKind::io, path + ": the device profile is a directory, not a JSON file");
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(ErrorKind::io, path + ": cannot open the device profile");
  std::stringstream s;
  s << f.rdbuf();
  return device_profile_from_json(parse_json_strict(s.str(), path), path);
}

nlohmann::json device_profile_to_json(const DeviceProfile& p) {
  nlohmann::json j{{"name", p.name},
                        {"peak_flops", p.peak_flops},
                        {"hbm_bytes_per_s", p.hbm_bytes_per_s},
                        {"host_to_device_bytes_per_s", p.host_to_device_bytes_per_s},
                        {"device_to_host_bytes_per_s", p.device_to_host_bytes_per_s},
                        {"kernel_launch_seconds", p.kernel_launch_seconds},
                        {"interconnect_bytes_per_s", p.interconnect_bytes_per_s},
                        {"measured", p.measured},
                        {"notes", p.notes}};
  if (!p.op_scale.empty()) j["op_scale"] = p.op_scale;
  return j;
}

double op_seconds(const OpCost& c, const DeviceProfile& p) {
  if (!c.launches) return 0.0;
  const double compute = p.peak_flops > 0 ? c.flops / p.peak_flops : 0.0;
  const double bytes = static_cast<double>(c.bytes_read) + static_cast<double>(c.bytes_written);
  const double memory = p.hbm_bytes_per_s > 0 ? bytes / p.hbm_bytes_per_s : 0.0;
  return std::max(compute, memory) + p.kernel_launch_seconds;
}

double op_seconds(const Graph& g, OpId o, const OpCost& c, const DeviceProfile& p) {
  const double s = op_seconds(c, p);
  if (p.op_scale.empty() || s == 0.0) return s;
  const auto it = p.op_scale.find(g.ops[o].type);
  return it == p.op_scale.end() ? s : s * it->second;
}
double op_seconds(const Graph& g, OpId o, const DeviceProfile& p) { return op_seconds(g, o, op_cost(g, o), p); }

double host_to_device_seconds(std::uint64_t bytes, const DeviceProfile& p) {
  return static_cast<double>(bytes) / p.host_to_device_bytes_per_s;
}
double device_to_host_seconds(std::uint64_t bytes, const DeviceProfile& p) {
  return static_cast<double>(bytes) / p.device_to_host_bytes_per_s;
}

}  // namespace memplan::analysis
