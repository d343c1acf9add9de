// ScatterND's and ScatterElements' `reduction` attribute, shared by the CPU and CUDA kernels (host and device code).
#pragma once

#include <string_view>

namespace memplan::runtime {

enum class ScatterReduction : int { none, add, mul, max, min };

// The attribute's value; false for an unknown reduction.
inline bool parse_scatter_reduction(std::string_view s, ScatterReduction& r) {
  if (s == "none")
    r = ScatterReduction::none;
  else if (s == "add")
    r = ScatterReduction::add;
  else if (s == "mul")
    r = ScatterReduction::mul;
  else if (s == "max")
    r = ScatterReduction::max;
  else if (s == "min")
    r = ScatterReduction::min;
  else
    return false;
  return true;
}

}  // namespace memplan::runtime
