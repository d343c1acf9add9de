// Synthetic training batches for `memplan train`: deterministic values of the global batch, each data-parallel rank
// fed its shard (rows [rank * b, (rank + 1) * b) of the leading axis), so that N ranks of batch b see exactly what one
// process of batch N * b sees.
#pragma once

#include <vector>

#include "analysis/graph.hpp"

namespace memplan::cli {

// One value per graph input of `g` (shaped for one rank's batch b = its inputs' leading axis): float inputs in
// [-1, 1), token ids (the indices of a Gather) below the gathered table's rows, cross-entropy labels below the class
// count, other integers below 1000, bools true. Value k of the global batch depends on k alone.
// ErrorKind::unsupported for an input of another dtype.
std::vector<analysis::TensorData> sharded_feed(const analysis::Graph& g, int rank);

// Sets the ratio of every training-mode Dropout of a forward graph to 0 (its constant input, or the Constant op
// making it): the step without dropout, which N ranks of batch b and one process of batch N * b compute alike (the
// masks are keyed by the element's index within a rank's shard). Returns how many Dropouts it changed;
// ErrorKind::unsupported naming a Dropout whose ratio is computed or absent (ONNX's default 0.5).
std::size_t disable_dropout(analysis::Graph& g);

}  // namespace memplan::cli
