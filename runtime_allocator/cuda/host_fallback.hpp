// An op the CUDA backend ran on the host (CudaOptions::host_fallback), as the backend reports it.
#pragma once

#include <string>

namespace memplan::runtime::cuda {

// An op the CUDA kernels cannot run (no kernel, or a dtype, rank or attribute theirs do not take) that the CPU
// kernels can: with host_fallback it runs there, its inputs (and outputs) copied down after the compute stream
// drains and its outputs copied back up. Slow, but the step runs; each such op is reported once.
struct HostFallback {
  std::string op, type, why;  // the op's name and type, and why CUDA refused it
};

}  // namespace memplan::runtime::cuda
