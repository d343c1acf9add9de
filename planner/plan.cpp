// Plan helpers shared by the planner stages.
#include "planner/plan.hpp"

namespace memplan::planner {

const char* alias_kind_name(AliasKind k) noexcept {
  switch (k) {
    case AliasKind::view: return "view";
    case AliasKind::inplace: return "inplace";
    case AliasKind::slice: return "slice";
  }
  return "view";
}

}  // namespace memplan::planner
