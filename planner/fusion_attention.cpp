// Attention fusion: scaled-dot-product attention subgraphs and ONNX Attention -> memplan FusedAttention.
#include "planner/fusion.hpp"

namespace memplan::planner {

FusionResult fuse_attention(const analysis::Graph& g) {
  FusionResult r;
  r.graph = g;  // TODO(attention helper): the matcher
  return r;
}

}  // namespace memplan::planner
