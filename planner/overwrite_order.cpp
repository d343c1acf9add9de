// Write-after-read order: readers of storage come before the op that rewrites it in place.
#include "planner/overwrite_order.hpp"

#include <algorithm>
#include <functional>
#include <queue>

#include "analysis/ops.hpp"
#include "planner/assign.hpp"

namespace memplan::planner {

using analysis::kNoTensor;
using analysis::TensorId;

std::vector<std::pair<OpId, OpId>> overwrite_readers(const Graph& g) {
  std::vector<std::pair<OpId, OpId>> out;
  std::vector<OpId> readers;
  for (OpId u = 0; u < g.ops.size(); ++u)
    for (TensorId t : g.ops[u].outputs) {
      if (t == kNoTensor) continue;
      const TensorId src = analysis::rewritten_source(g, t);
      if (src == kNoTensor) continue;
      readers.clear();
      std::vector<TensorId> storage{src};
      for (std::size_t k = 0; k < storage.size(); ++k)
        for (OpId c : g.tensors[storage[k]].consumers) {
          if (c == u) continue;
          readers.push_back(c);
          const analysis::Op& op = g.ops[c];
          if (is_view_op(op) && op.input(0) == storage[k] && op.output(0) != kNoTensor) storage.push_back(op.output(0));
        }
      std::sort(readers.begin(), readers.end());
      readers.erase(std::unique(readers.begin(), readers.end()), readers.end());
      for (OpId c : readers) out.emplace_back(c, u);
    }
  return out;
}

std::vector<OpId> order_reads_before_overwrites(const Graph& g, std::vector<OpId> order) {
  const std::size_t n = g.ops.size();
  std::vector<std::uint32_t> pos(n, 0);
  for (std::uint32_t s = 0; s < order.size(); ++s) pos[order[s]] = s;
  const auto war = overwrite_readers(g);
  if (std::all_of(war.begin(), war.end(), [&](const std::pair<OpId, OpId>& e) { return pos[e.first] < pos[e.second]; }))
    return order;

  // Kahn's algorithm over data and write-after-read edges, always taking the ready op that comes first in `order`:
  // where `order` holds, it is what comes out; a rewrite waits for its readers, and what depends on it for it.
  std::vector<std::vector<OpId>> succs(n);
  std::vector<std::uint32_t> waits(n, 0);
  auto edge = [&](OpId from, OpId to) {
    succs[from].push_back(to);
    ++waits[to];
  };
  for (OpId o = 0; o < n; ++o)
    for (TensorId t : g.ops[o].inputs)
      if (t != kNoTensor && g.tensors[t].producer != analysis::kNoOp) edge(g.tensors[t].producer, o);
  for (const auto& [reader, rewriter] : war) edge(reader, rewriter);
  std::priority_queue<std::uint32_t, std::vector<std::uint32_t>, std::greater<>> ready;  // positions in `order`
  for (OpId o = 0; o < n; ++o)
    if (waits[o] == 0) ready.push(pos[o]);
  std::vector<OpId> out;
  out.reserve(n);
  while (!ready.empty()) {
    const OpId o = order[ready.top()];
    ready.pop();
    out.push_back(o);
    for (OpId s : succs[o])
      if (--waits[s] == 0) ready.push(pos[s]);
  }
  if (out.size() != n) {
    for (const auto& [reader, rewriter] : war)
      if (waits[rewriter] > 0)
        fail(ErrorKind::invalid_graph, "op '" + g.ops[rewriter].name + "' rewrites storage in place that op '" +
                                           g.ops[reader].name +
                                           "' reads, and no order runs the read first (it depends on the rewrite)");
    fail(ErrorKind::invalid_graph, "no order of the ops puts every read before the in-place rewrite of its storage");
  }
  return out;
}

}  // namespace memplan::planner
