// Replacing subgraphs: collect removals and new ops against a source graph, then build the rewritten graph once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analysis/graph.hpp"

namespace memplan::planner {

// Pattern passes (attention, norms, layouts) record what they replace here and call apply() once.
// Tensor ids of the source stay valid while rewriting; add_tensor returns ids after the source's.
class GraphRewrite {
 public:
  explicit GraphRewrite(const analysis::Graph& g);

  const analysis::Graph& source() const noexcept { return src_; }
  // A tensor of the rewritten graph (its name made unique when taken); an id >= source().tensors.size().
  analysis::TensorId add_tensor(analysis::Tensor t);
  const analysis::Tensor& tensor(analysis::TensorId t) const;  // source or added
  // Drops a source op. Its outputs must end up unread, or be produced by an added op (give an added op
  // the old output id, never a redirect, where the output is a graph output: its name is the user's).
  void remove(analysis::OpId op);
  bool removed(analysis::OpId op) const { return op < removed_.size() && removed_[op]; }
  // Adds an op; `near` (a source op) says where it goes in the op order (a stable topological sort
  // follows, so the hint only breaks ties).
  void add(analysis::Op op, analysis::OpId near);
  // Makes every reader of `from` (kept source ops, added ops, graph outputs) read `to` instead.
  void replace_uses(analysis::TensorId from, analysis::TensorId to);

  // The rewritten graph: removed ops gone, added ops placed, tensors nothing reads or writes dropped
  // (graph inputs and outputs kept), ids compacted in order, ops in a stable topological order.
  // ErrorKind::invalid_graph when a kept op reads a tensor whose producer was removed.
  analysis::Graph apply() const;

 private:
  const analysis::Graph& src_;
  std::vector<analysis::Tensor> added_tensors_;
  std::vector<bool> removed_;
  std::vector<std::pair<analysis::Op, analysis::OpId>> added_ops_;
  std::vector<analysis::TensorId> redirect_;  // per tensor id (source and added): the tensor read instead
};

// A new activation tensor of `rw`'s graph with a concrete shape, named after `base`.
analysis::TensorId new_activation(GraphRewrite& rw, const std::string& base, analysis::DType dt,
                                  const std::vector<std::int64_t>& shape);
// A new constant (role weight, its value known) of `rw`'s graph, named after `base`.
analysis::TensorId new_constant(GraphRewrite& rw, const std::string& base, analysis::TensorData value);

// True when `t` has a known constant value and every element equals `v` within `tol` (relative).
bool is_scalar_constant(const analysis::Graph& g, analysis::TensorId t, double v, double tol = 1e-6);
// The constant's single value (any element count when all elements are equal), or nullopt.
std::optional<double> scalar_constant(const analysis::Graph& g, analysis::TensorId t);

}  // namespace memplan::planner
