// Rematerialization as graph transforms: per-tensor keep / recompute / swap, applied to a training graph.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/graph.hpp"

namespace memplan::planner {

using analysis::Graph;
using analysis::OpId;
using analysis::TensorId;

// What happens to a forward activation between its forward and backward uses.
//   keep:      stays resident (and may serve as a source for recomputation)
//   recompute: dies at its last forward use; its backward readers get a clone rebuilt from kept tensors
//   swap:      copied to host after its forward uses, copied back before its first backward use
enum class RematAction : std::uint8_t { keep, recompute, swap };
const char* remat_action_name(RematAction a) noexcept;

// An arena tensor made by a forward op.
bool is_forward_activation(const Graph& g, TensorId t);

// Forward activations (arena tensors made by forward ops) that a backward, optimizer or recompute op
// reads, in id order. Graph outputs are left out: they live to the end of the step whatever we do.
std::vector<TensorId> find_saved_for_backward(const Graph& g);

// Per tensor of the graph. A forward activation serves as a recomputation source only when its action
// is keep; non-forward tensors (weights, graph inputs, constants, anything not in the arena) always do.
// Dropped tensors with the same `group` are rebuilt together, just before the first backward use of
// any of them (a checkpoint segment of Chen et al. 2016); their clones share one recomputation.
struct RematChoice {
  std::vector<RematAction> action;     // per tensor
  std::vector<std::uint32_t> group;    // per tensor, meaningful for recompute
  // Swap timing, per tensor, in steps of the ORIGINAL schedule: the SwapOut op goes right after step
  // `swap_out_after` (the transfer has finished by then) and the SwapIn op right before `swap_in_before`.
  std::vector<std::uint32_t> swap_out_after;
  std::vector<std::uint32_t> swap_in_before;

  // All forward activations recompute (not sources) except the saved ones, which keep.
  static RematChoice keep_all(const Graph& g);
};

struct RematTransform {
  Graph graph;                       // original ops and tensors keep their ids; new ones are appended
  std::vector<OpId> schedule;        // the original order with clones and swap ops inserted
  std::vector<OpId> origin;          // per op: the op it clones (itself for original and swap ops)
  std::size_t recompute_ops = 0;
  std::size_t swap_ops = 0;
  std::uint64_t swap_bytes = 0;      // bytes copied to host (each swapped tensor once)
};

// Applies `choice` to the training graph `g` scheduled by `schedule` (forward ops first, then the
// backward). Recompute clones are named "<name>@recompute<group>" (Phase::recompute); swaps add
// memplan ops SwapOut (X -> X@host, on_host) and SwapIn (X@host -> X@swapin), Phase::swap. Backward
// readers of a dropped tensor read its clone or its swapped-in copy, so the original dies at its last
// forward use. An op rewriting storage in place (an optimizer update) that `schedule` puts before a clone or swap
// copy reading that storage moves after it (order_reads_before_overwrites). Errors: ErrorKind::invalid_graph when a
// swap position is not between the forward use and the backward use.
RematTransform apply_remat(const Graph& g, const std::vector<OpId>& schedule, const RematChoice& choice);

// "16GiB", "512MB", "1e9", "300 KiB": bytes (KiB MiB GiB TiB are powers of 1024, KB MB GB TB of
// 1000, B or nothing bytes). Bad text is ErrorKind::usage.
std::uint64_t parse_size(std::string_view text);

// Sum of `op_flops` over the recompute clones of a transform (by origin).
double recompute_flops(const RematTransform& t, const std::vector<double>& op_flops);

}  // namespace memplan::planner
