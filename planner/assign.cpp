// Arena assignment: buffers from view and in-place aliasing (one schedule pass), offsets from a packer.
#include "planner/assign.hpp"

#include <algorithm>
#include <array>
#include <numeric>
#include <set>
#include <string_view>

#include "analysis/ops.hpp"
#include "planner/concat_in_place.hpp"
#include "planner/pack.hpp"

namespace memplan::planner {
namespace {

using analysis::Op;
using analysis::Tensor;
constexpr std::uint32_t kNoBuffer = UINT32_MAX;

// Cast may overwrite an input of another dtype of the same width.
bool inplace_any_dtype(const Op& op) {
  const analysis::OpInfo* info = analysis::op_registry().find(op);
  return info && info->inplace_across_dtypes;
}

// A buffer under construction: every tensor bound to it and the union of their lifetimes.
struct Draft {
  std::uint64_t size = 0;
  Interval interval;
  std::vector<TensorId> tensors;
  bool holds_graph_output = false;
  TensorId group_root = analysis::kNoTensor;  // a concat-in-place group: the outermost Concat output
};

struct Aliasing {
  std::vector<std::uint32_t> buffer_of;  // per tensor
  std::vector<bool> outside;             // per tensor: a view of memory outside the arena
  std::vector<std::uint64_t> slice_offset;  // per tensor: bytes from its buffer's start (concat in place)
  std::vector<Draft> drafts;
  std::vector<Alias> aliases;
};

class AliasBuilder {
 public:
  AliasBuilder(const Graph& g, const analysis::Liveness& l, const AssignOptions& o) : g_(g), l_(l), o_(o) {
    a_.buffer_of.assign(g.tensors.size(), kNoBuffer);
    a_.outside.assign(g.tensors.size(), false);
    a_.slice_offset.assign(g.tensors.size(), 0);
    if (o.concat_in_place) slot_ = concat_slots(g, l, o.alignment);
  }

  Aliasing run() {
    for (std::uint32_t s = 0; s < l_.schedule.size(); ++s) {
      const OpId id = l_.schedule[s];
      const Op& op = g_.ops[id];
      const TensorId out = op.output(0);
      if (out != analysis::kNoTensor && l_.in_arena[out] && !slotted(out) && a_.buffer_of[out] == kNoBuffer) {
        if (!(o_.views && try_view(op, id, out)) && !(o_.concat_in_place && try_concat_over_inputs(op, id, out))) {
          if (o_.inplace) try_inplace(op, id, out, s);
        }
      }
      for (TensorId t : op.outputs)
        if (t != analysis::kNoTensor && l_.in_arena[t] && a_.buffer_of[t] == kNoBuffer && !a_.outside[t]) {
          if (slotted(t)) {
            bind_slot(t, s);
            continue;
          }
          a_.drafts.push_back(Draft{0, l_.interval[t], {}, false});
          bind(t, static_cast<std::uint32_t>(a_.drafts.size() - 1));
        }
    }
    return std::move(a_);
  }

 private:
  bool slotted(TensorId t) const { return !slot_.empty() && slot_[t].whole != analysis::kNoTensor; }

  // `t` goes into its group's buffer (made now, at step s, by the group's first producer) at its slot's offset.
  void bind_slot(TensorId t, std::uint32_t s) {
    TensorId root = t;
    std::uint64_t at = 0;
    while (slotted(root)) at += slot_[root].offset, root = slot_[root].whole;
    if (a_.buffer_of[root] == kNoBuffer) {
      a_.drafts.push_back(Draft{0, Interval{s, l_.interval[root].last}, {}, false, root});
      bind(root, static_cast<std::uint32_t>(a_.drafts.size() - 1));
    }
    bind(t, a_.buffer_of[root], at);
    a_.aliases.push_back(Alias{t, slot_[t].whole, AliasKind::slice, slot_[t].op, slot_[t].offset});
  }

  // A Concat whose inputs already lie in order, contiguous, inside one group buffer: its output is those bytes.
  bool try_concat_over_inputs(const Op& op, OpId id, TensorId out) {
    const auto offsets = concat_input_offsets(g_, op);
    if (!offsets || op.inputs.empty()) return false;
    const std::uint32_t b = a_.buffer_of[op.inputs[0]];
    if (b == kNoBuffer || a_.drafts[b].group_root == analysis::kNoTensor) return false;
    const std::uint64_t base = a_.slice_offset[op.inputs[0]];
    for (std::size_t i = 0; i < op.inputs.size(); ++i)
      if (a_.buffer_of[op.inputs[i]] != b || a_.slice_offset[op.inputs[i]] != base + (*offsets)[i]) return false;
    bind(out, b, base);
    a_.aliases.push_back(Alias{out, a_.drafts[b].group_root, AliasKind::slice, id, base});
    return true;
  }

