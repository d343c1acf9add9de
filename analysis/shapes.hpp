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
//
// Details the other stages rely on:
// - Ops are visited in topological_order(g); the returned graph keeps the file's op order, minus folded ops.
// - Tensors that only folded ops touched (their constant inputs, intermediate shape values) are dropped,
//   so tensor ids of the result differ from `g`'s: look tensors up by name. Graph inputs and outputs stay.
// - Declared dims of op outputs (value_info, JSON) are hints only: every op output is re-inferred.
// - Integer/float values of up to max(fold_max_elements, 4096) elements are tracked while inferring even
//   when not folded, so Shape->Gather->Concat->Reshape chains resolve with folding turned down.
// - Only the shape-arithmetic ops have evaluators (Shape, Gather, Slice, Concat, Cast, Range, Where,
//   integer arithmetic, ...); an op without one (Erf, MatMul, ...) is never folded, whatever its inputs.
// - Ops of other domains (memplan's own) are not inferred: their outputs must already carry a shape.
Graph infer_shapes(const Graph& g, const ShapeOptions& opts);

}  // namespace memplan::analysis
