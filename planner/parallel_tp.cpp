// Tensor parallelism (Megatron-LM): column/row-parallel weight matmul pairs found on the forward graph, sharded.
#include "planner/parallel.hpp"

namespace memplan::planner {

analysis::Graph shard_tensor_parallel(const analysis::Graph& forward, int tp, bool sequence_parallel, TensorParallelReport& report) {
  (void)forward;
  (void)sequence_parallel;
  (void)report;
  fail(ErrorKind::unsupported, "--tp " + std::to_string(tp) + ": tensor parallel planning is not built yet");
}

}  // namespace memplan::planner
