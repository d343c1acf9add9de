// TEMPORARY stub of registered_kernels for the opscli branch until the runtime branch lands. DELETE.
#include <string_view>
#include <vector>

#include "runtime_allocator/zz_stub_kernels_opscli.hpp"

namespace memplan::runtime {
std::vector<analysis::OpTypeId> registered_kernels(std::string_view backend) {
  if (backend == "cpu") return {0, 1, 2, 3, 4, 5, 7};
#ifdef MEMPLAN_HAVE_CUDA
  if (backend == "cuda") return {0, 1, 2, 3, 5};
#endif
  return {};
}
}  // namespace memplan::runtime