  void bind(TensorId t, std::uint32_t b, std::uint64_t slice_offset = 0) {
    Draft& d = a_.drafts[b];
    a_.buffer_of[t] = b;
    a_.slice_offset[t] = slice_offset;
    d.tensors.push_back(t);
    d.interval.last = std::max(d.interval.last, l_.interval[t].last);
    d.size = std::max(d.size, align_up(slice_offset + g_.tensors[t].bytes(), o_.alignment));
    // Graph outputs and gradients are results of the step: never overwritten in place.
    d.holds_graph_output = d.holds_graph_output || g_.tensors[t].is_graph_output || g_.tensors[t].role == analysis::TensorRole::gradient;
  }

  bool try_view(const Op& op, OpId id, TensorId out) {
    const TensorId in = op.input(0);
    if (!is_view_op(op) || in == analysis::kNoTensor) return false;
    const Tensor& x = g_.tensors[in];
    if (!x.shape_known() || x.bytes() != g_.tensors[out].bytes()) return false;
    if (a_.buffer_of[in] != kNoBuffer) {
      bind(out, a_.buffer_of[in], a_.slice_offset[in]);
    } else if (a_.outside[in] || (!l_.in_arena[in] && !x.on_host)) {
      a_.outside[out] = true;
    } else {
      return false;
    }
    a_.aliases.push_back(Alias{out, in, AliasKind::view, id});
    return true;
  }

  void try_inplace(const Op& op, OpId id, TensorId out, std::uint32_t step) {
    const Tensor& y = g_.tensors[out];
    for (std::size_t pos : inplace_candidates(op)) {
      const TensorId in = op.input(pos);
      if (in == analysis::kNoTensor || a_.buffer_of[in] == kNoBuffer) continue;
      const Draft& d = a_.drafts[a_.buffer_of[in]];
      if (d.group_root != analysis::kNoTensor) continue;  // a concat group's bytes are written once
      const Tensor& x = g_.tensors[in];
      const bool same_type = x.dtype == y.dtype || (inplace_any_dtype(op) && analysis::dtype_bits(x.dtype) == analysis::dtype_bits(y.dtype));
      if (d.interval.last != step || d.holds_graph_output || !same_type || x.bytes() != y.bytes()) continue;
      bind(out, a_.buffer_of[in]);
      a_.aliases.push_back(Alias{out, in, AliasKind::inplace, id});
      return;
    }
  }

  const Graph& g_;
  const analysis::Liveness& l_;
  const AssignOptions& o_;
  Aliasing a_;
  std::vector<ConcatSlot> slot_;  // per tensor, empty without concat in place
};

Packing best_packing(const std::vector<PackItem>& items, std::uint32_t steps, const std::string& packer, std::string& chosen) {
  std::vector<std::string> names = packer == "best" ? packer_names() : std::vector<std::string>{packer};
  if (packer == "best" && overlapping_pairs(items) > kMaxPlacingPairs) names = {"sweep"};
  Packing best;
  for (const auto& name : names) {  // names are in name order: the first smallest wins ties
    Packing p = pack(name, items, steps);
    if (chosen.empty() || p.arena_bytes < best.arena_bytes) {
      best = std::move(p);
      chosen = name;
    }
  }
  return best;
}

// Moves each scratch region (items from `first_scratch` on, one step each, in step order) into the largest
// gap the other items leave at its step, grown to that gap up to `limit`: bytes the arena has free there
// cost nothing and let the backend choose a faster algorithm. A sweep over steps with the live items
// ordered by offset; it stops growing once it has visited kMaxGrowVisits live items (huge graphs).
void grow_scratch(std::vector<Scratch>& scratch, const std::vector<PackItem>& items, std::size_t first_scratch,
                  const std::vector<std::uint64_t>& offsets, std::uint64_t arena_bytes, std::uint64_t limit) {
  constexpr std::uint64_t kMaxGrowVisits = 50'000'000;
  std::vector<std::uint32_t> by_first(first_scratch);
  std::iota(by_first.begin(), by_first.end(), 0u);
  std::stable_sort(by_first.begin(), by_first.end(), [&](auto a, auto b) { return items[a].interval.first < items[b].interval.first; });
  std::set<std::pair<std::uint64_t, std::uint32_t>> live;     // (offset, item)
  std::set<std::pair<std::uint32_t, std::uint32_t>> by_last;  // (last step, item)
  std::size_t next = 0;
  std::uint64_t visits = 0;
  for (std::size_t i = 0; i < scratch.size() && visits < kMaxGrowVisits; ++i) {
    const std::uint32_t s = items[first_scratch + i].interval.first;
    for (; next < by_first.size() && items[by_first[next]].interval.first <= s; ++next) {
      const auto it = by_first[next];
      if (items[it].interval.last < s) continue;
      live.emplace(offsets[it], it);
      by_last.emplace(items[it].interval.last, it);
    }
    while (!by_last.empty() && by_last.begin()->first < s) {
      live.erase({offsets[by_last.begin()->second], by_last.begin()->second});
      by_last.erase(by_last.begin());
    }
    std::uint64_t cursor = 0, best_at = 0, best = 0;
    for (const auto& [off, it] : live) {
      if (off > cursor && off - cursor > best) best = off - cursor, best_at = cursor;
      cursor = std::max(cursor, off + items[it].size);
    }
    if (arena_bytes > cursor && arena_bytes - cursor > best) best = arena_bytes - cursor, best_at = cursor;
    visits += live.size() + 1;
    const std::uint64_t grown = std::min(best, limit);
    if (grown > scratch[i].bytes) scratch[i].offset = best_at, scratch[i].bytes = grown;
  }
}

}  // namespace

bool is_view_op(const Op& op) noexcept {
  const analysis::OpInfo* info = analysis::op_registry().find(op);
  return info && info->is_view();
}

std::vector<std::size_t> inplace_candidates(const Op& op) {
  const analysis::OpInfo* info = analysis::op_registry().find(op);
  if (!info) return {};
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < op.inputs.size(); ++i)
    if (info->inplace_input(op, i)) out.push_back(i);
  return out;
}

