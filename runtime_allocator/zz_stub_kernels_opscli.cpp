// TEMPORARY stub of registered_kernels for the opscli branch until the runtime branch defines it. DELETE.
#include <algorithm>
#include <string_view>
#include <vector>

#include "analysis/ops.hpp"
#include "runtime_allocator/backend.hpp"
#include "runtime_allocator/cpu_kernels.hpp"

namespace memplan::runtime {
std::vector<analysis::OpTypeId> registered_kernels(std::string_view backend) {
  std::vector<std::string> names;
  if (backend == "cpu") {
    cpu::KernelTable t;
    cpu::add_elementwise_kernels(t);
    cpu::add_linalg_kernels(t);
    cpu::add_conv_kernels(t);
    cpu::add_reduce_kernels(t);
    cpu::add_shape_kernels(t);
    cpu::add_training_kernels(t);
    for (const auto& [k, v] : t) names.push_back(k);
  }
#ifdef MEMPLAN_HAVE_CUDA
  if (backend == "cuda")
    names = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Softmax", "LogSoftmax",
             "LayerNormalization", "Transpose", "Split", "Concat", "Slice", "Expand", "Gather", "ReduceMean", "ReduceSum",
             "ReduceMax", "ReduceMin", "GlobalAveragePool", "GlobalMaxPool", "Where", "IsNaN", "Tile", "Shape",
             "ConstantOfShape", "ReduceProd", "ReduceSumSquare", "MatMul", "Gemm", "BatchNormalization", "Conv", "MaxPool",
             "AveragePool"};
#endif
  std::vector<analysis::OpTypeId> ids;
  for (const auto& n : names) {
    const auto colon = n.find("::");
    const auto* info = colon == std::string::npos ? analysis::op_registry().find("", n)
                                                  : analysis::op_registry().find(n.substr(0, colon), n.substr(colon + 2));
    if (info) ids.push_back(info->id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}
}  // namespace memplan::runtime
