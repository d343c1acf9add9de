// TEMPORARY: the declaration the runtime branch adds to backend.hpp. DELETE on merge.
#pragma once
#include <string_view>
#include <vector>

#include "analysis/ops.hpp"

namespace memplan::runtime {
std::vector<analysis::OpTypeId> registered_kernels(std::string_view backend);
}