std::uint64_t scratch_request(const Graph& g, OpId id, std::uint64_t limit, const WorkspaceQuery& query) {
  const Op& op = g.ops[id];
  const analysis::OpInfo* info = analysis::op_registry().find(op);
  if (!info || !info->uses_workspace || limit == 0) return 0;
  if (op.type == analysis::memplan_ops::kLinearCrossEntropy) {
    // a chunk's float32 logits and their gradient: `chunk` rows of W's columns, twice (the limit does not cut them; no device query sizes them)
    const TensorId w = op.input(1);
    if (w == analysis::kNoTensor || !g.tensors[w].shape_known() || g.tensors[w].dims.size() != 2) return 0;
    const auto chunk = static_cast<std::uint64_t>(std::max<std::int64_t>(op.attr_int("chunk", 1), 1));
    const auto classes = analysis::memplan_ops::linear_cross_entropy_classes(g.tensors[w].shape(), op.attr_int("trans_b", 0));
    return checked_mul(checked_mul(chunk, static_cast<std::uint64_t>(classes), "scratch request"), 8, "scratch request");
  }
  if (query)
    if (const std::optional<std::uint64_t> asked = query(g, id)) return std::min(*asked, limit);
  // Conv: x -> y; ConvGradInput: dy -> dx; ConvGradWeight: (dy, x) -> dw. The activations are the
  // first input and, but for ConvGradWeight, the output; ConvGradWeight's second input is x.
  // Sized at 4 bytes an element at least, and a 16-bit (bf16/fp16) convolution at 16 bytes an element: cuDNN's
  // fast 16-bit algorithms want far more workspace than their activations (ResNet-18 bf16 b32 on an H100: 102 ms
  // a step with scratch of the activation's size, 68 ms at 4 bytes an element, 22.7 ms with 64 MiB for every
  // convolution, 18.5 ms at 16 bytes an element (at most the 64 MiB cap)).
  std::uint64_t act = 0;
  auto take = [&](TensorId t) {
    if (t == analysis::kNoTensor || !g.tensors[t].shape_known()) return;
    act = std::max({act, g.tensors[t].bytes(), checked_mul(g.tensors[t].element_count(), 4, "scratch request")});
  };
  take(op.input(0));
  if (op.type == "ConvGradWeight") take(op.input(1));
  else take(op.output(0));
  if (const TensorId x = op.input(0); x != analysis::kNoTensor && analysis::dtype_bits(g.tensors[x].dtype) == 16)
    act = std::max(act, checked_mul(act, 4, "scratch request"));
  return std::min({act, limit, kSureScratchCap});
}

