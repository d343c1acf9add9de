// Matching helpers shared by the norm and GELU pattern passes: producers, sole readers, closed groups.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/graph.hpp"
#include "planner/fusion.hpp"

namespace memplan::planner::norm_match {

using analysis::Graph;
using analysis::kNoOp;
using analysis::kNoTensor;
using analysis::Op;
using analysis::OpId;
using analysis::TensorId;

// The integer values of input `i` of `op` (a constant; empty when absent) or of attribute `attr` (opsets that
// kept it an attribute); nullopt when computed at run time.
std::optional<std::vector<std::int64_t>> ints_of(const Graph& g, const Op& op, std::size_t i, const char* attr);
// True when op `o` is the default-domain op `type`.
bool is(const Graph& g, OpId o, std::string_view type);
// The producer of `t` when it is a default-domain `type`, else kNoOp.
OpId made_by(const Graph& g, TensorId t, std::string_view type);
// The one op reading `t` when it is a default-domain `type`, `t` has no other reader and is no graph output.
OpId sole_reader(const Graph& g, TensorId t, std::string_view type);
// The input of binary op `o` that is not `t` (kNoTensor when `t` is neither input).
TensorId other_input(const Op& op, TensorId t);
// The input of binary op `o` that is a scalar constant near `v` (relative `tol`), and the other one.
bool split_constant(const Graph& g, const Op& op, double v, double tol, TensorId& rest);

// Factors of a product rooted at `t`: Mul ops whose result is read only by the Mul above them are opened.
// At most `max_muls` Mul ops are opened; `muls` receives them.
std::vector<TensorId> product_factors(const Graph& g, TensorId t, int max_muls, std::vector<OpId>& muls);

// Axes of a ReduceMean (attribute before opset 18, constant input from 18) as positive sorted values,
// when keepdims is 1 and they are known; nullopt otherwise.
std::optional<std::vector<std::int64_t>> reduce_mean_axes(const Graph& g, OpId o);
// The first axis when `axes` are exactly the trailing axes of a rank-`rank` tensor, else nullopt.
std::optional<std::int64_t> trailing_axis(const std::vector<std::int64_t>& axes, std::size_t rank);
// True when `w` (a scale or bias) broadcasts to x's dims from `axis` on without growing them: its dims,
// leading ones stripped, are a suffix-aligned copy of those dims.
bool fits_normalized(const Graph& g, TensorId w, TensorId x, std::int64_t axis);

// A matched group: the ops it replaces and the tensor the fused op writes (the last member's output).
struct Match {
  std::set<OpId> members;
  TensorId result = kNoTensor;
};
// True when every output of every member other than `result` is read only by members and is no graph
// output, and no member was claimed by an earlier match.
bool closed(const Graph& g, const Match& m, const std::vector<bool>& claimed);
// Members' names in op order (the fused op's `fused_ops` attribute and FusedGroup::members).
std::vector<std::string> member_names(const Graph& g, const Match& m);
// Bytes of the members' outputs other than the result (the intermediates the fused op never writes).
std::uint64_t intermediate_bytes(const Graph& g, const Match& m);
// True when x and y have the same known shape and dtype (a norm's or GELU's input and result).
bool same_shape(const Graph& g, TensorId x, TensorId y);

// What a matcher found at one op: the group, the fused op (its outputs are set from the group's result)
// and the group kind.
struct Found {
  Match m;
  Op op;
  std::string kind;
};
using Matcher = std::optional<Found> (*)(const Graph& g, OpId anchor);
// Tries `match` at every op in order; a closed group whose ops no earlier group took is replaced by its op.
FusionResult fuse_matches(const Graph& g, Matcher match);

}  // namespace memplan::planner::norm_match
