// Layout fusion: a Transpose whose consumer can read it through strides plans no copy.
#include "planner/fusion.hpp"

namespace memplan::planner {

FusionResult fuse_layouts(const analysis::Graph& g) {
  FusionResult r;
  r.graph = g;  // TODO(layouts helper)
  return r;
}

}  // namespace memplan::planner
