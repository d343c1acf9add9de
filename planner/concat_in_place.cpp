// Concat in place: which Concat inputs are written straight into their slot of the Concat's output.
#include "planner/concat_in_place.hpp"

#include <algorithm>

#include "analysis/ops.hpp"

namespace memplan::planner {
namespace {

using analysis::Op;

bool eligible_input(const Graph& g, const analysis::Liveness& l, TensorId x) {
  if (x == analysis::kNoTensor || !l.in_arena[x]) return false;
  const analysis::Tensor& t = g.tensors[x];
  if (t.producer == analysis::kNoOp || t.is_graph_output || t.on_host || t.role != analysis::TensorRole::activation) return false;
  if (t.bytes() == 0) return false;
  if (const analysis::OpInfo* info = analysis::op_registry().find(g.ops[t.producer]); info && info->is_view()) return false;
  return analysis::rewritten_source(g, x) == analysis::kNoTensor;
}

}  // namespace

std::optional<std::vector<std::uint64_t>> concat_input_offsets(const Graph& g, const Op& op) {
  if (op.type != "Concat" || op.outputs.empty() || op.output(0) == analysis::kNoTensor) return std::nullopt;
  const analysis::Tensor& y = g.tensors[op.output(0)];
  if (!y.shape_known()) return std::nullopt;
  const std::vector<std::int64_t> dims = y.shape();
  auto axis = op.attr_int("axis", 0);
  const auto rank = static_cast<std::int64_t>(dims.size());
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return std::nullopt;
  for (std::int64_t d = 0; d < axis; ++d)
    if (dims[static_cast<std::size_t>(d)] != 1) return std::nullopt;
  std::vector<std::uint64_t> offsets;
  std::uint64_t at = 0;
  for (TensorId x : op.inputs) {
    if (x == analysis::kNoTensor || !g.tensors[x].shape_known() || g.tensors[x].dtype != y.dtype) return std::nullopt;
    offsets.push_back(at);
    at += g.tensors[x].bytes();
  }
  if (at != y.bytes()) return std::nullopt;
  return offsets;
}

std::vector<ConcatSlot> concat_slots(const Graph& g, const analysis::Liveness& l, std::uint64_t alignment) {
  std::vector<ConcatSlot> slot(g.tensors.size());
  const std::uint64_t slice_align = std::max<std::uint64_t>(1, std::min(alignment, kSliceAlignment));
  for (auto step = l.schedule.size(); step-- > 0;) {
    const Op& op = g.ops[l.schedule[step]];
    if (op.type != "Concat") continue;
    const TensorId y = op.output(0);
    if (y == analysis::kNoTensor || !l.in_arena[y] || g.tensors[y].on_host) continue;
    const auto offsets = concat_input_offsets(g, op);
    if (!offsets || op.inputs.empty()) continue;
    // An input read twice has two slots: not in place. Sorted once (a count per input was quadratic in the
    // Concat's inputs: 100,000 of them took 15 s).
    std::vector<TensorId> sorted = op.inputs;
    std::sort(sorted.begin(), sorted.end());
    bool ok = std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
    for (std::size_t i = 0; i < op.inputs.size() && ok; ++i) {
      const TensorId x = op.inputs[i];
      ok = (*offsets)[i] % slice_align == 0 && eligible_input(g, l, x) && slot[x].whole == analysis::kNoTensor;
    }
    if (!ok) continue;
    TensorId root = y;
    std::uint64_t base = 0;
    while (slot[root].whole != analysis::kNoTensor) base += slot[root].offset, root = slot[root].whole;
    if (base % slice_align != 0) continue;
    for (std::size_t i = 0; i < op.inputs.size(); ++i) slot[op.inputs[i]] = ConcatSlot{y, (*offsets)[i], l.schedule[step]};
  }
  return slot;
}

}  // namespace memplan::planner
