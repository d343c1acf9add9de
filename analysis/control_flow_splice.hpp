// Replacing one control-flow op by ordinary ops: subgraphs spliced in under fresh names (internal to analysis).
#pragma once

#include <map>
#include <string>
#include <unordered_set>
#include <vector>

#include "analysis/graph.hpp"

namespace memplan::analysis::control_flow {

// The subgraph attribute `key` of `op` (ErrorKind::invalid_graph naming the op when it has none).
const Graph& subgraph(const Op& op, const std::string& key);
// "op 'name' (type)", the way errors name an op.
std::string op_where(const Op& op);

// The ops that replace op `replaced` of a copy of `base`, collected in order, then put where the op was.
class Rewrite {
 public:
  Rewrite(const Graph& base, OpId replaced);

  const Graph& graph() const { return g_; }
  const Op& replaced() const { return g_.ops[replaced_]; }
  // A new activation tensor named after `want` (made unique).
  TensorId add_tensor(const std::string& want);
  // A new constant (role weight, with its value) named after `want`.
  TensorId add_constant(const std::string& want, TensorData value);
  // The op is named after the replaced op and `label` (its type when empty), made unique.
  void add_op(const std::string& type, std::vector<TensorId> inputs, std::vector<TensorId> outputs,
              std::map<std::string, Attribute> attrs = {}, const std::string& label = {});
  // Copies the ops of `body` in: its formal inputs read `bound` (one per input), its own tensors get names
  // `prefix` + their name (made unique), its reads of enclosing scopes find the tensors of those names.
  // Body output k becomes tensor targets[k] where that is given (renamed when the body produces it, else
  // through an Identity). Returns the tensor each body output is now.
  std::vector<TensorId> splice(const Graph& body, const std::vector<TensorId>& bound, const std::string& prefix,
                               const std::vector<TensorId>& targets);
  // Stacks `parts` along a new axis `axis` into `target` (Unsqueeze each, then Concat; in reverse order when asked).
  void stack(std::vector<TensorId> parts, std::int64_t axis, TensorId target, bool reverse);
  // Marks every op collected so far as lowered from an op of type `type` (Op::lowered_from).
  void mark_lowered_from(const std::string& type) {
    for (Op& op : ops_) op.lowered_from = type;
  }
  // The graph with the replaced op's place taken by the collected ops.
  Graph finish() &&;

 private:
  std::string fresh_tensor_name(const std::string& want) const;
  std::string fresh_op_name(const std::string& want);
  std::vector<TensorId> map_body_tensors(const Graph& body, const std::vector<TensorId>& bound, const std::string& prefix,
                                         const std::vector<TensorId>& targets);

  Graph g_;
  OpId replaced_;
  std::vector<Op> ops_;
  std::unordered_set<std::string> op_names_;
};

}  // namespace memplan::analysis::control_flow
