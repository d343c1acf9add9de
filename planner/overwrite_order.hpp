// Reads before in-place overwrites: which ops must run before an op rewrites storage in place, and an order that
// keeps them there.
#pragma once

#include <utility>
#include <vector>

#include "analysis/graph.hpp"

namespace memplan::planner {

using analysis::Graph;
using analysis::OpId;

// Write-after-read pairs (reader, rewriter): for each op that rewrites storage in place (OpInfo::rewrites: an
// optimizer update, an accumulation, an unscale), every other op reading that storage's value before the rewrite,
// directly or through views of it (view ops' outputs, transitively). In rewriter order, readers by id.
std::vector<std::pair<OpId, OpId>> overwrite_readers(const Graph& g);

// `order` (a topological order of every op of `g`) with each rewrite after every op reading what it overwrites,
// recompute clones and swap copies included. A rewrite that comes too early moves down to just after its last
// reader, the ops that depend on it with it; all other ops keep their order (`order` itself when it already holds).
// Errors: ErrorKind::invalid_graph when a reader depends on the rewrite itself (no such order exists).
std::vector<OpId> order_reads_before_overwrites(const Graph& g, std::vector<OpId> order);

}  // namespace memplan::planner
