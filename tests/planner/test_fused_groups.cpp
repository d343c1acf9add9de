// Tests of reading fused ops back from a graph: kinds stamped by fuse_graph, labels, groups by op id.
#include <doctest/doctest.h>

#include "bench/gen_graph.hpp"
#include "planner/fused_groups.hpp"

using namespace memplan;
using namespace memplan::planner;

namespace {

analysis::Graph sample_graph(std::uint32_t seed) {
  synthetic::GraphOptions o;
  o.ops = 80;
  o.seed = seed;
  return synthetic::random_graph(o);
}

}  // namespace

TEST_CASE("fused_groups_of lists exactly fuse_graph's groups, each op stamped with its kind") {
  std::size_t seen = 0;
  for (std::uint32_t seed = 1; seed <= 12; ++seed) {
    const auto g = sample_graph(seed);
    const FusionResult r = fuse_graph(g);
    const auto back = fused_groups_of(r.graph);
    REQUIRE(back.size() == r.groups.size());
    for (const auto& grp : r.groups) {
      REQUIRE(grp.op != analysis::kNoOp);
      const auto& op = r.graph.ops[grp.op];
      CHECK(is_fused(op));
      CHECK(op.attr_string(kFusedKindAttr, "") == grp.kind);
      CHECK(fused_kind(op) == grp.kind);
      CHECK(fused_label(op) == grp.kind + " \u00d7" + std::to_string(grp.members.size()));
      bool listed = false;
      for (const auto& b : back) listed = listed || (b.op == grp.op && b.kind == grp.kind && b.members == grp.members);
      CHECK(listed);
    }
    for (std::size_t i = 1; i < back.size(); ++i) CHECK(back[i - 1].op < back[i].op);
    seen += back.size();
  }
  CHECK(seen > 0);  // the random graphs do have elementwise chains to fuse
}

TEST_CASE("an op that replaced nothing is not fused and has no label - one without a kind falls back to its type") {
  analysis::Op op;
  op.name = "n";
  op.type = "FusedElementwise";
  CHECK_FALSE(is_fused(op));
  CHECK(fused_kind(op).empty());
  CHECK(fused_label(op).empty());
  analysis::Attribute members;
  members.kind = analysis::Attribute::Kind::strings;
  members.strings = {"a", "b", "c"};
  op.attrs[kFusedOpsAttr] = members;
  CHECK(is_fused(op));
  CHECK(fused_kind(op) == "FusedElementwise");
  CHECK(fused_label(op) == "FusedElementwise \u00d73");
}

TEST_CASE("with every pass off fuse_graph returns the graph unchanged") {
  const auto g = sample_graph(5);
  const FusionResult r = fuse_graph(g, FuseOptions::none());
  CHECK(r.groups.empty());
  CHECK(r.intermediate_bytes_removed == 0);
  CHECK(r.graph.fingerprint() == g.fingerprint());
  CHECK(fused_groups_of(r.graph).empty());
}
