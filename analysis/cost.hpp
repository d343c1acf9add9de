// Cost model: FLOPs and bytes moved per op (forward, backward, optimizer), and a device profile to time them.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "analysis/graph.hpp"

namespace memplan::analysis {

struct OpCost {
  double flops = 0.0;              // floating-point operations (a multiply-add counts 2)
  std::uint64_t bytes_read = 0;    // each distinct input tensor once (Gather: only the rows it reads)
  std::uint64_t bytes_written = 0; // every output tensor
  bool launches = true;            // false for views (Reshape, Flatten, Squeeze, Unsqueeze, forward Identity)
};

// Cost of one op from its tensors' concrete shapes (ErrorKind::shape when one is unknown). Formulas are
// in docs/backward-ops.md ("Cost model") and held by the op registry; an op it does not know is
// ErrorKind::unsupported.
OpCost op_cost(const Graph& g, OpId op);

struct DeviceProfile {
  std::string name;
  double peak_flops = 0.0;                  // FLOP/s the cost model assumes for compute-bound ops
  double hbm_bytes_per_s = 0.0;             // device memory bandwidth
  double host_to_device_bytes_per_s = 0.0;  // pinned host memory -> device (swap-in)
  double device_to_host_bytes_per_s = 0.0;  // device -> pinned host memory (swap-out)
  double kernel_launch_seconds = 0.0;       // fixed cost per launched kernel
  // Per-GPU bandwidth of the link between the GPUs of one host, one direction (NVLink 4 on H100/H200 SXM:
  // 450 GB/s). Collectives are timed over it (planner/parallel/parallel.hpp: ring all-reduce 2(N-1)/N bytes / bw).
  double interconnect_bytes_per_s = 450e9;
  bool measured = false;                    // false: placeholder values, not measured on the device
  std::string notes;
  // Per op type (Op::type): measured seconds over the roofline's on the device (bench/calibrate_profile.py from
  // bench_cuda's per-op timings of keep-all steps); the estimate of an op of that type is scaled by it. Empty: 1.
  std::map<std::string, double> op_scale;
};

// An H100-SXM-like placeholder (datasheet-derived, measured = false) until a measured profile exists.
DeviceProfile default_device_profile();

// JSON object with the fields above (notes and measured optional). Errors: ErrorKind::malformed naming
// the field for a missing, non-numeric or non-positive value; ErrorKind::io for an unreadable file.
DeviceProfile device_profile_from_json(const nlohmann::json& j, const std::string& origin = "<json>");
DeviceProfile read_device_profile(const std::string& path);
nlohmann::json device_profile_to_json(const DeviceProfile& p);

// Roofline: max(flops / peak_flops, bytes / hbm_bytes_per_s) plus one kernel launch (views cost 0).
double op_seconds(const OpCost& c, const DeviceProfile& p);
// The roofline of op `o` of `g` times the profile's op_scale of its type: what the planners' time estimates use.
double op_seconds(const Graph& g, OpId o, const DeviceProfile& p);
double op_seconds(const Graph& g, OpId o, const OpCost& c, const DeviceProfile& p);
// Seconds to move `bytes` over the host link in either direction.
double host_to_device_seconds(std::uint64_t bytes, const DeviceProfile& p);
double device_to_host_seconds(std::uint64_t bytes, const DeviceProfile& p);

}  // namespace memplan::analysis
