// ONNX control flow (If, Loop, Scan) made ordinary ops: a branch inlined, a loop unrolled (internal to analysis).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "analysis/graph.hpp"

namespace memplan::analysis::control_flow {

using Values = std::vector<std::shared_ptr<const TensorData>>;  // per tensor: known value or null

// Unrolling stops here: a loop whose iterations would add more ops is refused (ErrorKind::unsupported).
inline constexpr std::uint64_t kMaxUnrolledOps = 100000;
// Shape inference expands at most this many control-flow ops (nested ones included) in one graph, and adds at
// most kMaxUnrolledOps ops in all (ErrorKind::unsupported beyond).
inline constexpr std::size_t kMaxExpansions = 1000;

// If, Loop and Scan of the default domain, and the recurrent LSTM, GRU and RNN (loops over time): ops that shape
// inference expands into ordinary ops before it goes on.
bool is_control_flow(const Op& op);
// LSTM, GRU or RNN of the default domain.
bool is_recurrent(const Op& op);

// What shape inference knows when it reaches control-flow op `o`: `shaped` is `base` (the graph before inference,
// the same op and tensor ids) with every tensor before `o` shaped, `values` the values it tracks.
struct Reached {
  const Graph& base;
  OpId o;
  const Graph& shaped;
  const Values& values;
};

// The If's condition when it is known at planning time (a constant, or folded from shapes).
std::optional<bool> if_condition(const Reached& r);

// `base` with If `o` replaced by the ops of one branch: names made unique under the If's name, reads of enclosing
// scopes resolved by name, the branch's outputs renamed to the If's outputs (an Identity where the branch passes a
// value through). The branch's own subgraphs come along, their reads of the branch renamed with it.
Graph inline_if(const Graph& base, OpId o, bool then_branch);

// `base` with Loop `o` unrolled: its trip count M and its condition must be known at planning time (M a constant or
// folded, the condition true and passed on unchanged by the body); the loop-carried values thread from one
// iteration to the next, the scan outputs are stacked with Unsqueeze and Concat. Anything else is
// ErrorKind::unsupported naming the node and what is not known.
Graph unroll_loop(const Reached& r);

// `base` with Scan `o` (opset 9 and later) unrolled over the length of its scan axis (known once shapes are):
// each iteration reads its slice with Gather, states thread through, scan outputs are stacked.
Graph unroll_scan(const Reached& r);

// `base` with recurrent op `o` (LSTM, GRU, RNN; every attribute of ONNX's but input_forget) unrolled over its
// sequence (X's shape known): per direction one MatMul for every step's input projection, then each step's
// recurrent MatMul and gates; Y, Y_h, Y_c stacked from the steps. sequence_lens is accepted only when known to be
// the full length; anything the unrolling cannot honour is ErrorKind::unsupported naming the node.
Graph unroll_recurrent(const Reached& r);

}  // namespace memplan::analysis::control_flow