Plan assign(const Graph& g, const analysis::Liveness& l, const AssignOptions& o) {
  if (o.alignment == 0) fail(ErrorKind::usage, "the arena alignment must be at least 1 byte");
  if (l.in_arena.size() != g.tensors.size() || l.schedule.size() != g.ops.size())
    fail(ErrorKind::invalid_graph, "the liveness was computed for another graph than '" + g.name + "'");
  const auto steps = static_cast<std::uint32_t>(l.schedule.size());
  std::vector<Scratch> scratch;  // in schedule order; item a.drafts.size() + i
  std::vector<PackItem> scratch_items;
  for (std::uint32_t s = 0; s < steps; ++s) {
    const std::uint64_t b = align_up(scratch_request(g, l.schedule[s], o.workspace_limit_bytes, o.workspace_query), o.alignment);
    if (b == 0) continue;
    scratch.push_back(Scratch{l.schedule[s], 0, b});
    scratch_items.push_back(PackItem{b, Interval{s, s}});
  }
  auto items_of = [&](const Aliasing& al) {
    std::vector<PackItem> out;
    out.reserve(al.drafts.size() + scratch_items.size());
    for (const auto& d : al.drafts) out.push_back(PackItem{d.size, d.interval});
    out.insert(out.end(), scratch_items.begin(), scratch_items.end());
    return out;
  };
  Aliasing a = AliasBuilder(g, l, o).run();
  std::vector<PackItem> items = items_of(a);
  // Concat in place keeps group buffers live from their first producer on: kept only where the aliased lower
  // bound is not higher for it (a graph-wide choice, made before packing).
  if (o.concat_in_place && std::any_of(a.aliases.begin(), a.aliases.end(), [](const Alias& x) { return x.kind == AliasKind::slice; })) {
    AssignOptions plain = o;
    plain.concat_in_place = false;
    Aliasing b = AliasBuilder(g, l, plain).run();
    std::vector<PackItem> b_items = items_of(b);
    if (max_live_bytes(b_items, steps) < max_live_bytes(items, steps)) a = std::move(b), items = std::move(b_items);
  }
  Plan p;
  const Packing greedy = best_packing(items, steps, o.packer, p.packer);
  const ExactPacking exact = exact_packing(items, steps, greedy, ExactPackOptions{o.exact_pack_seconds, o.exact_pack_max_items, o.exact_pack_nodes});
  const Packing& packing = exact.packing;
  p.arena_optimal = exact.optimal;
  p.arena_gap = exact.lower_bound == 0 ? 0.0 : static_cast<double>(packing.arena_bytes - exact.lower_bound) / static_cast<double>(exact.lower_bound);
  p.model_name = g.name;
  p.model_fingerprint = g.fingerprint();
  p.alignment = o.alignment;
  p.arena_bytes = packing.arena_bytes;
  p.aliased_lower_bound_bytes = max_live_bytes(items, steps);
  p.schedule = l.schedule;
  p.aliases = std::move(a.aliases);
  // Optimizer updates and gradient accumulation rewrite storage outside the arena in place: the result is its
  // source's bytes (the runtime binds it there), never a buffer of its own.
  for (OpId id : l.schedule)
    for (TensorId t : g.ops[id].outputs)
      if (t != analysis::kNoTensor && !l.in_arena[t])
        if (const TensorId src = analysis::rewritten_source(g, t); src != analysis::kNoTensor)
          p.aliases.push_back(Alias{t, src, AliasKind::inplace, id});

  std::vector<std::uint32_t> order(a.drafts.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t x, std::uint32_t y) {
    if (packing.offsets[x] != packing.offsets[y]) return packing.offsets[x] < packing.offsets[y];
    return a.drafts[x].interval.first < a.drafts[y].interval.first;
  });
  for (std::size_t i = 0; i < scratch.size(); ++i) scratch[i].offset = packing.offsets[a.drafts.size() + i];
  grow_scratch(scratch, items, a.drafts.size(), packing.offsets, packing.arena_bytes,
               o.workspace_limit_bytes / o.alignment * o.alignment);
  p.scratch = std::move(scratch);
  p.tensor_offset.assign(g.tensors.size(), kNotInArena);
  p.tensor_buffer.assign(g.tensors.size(), UINT32_MAX);
  for (std::uint32_t d : order) {
    Buffer b{packing.offsets[d], a.drafts[d].size, a.drafts[d].interval, std::move(a.drafts[d].tensors)};
    std::sort(b.tensors.begin(), b.tensors.end());
    for (TensorId t : b.tensors) {
      p.tensor_offset[t] = b.offset + a.slice_offset[t];
      p.tensor_buffer[t] = static_cast<std::uint32_t>(p.buffers.size());
    }
    p.buffers.push_back(std::move(b));
  }
  return p;
}

}  // namespace memplan::planner
