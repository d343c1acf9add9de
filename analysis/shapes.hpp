// Shape inference: bind symbolic dims, infer every tensor's dtype and shape, fold shape subgraphs.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "analysis/graph.hpp"

namespace memplan::analysis {

using DimBindings = std::map<std::string, std::int64_t>;

struct ShapeOptions {
  DimBindings dims;                      // --dim batch=32 --dim seq=128
  std::uint64_t fold_max_elements = 1u << 16;  // constants larger than this are computed at run time
};

// Returns a copy of `g` in which every tensor has a concrete dtype and shape. Ops whose inputs are all
// constant and whose outputs are small (shape arithmetic: Shape, Gather, Concat, Range, ...) are
// evaluated: their outputs become constants (role weight, with data, no producer) and the ops are
// removed. Errors name the problem: an unbound symbolic dim (ErrorKind::shape, naming the symbol and
// the input), an op that cannot be inferred (ErrorKind::shape, naming node and op type), an unknown
// op (ErrorKind::unsupported), a bound value that is negative or absurd (ErrorKind::usage).
Graph infer_shapes(const Graph& g, const ShapeOptions& opts);

}  // namespace memplan::analysis
