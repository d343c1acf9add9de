// Internal interface between the shape-inference driver (shapes.cpp) and the per-op-family rules.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "analysis/graph.hpp"

namespace memplan::analysis::shape_detail {

using Shape = std::vector<std::int64_t>;
using Values = std::vector<std::shared_ptr<const TensorData>>;  // per tensor: known value or null

// What one op sees while its outputs are inferred: its inputs' shapes, dtypes and known values; rules
// write the outputs' dtype and shape back into the working graph.
class OpContext {
 public:
  OpContext(Graph& g, OpId id, const Values& values) : g_(g), op_(g.ops[id]), values_(values) {}

  const Op& op() const noexcept { return op_; }
  std::int64_t opset() const noexcept { return g_.opset; }
  std::string where() const;  // "op 'name' (Type)"
  [[noreturn]] void fail_shape(const std::string& what) const;
  // A fact about this op's planned shapes the user should hear (the CLI prints the graph's notes as warnings).
  void note(const std::string& what) { g_.notes.push_back(where() + ": " + what); }

  std::size_t num_inputs() const noexcept { return op_.inputs.size(); }
  bool has_input(std::size_t i) const noexcept { return op_.input(i) != kNoTensor; }
  const Tensor& input(std::size_t i) const;  // a missing required input is ErrorKind::shape
  Shape in_shape(std::size_t i) const;
  std::size_t in_rank(std::size_t i) const { return input(i).dims.size(); }
  DType in_dtype(std::size_t i) const { return input(i).dtype; }
  // Inputs a and b (when present) share one ONNX type variable T: another dtype is ErrorKind::shape at
  // import, not a failure when the kernel runs.
  void require_same_dtype(std::size_t a, std::size_t b) const;
  // Input i holds indices (ONNX's Tind): int32 or int64.
  void require_index_dtype(std::size_t i) const;
  const TensorData* in_value(std::size_t i) const;  // null when absent or not known
  // The input's known integer values; ErrorKind::shape ("cannot be derived") when not known.
  std::vector<std::int64_t> in_ints(std::size_t i, const char* what) const;
  std::optional<std::vector<std::int64_t>> maybe_ints(std::size_t i) const;

  std::size_t num_outputs() const noexcept { return op_.outputs.size(); }
  bool has_output(std::size_t i) const noexcept { return op_.output(i) != kNoTensor; }
  void set_output(std::size_t i, DType dtype, const Shape& shape);  // absent optional outputs are skipped
  Shape out_shape(std::size_t i) const;
  DType out_dtype(std::size_t i) const;

  // A possibly negative axis made positive; out of [-rank, rank) is ErrorKind::shape.
  std::size_t axis(std::int64_t a, std::size_t rank, const char* what) const;
  // Checked dim arithmetic: overflow is ErrorKind::overflow naming the op.
  std::int64_t add(std::int64_t a, std::int64_t b) const;
  std::int64_t mul(std::int64_t a, std::int64_t b) const;
  std::int64_t product(const Shape& s, std::size_t from = 0, std::size_t to = SIZE_MAX) const;

 private:
  Graph& g_;
  const Op& op_;
  const Values& values_;
};

using ShapeRule = void (*)(OpContext&);
// Computes every output's value (entries for absent outputs may be empty); shapes are already set.
using EvalRule = std::vector<TensorData> (*)(const OpContext&);
struct OpRule {
  ShapeRule shape = nullptr;
  EvalRule eval = nullptr;
  bool eval_needs_data = true;  // false: the value follows from input shapes alone (Shape, Size)
};
using RuleTable = std::unordered_map<std::string, OpRule>;

void add_elementwise_rules(RuleTable& t);
void add_nn_rules(RuleTable& t);
void add_tensor_rules(RuleTable& t);
void add_reduce_rules(RuleTable& t);
void add_fold_rules(RuleTable& t);  // attaches evaluators to rules registered by the others
void add_fold_move_rules(RuleTable& t);  // evaluators of data-movement ops (called by add_fold_rules)
// Schema rules of memplan's own ops (shape_memplan.cpp), keyed by type: attributes, ranks and dtypes checked and the
// outputs computed, for the driver to compare with the shapes the op's builder declared.
void add_memplan_rules(RuleTable& t);
// Softmax, LogSoftmax and Hardmax of opset < 13 whose axis is not the last, on a shaped graph, rewritten as
// Flatten(axis) -> op(axis 1) -> Reshape (shape_legacy_softmax.cpp).
void lower_legacy_normalizers(Graph& g);
// GroupNorm as the TorchScript exporter writes it (Reshape, InstanceNormalization of ones and zeros, Reshape, Mul, Add
// of the per-channel affine parameters), on a shaped graph, made one GroupNormalization (shape_group_norm.cpp).
void raise_group_norms(Graph& g);

// Plans shared by a shape rule and its evaluator, so that both read the op the same way.
struct SlicePlan {
  Shape starts, steps, out;  // per input axis (axes not sliced: start 0, step 1, whole extent)
};
SlicePlan slice_plan(const OpContext& c);
std::vector<std::size_t> transpose_perm(const OpContext& c);
// Axes a Reduce op folds, in increasing order; `keepdims` as the op says. Empty with noop: identity.
std::vector<std::size_t> reduce_axes(const OpContext& c, bool& keepdims);

std::string shape_str(const Shape& s);
// Multidirectional (numpy) broadcast; a mismatch is ErrorKind::shape showing both shapes.
Shape broadcast(const OpContext& c, const Shape& a, const Shape& b);
// Row-major strides of `s` as seen from a broadcast output of rank `rank` (0 for broadcast dims).
std::vector<std::uint64_t> broadcast_strides(const Shape& s, std::size_t rank);
std::vector<std::uint64_t> strides_of(const Shape& s);

// Visits every index of `s` in row-major order: f(multi_index, flat_index).
template <typename F>
void for_each_index(const Shape& s, F&& f) {
  for (auto d : s)
    if (d == 0) return;
  std::vector<std::int64_t> idx(s.size(), 0);
  for (std::uint64_t flat = 0;; ++flat) {
    f(static_cast<const std::vector<std::int64_t>&>(idx), flat);
    std::size_t k = s.size();
    while (k > 0 && ++idx[k - 1] == s[k - 1]) idx[--k] = 0;
    if (k == 0) return;
  }
}

// Bytes per element of a dtype that constant folding can move (whole bytes only).
std::size_t element_bytes(const OpContext& c, DType t);

}  // namespace memplan::analysis::shape_detail
