// Graph edits shared by the parallel rewrites: collective ops, new tensors like old ones, ops inserted in order.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "analysis/autodiff.hpp"
#include "analysis/graph.hpp"
#include "analysis/ops.hpp"

namespace memplan::planner::parallel_edit {

inline analysis::Op collective(std::string name, std::string_view type, analysis::Phase phase, std::vector<TensorId> in,
                               std::vector<TensorId> out, int ranks) {
  analysis::Op op;
  op.name = std::move(name);
  op.type = type;
  op.domain = analysis::kMemplanDomain;
  op.inputs = std::move(in);
  op.outputs = std::move(out);
  op.phase = phase;
  op.attrs["ranks"] = analysis::autodiff::attr_i(ranks);
  return op;
}

// A new tensor with `of`'s dtype and dims, named after it (made unique).
inline TensorId add_like(analysis::Graph& g, TensorId of, const std::string& suffix, analysis::TensorRole role) {
  analysis::Tensor t;
  t.name = analysis::autodiff::unique_name(g, g.tensors[of].name + suffix);
  t.dtype = g.tensors[of].dtype;
  t.dims = g.tensors[of].dims;
  t.rank_known = true;
  t.role = role;
  return g.add_tensor(std::move(t));
}

// Ops to insert before each position of the op order (index ops.size(): at the end), then the new order.
struct Insertions {
  std::vector<std::vector<analysis::Op>> before;
  explicit Insertions(std::size_t n) : before(n + 1) {}
  void apply(analysis::Graph& g) {
    std::vector<analysis::Op> ops;
    for (std::size_t i = 0; i <= g.ops.size(); ++i) {
      for (analysis::Op& o : before[i]) ops.push_back(std::move(o));
      if (i < g.ops.size()) ops.push_back(std::move(g.ops[i]));
    }
    g.ops = std::move(ops);
    g.relink();
  }
};

// Makes `readers` read `to` where they read `from`.
inline void redirect(analysis::Graph& g, TensorId from, TensorId to, const std::vector<OpId>& readers) {
  for (OpId o : readers)
    for (TensorId& t : g.ops[o].inputs)
      if (t == from) t = to;
}

}  // namespace memplan::planner::parallel_edit
