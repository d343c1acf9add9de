// Plan helpers shared by the planner stages.
#include "planner/plan.hpp"

namespace memplan::planner {

const char* alias_kind_name(AliasKind k) noexcept { return k == AliasKind::view ? "view" : "inplace"; }

}  // namespace memplan::planner
