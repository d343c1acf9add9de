// Plan verifier: recomputes lifetimes, proves alias claims, sweeps steps for overlapping live bytes.
#include "planner/verify.hpp"

#include <algorithm>
#include <numeric>
#include <set>
#include <tuple>
#include <unordered_map>

#include "analysis/ops.hpp"
#include "planner/assign.hpp"
#include "planner/concat_in_place.hpp"

namespace memplan::planner {
namespace {

using analysis::Op;
using analysis::Tensor;
constexpr std::uint32_t kUnscheduled = UINT32_MAX;
constexpr std::size_t kMaxProblems = 64;

// A value: tensors proven to be views of one another, hence one byte range over one contiguous lifetime.
struct Value {
  std::uint64_t offset = UINT64_MAX, bytes = 0;
  std::uint32_t first = UINT32_MAX, last = 0;
};

class Checker {
 public:
  Checker(const Graph& g, const Plan& p) : g_(g), p_(p) {}

  VerifyReport run() {
    if (!check_schedule() || !check_shapes()) return std::move(r_);
    lifetimes();
    check_aliases();
    check_reads_before_overwrites();
    check_tensors();
    check_buffers();
    check_scratch();
    sweep();
    return std::move(r_);
  }

 private:
  void problem(const std::string& what) {
    r_.valid = false;
    if (r_.problems.size() < kMaxProblems) r_.problems.push_back(what);
  }
  // Value ids past the tensors are scratch regions (plan.scratch[id - tensors]).
  std::string tname(TensorId t) const {
    if (t < g_.tensors.size()) return g_.tensors[t].name;
    return "scratch of op " + g_.ops[p_.scratch[t - g_.tensors.size()].op].name;
  }
  bool has_offset(TensorId t) const { return p_.tensor_offset[t] != kNotInArena; }

  bool check_schedule() {
    if (p_.schedule.size() != g_.ops.size()) {
      problem("the schedule has " + std::to_string(p_.schedule.size()) + " steps for " + std::to_string(g_.ops.size()) + " ops");
      return false;
    }
    step_.assign(g_.ops.size(), kUnscheduled);
    for (std::uint32_t s = 0; s < p_.schedule.size(); ++s) {
      const OpId id = p_.schedule[s];
      if (id >= g_.ops.size() || step_[id] != kUnscheduled) {
        problem("step " + std::to_string(s) + " names op id " + std::to_string(id) + ", unknown or scheduled twice");
        return false;
      }
      step_[id] = s;
    }
    for (std::uint32_t s = 0; s < p_.schedule.size(); ++s)
      for (TensorId t : g_.ops[p_.schedule[s]].inputs)
        if (t != analysis::kNoTensor && g_.tensors[t].producer != analysis::kNoOp && step_[g_.tensors[t].producer] >= s) {
          problem("op '" + g_.ops[p_.schedule[s]].name + "' at step " + std::to_string(s) + " reads '" + tname(t) + "' before it is made");
          return false;
        }
    return true;
  }

  bool check_shapes() {
    const std::size_t nt = g_.tensors.size();
    if (p_.tensor_offset.size() != nt || p_.tensor_buffer.size() != nt) {
      problem("the plan's per-tensor tables do not have the graph's " + std::to_string(nt) + " entries");
      return false;
    }
    if (!p_.model_fingerprint.empty() && p_.model_fingerprint != g_.fingerprint())
      problem("the plan is for graph fingerprint " + p_.model_fingerprint + ", not " + g_.fingerprint());
    if (p_.alignment == 0) {
      problem("alignment 0");
      return false;
    }
    return true;
  }

  // A tensor needs arena bytes when an op makes it, it is an activation or gradient kept on the device, and non-empty.
  void lifetimes() {
    const std::size_t nt = g_.tensors.size();
    needs_.assign(nt, false);
    bytes_.assign(nt, 0);
    life_.assign(nt, analysis::Interval{});
    const auto last_step = static_cast<std::uint32_t>(p_.schedule.size() - (p_.schedule.empty() ? 0 : 1));
    for (TensorId t = 0; t < nt; ++t) {
      const Tensor& x = g_.tensors[t];
      const bool device_result = x.role == analysis::TensorRole::activation || x.role == analysis::TensorRole::gradient;
      if (x.producer == analysis::kNoOp || !device_result || x.on_host) continue;
      if (const TensorId src = analysis::rewritten_source(g_, t); src != analysis::kNoTensor && !needs_[src]) continue;
      if (!x.shape_known()) {
        problem("tensor '" + x.name + "' has no known shape, so no size to check");
        continue;
      }
      bytes_[t] = x.bytes();
      if (bytes_[t] == 0) continue;
      needs_[t] = true;
      analysis::Interval iv{step_[x.producer], step_[x.producer]};
      for (OpId c : x.consumers) iv.last = std::max(iv.last, step_[c]);
      if (x.is_graph_output || x.role == analysis::TensorRole::gradient) iv.last = last_step;
      life_[t] = iv;
    }
  }

  TensorId root(TensorId t) {
    while (parent_[t] != t) t = parent_[t] = parent_[parent_[t]];
    return t;
  }

  bool claim_ids_ok(const Alias& a, std::size_t i) {
    if (a.tensor < g_.tensors.size() && a.source < g_.tensors.size() && a.op < g_.ops.size()) return true;
    problem("alias " + std::to_string(i) + " names an unknown tensor or op");
    return false;
  }

  void check_view(const Alias& a) {
    const Op& op = g_.ops[a.op];
    const std::string claim = "view alias '" + tname(a.tensor) + "' of '" + tname(a.source) + "' by op '" + op.name + "'";
    if (!is_view_op(op)) return problem(claim + ": " + op.type + " is not a view op");
    if (op.input(0) != a.source || op.output(0) != a.tensor) return problem(claim + ": the op does not read the source and write the tensor");
    const Tensor& src = g_.tensors[a.source];
    if (!src.shape_known() || src.bytes() != g_.tensors[a.tensor].bytes()) return problem(claim + ": sizes differ");
    if (p_.tensor_offset[a.tensor] != p_.tensor_offset[a.source]) return problem(claim + ": the two are at different offsets");
    if (has_offset(a.source)) {
      parent_[root(a.tensor)] = root(a.source);
    } else if (needs_[a.source] && !outside_[a.source]) {
      problem(claim + ": the source needs arena memory but has none");
    } else {
      outside_[a.tensor] = true;  // aliases memory outside the arena (a graph input, a weight)
    }
  }

  // An update of storage outside the arena that the op's record declares: the tensor is its source's bytes.
  void check_rewrite(const Alias& a, const std::string& claim) {
    const Tensor &x = g_.tensors[a.source], &y = g_.tensors[a.tensor];
    if (has_offset(a.tensor) || has_offset(a.source)) return problem(claim + ": an update outside the arena has an arena offset");
    if (x.dtype != y.dtype || !x.shape_known() || !y.shape_known() || x.bytes() != y.bytes())
      return problem(claim + ": the update and its storage differ in dtype or size");
    outside_[a.tensor] = true;
  }

  void check_inplace(const Alias& a) {
    const Op& op = g_.ops[a.op];
    const std::string claim = "in-place alias '" + tname(a.tensor) + "' over '" + tname(a.source) + "' by op '" + op.name + "'";
    if (analysis::rewritten_source(g_, a.tensor) == a.source && !needs_[a.tensor] && g_.tensors[a.tensor].producer == a.op)
      return check_rewrite(a, claim);
    const bool reads = std::find(op.inputs.begin(), op.inputs.end(), a.source) != op.inputs.end();
    const bool writes = std::find(op.outputs.begin(), op.outputs.end(), a.tensor) != op.outputs.end();
    if (!reads || !writes) return problem(claim + ": the op does not read the source and write the tensor");
    if (!needs_[a.source] || !needs_[a.tensor] || g_.tensors[a.source].is_graph_output)
      return problem(claim + ": only an activation in the arena that is no graph output may be overwritten");
    if (life_[a.source].last != step_[a.op]) return problem(claim + ": the source is still used after the op");
    if (bytes_[a.source] != bytes_[a.tensor]) return problem(claim + ": sizes differ");
    if (p_.tensor_offset[a.tensor] != p_.tensor_offset[a.source]) return problem(claim + ": the two are at different offsets");
    handovers_.emplace_back(a.source, a.tensor, step_[a.op]);
  }

  // A Concat's slots and each input's first position and count, worked out once per op: a Concat of k inputs has up to
  // k slice aliases, and looking each up in the op's inputs was quadratic in k.
  struct ConcatOp {
    std::optional<std::vector<std::uint64_t>> offsets;
    std::unordered_map<TensorId, std::pair<std::size_t, std::size_t>> position;
  };
  const ConcatOp& concat_op(OpId id) {
    auto [it, fresh] = concat_ops_.try_emplace(id);
    if (fresh) {
      const Op& op = g_.ops[id];
      it->second.offsets = concat_input_offsets(g_, op);
      for (std::size_t i = 0; i < op.inputs.size(); ++i) ++it->second.position.try_emplace(op.inputs[i], i, 0).first->second.second;
    }
    return it->second;
  }

  // A slice alias: an input of the Concat at its slot of the output `source`, or the Concat's output over inputs
  // already in order inside `source`'s bytes. Either way one value with `source` from here on (one rectangle).
  void check_slice(const Alias& a) {
    const Op& op = g_.ops[a.op];
    const std::string claim = "slice alias '" + tname(a.tensor) + "' at byte " + std::to_string(a.offset) + " of '" + tname(a.source) + "' by op '" + op.name + "'";
    const ConcatOp& c = concat_op(a.op);
    const auto& offsets = c.offsets;
    if (!offsets) return problem(claim + ": the op is no Concat of contiguous slices");
    if (!has_offset(a.tensor) || !has_offset(a.source) || !needs_[a.tensor] || !needs_[a.source])
      return problem(claim + ": both must be arena tensors");
    if (a.offset > bytes_[a.source] || bytes_[a.tensor] > bytes_[a.source] - a.offset) return problem(claim + ": the slice runs past its source");
    if (p_.tensor_offset[a.tensor] != p_.tensor_offset[a.source] + a.offset) return problem(claim + ": the offsets do not match");
    const std::uint64_t align = std::max<std::uint64_t>(1, std::min(p_.alignment, kSliceAlignment));
    if (p_.tensor_offset[a.tensor] % align != 0) return problem(claim + ": the slice is not " + std::to_string(align) + "-byte aligned");
    const auto pos = c.position.find(a.tensor);
    if (pos != c.position.end()) {  // an input written into its slot
      if (pos->second.second != 1 || op.output(0) != a.source)
        return problem(claim + ": the tensor is not one input of the op writing the source");
      if (a.offset != (*offsets)[pos->second.first]) return problem(claim + ": not the input's slot");
      const Tensor& x = g_.tensors[a.tensor];
      if (x.is_graph_output || x.role != analysis::TensorRole::activation) return problem(claim + ": a graph output or gradient is its own buffer");
      if (sliced_[a.tensor]) return problem(claim + ": the tensor is in two slots");
    } else if (op.output(0) == a.tensor) {  // the output over its inputs: the Concat copies nothing
      for (std::size_t i = 0; i < op.inputs.size(); ++i)
        if (!has_offset(op.inputs[i]) || p_.tensor_offset[op.inputs[i]] != p_.tensor_offset[a.tensor] + (*offsets)[i])
          return problem(claim + ": input '" + tname(op.inputs[i]) + "' does not lie at its slot");
    } else {
      return problem(claim + ": the op neither reads nor writes the tensor");
    }
    sliced_[a.tensor] = true;
    parent_[root(a.tensor)] = root(a.source);
  }

  void check_aliases() {
    sliced_.assign(g_.tensors.size(), false);
    parent_.resize(g_.tensors.size());
    std::iota(parent_.begin(), parent_.end(), TensorId{0});
    outside_.assign(g_.tensors.size(), false);
    // Views first, in schedule order, so a view of a view finds its source already settled.
    std::vector<std::size_t> order(p_.aliases.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::vector<std::uint32_t> key(p_.aliases.size(), kUnscheduled);
    for (std::size_t i = 0; i < p_.aliases.size(); ++i)
      if (claim_ids_ok(p_.aliases[i], i)) key[i] = step_[p_.aliases[i].op];
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return key[a] < key[b]; });
    for (std::size_t i : order) {
      if (key[i] == kUnscheduled) continue;
      const Alias& a = p_.aliases[i];
      if (a.kind == AliasKind::view) check_view(a);
      else if (a.kind == AliasKind::slice) check_slice(a);
      else check_inplace(a);
    }
  }

  // No op reads storage after another op overwrote it in place: an update the op's record declares (OpInfo::rewrites:
  // a weight, optimizer state, an accumulated gradient, in or outside the arena) or one of the plan's in-place aliases.
  // The storage is read through the plan's views of it too. (A recompute clone scheduled after an optimizer update
  // would read the updated weight.)
  void check_reads_before_overwrites() {
    const std::size_t nt = g_.tensors.size();
    std::vector<std::vector<TensorId>> views(nt);
    std::vector<TensorId> viewed(nt, analysis::kNoTensor);  // the tensor a view is of
    for (const Alias& a : p_.aliases)
      if (a.kind == AliasKind::view && a.tensor < nt && a.source < nt && a.tensor != a.source) {
        views[a.source].push_back(a.tensor);
        viewed[a.tensor] = a.source;
      }
    std::set<std::pair<TensorId, OpId>> overwrites;  // (storage, op overwriting it)
    for (TensorId t = 0; t < nt; ++t)
      if (g_.tensors[t].producer != analysis::kNoOp)
        if (const TensorId src = analysis::rewritten_source(g_, t); src != analysis::kNoTensor) overwrites.emplace(src, g_.tensors[t].producer);
    for (const Alias& a : p_.aliases)
      if (a.kind == AliasKind::inplace && a.source < nt && a.op < g_.ops.size()) overwrites.emplace(a.source, a.op);
    std::vector<std::uint32_t> seen(nt, 0);
    std::uint32_t stamp = 0;
    for (const auto& [src, u] : overwrites) {
      ++stamp;
      TensorId top = src;  // the storage is every view of the tensor the overwritten one is a view of
      for (std::size_t hops = 0; hops < nt && viewed[top] != analysis::kNoTensor; ++hops) top = viewed[top];
      std::vector<TensorId> storage{top};
      seen[top] = stamp;
      for (std::size_t k = 0; k < storage.size() && r_.problems.size() < kMaxProblems; ++k) {
        for (OpId c : g_.tensors[storage[k]].consumers)
          if (c != u && step_[c] > step_[u])
            problem("op '" + g_.ops[c].name + "' at step " + std::to_string(step_[c]) + " reads '" + tname(storage[k]) + "' after op '" +
                    g_.ops[u].name + "' overwrote " + (storage[k] == src ? "it" : "'" + tname(src) + "'") + " in place at step " +
                    std::to_string(step_[u]));
        for (TensorId v : views[storage[k]])
          if (seen[v] != stamp) {
            seen[v] = stamp;
            storage.push_back(v);
          }
      }
    }
  }

  void check_tensors() {
    std::vector<bool> group(g_.tensors.size(), false);  // per root: its value holds a slice
    for (TensorId t = 0; t < g_.tensors.size(); ++t)
      if (sliced_[t]) group[root(t)] = true;
    const std::uint64_t slice_align = std::max<std::uint64_t>(1, std::min(p_.alignment, kSliceAlignment));
    for (TensorId t = 0; t < g_.tensors.size(); ++t) {
      const TensorId src = g_.tensors[t].producer == analysis::kNoOp ? analysis::kNoTensor : analysis::rewritten_source(g_, t);
      if (src != analysis::kNoTensor && !needs_[t] && !outside_[t] && !g_.tensors[t].on_host)
        problem("tensor '" + tname(t) + "' rewrites '" + tname(src) + "' in place, but the plan has no in-place alias binding it there");
      const std::uint64_t off = p_.tensor_offset[t];
      if (off == kNotInArena) {
        if (needs_[t] && !outside_[t]) problem("tensor '" + tname(t) + "' needs " + std::to_string(bytes_[t]) + " arena bytes but has no offset");
        continue;
      }
      if (!needs_[t]) {
        problem("tensor '" + tname(t) + "' has an arena offset but does not live in the arena");
        continue;
      }
      const bool in_group = group[root(t)];
      if (off % (in_group ? slice_align : p_.alignment) != 0) problem("tensor '" + tname(t) + "' at offset " + std::to_string(off) + " is not " + std::to_string(p_.alignment) + "-byte aligned");
      if (off > p_.arena_bytes || bytes_[t] > p_.arena_bytes - off)
        problem("tensor '" + tname(t) + "' at [" + std::to_string(off) + ", +" + std::to_string(bytes_[t]) + ") runs past the " + std::to_string(p_.arena_bytes) + "-byte arena");
      r_.peak_bytes = std::max(r_.peak_bytes, off + std::min(bytes_[t], UINT64_MAX - off));
      const std::uint32_t b = p_.tensor_buffer[t];
      if (b >= p_.buffers.size()) {
        problem("tensor '" + tname(t) + "' names no buffer");
        continue;
      }
      const Buffer& buf = p_.buffers[b];
      const bool fits = in_group ? off >= buf.offset && off - buf.offset <= buf.size && bytes_[t] <= buf.size - (off - buf.offset)
                                 : buf.offset == off && buf.size >= bytes_[t];
      if (!fits) problem("tensor '" + tname(t) + "' does not fit its buffer " + std::to_string(b));
      if (buf.interval.first > life_[t].first || buf.interval.last < life_[t].last)
        problem("buffer " + std::to_string(b) + " does not live as long as its tensor '" + tname(t) + "'");
    }
  }

  void check_buffers() {
    for (std::uint32_t b = 0; b < p_.buffers.size(); ++b) {
      const Buffer& buf = p_.buffers[b];
      if (buf.offset % p_.alignment != 0 || buf.size % p_.alignment != 0) problem("buffer " + std::to_string(b) + " is not aligned");
      if (buf.offset > p_.arena_bytes || buf.size > p_.arena_bytes - buf.offset) problem("buffer " + std::to_string(b) + " runs past the arena");
      for (TensorId t : buf.tensors)
        if (t >= g_.tensors.size() || p_.tensor_buffer[t] != b) problem("buffer " + std::to_string(b) + " lists a tensor that is not bound to it");
    }
  }

  void check_scratch() {
    std::vector<bool> seen(g_.ops.size(), false);
    scratch_ok_.assign(p_.scratch.size(), false);
    for (std::size_t i = 0; i < p_.scratch.size(); ++i) {
      const Scratch& sc = p_.scratch[i];
      const std::string what = "scratch " + std::to_string(i);
      if (sc.op >= g_.ops.size()) {
        problem(what + " names op id " + std::to_string(sc.op) + ", which the graph does not have");
        continue;
      }
      if (seen[sc.op]) problem(what + ": op '" + g_.ops[sc.op].name + "' has two scratch regions");
      seen[sc.op] = true;
      if (sc.bytes == 0 || sc.offset % p_.alignment != 0 || sc.bytes % p_.alignment != 0) problem(what + " is empty or not aligned");
      if (sc.offset > p_.arena_bytes || sc.bytes > p_.arena_bytes - sc.offset) {
        problem(what + " of op '" + g_.ops[sc.op].name + "' runs past the arena");
        continue;
      }
      r_.peak_bytes = std::max(r_.peak_bytes, sc.offset + sc.bytes);
      scratch_ok_[i] = true;
    }
  }

  // Rectangles (value lifetime x byte range) in order of first step; live ones in a set by offset.
  // Invariant: while no problem is found, the live byte ranges are disjoint except for in-place pairs,
  // which have equal ranges; so a new range can only meet ranges starting inside it or the last one
  // starting before it.
  void sweep() {
    const std::size_t nt = g_.tensors.size();
    std::vector<Value> values(nt + p_.scratch.size());
    std::vector<TensorId> roots;
    for (TensorId t = 0; t < g_.tensors.size(); ++t) {
      if (!has_offset(t) || !needs_[t]) continue;
      const TensorId r = root(t);
      Value& v = values[r];
      if (v.first == UINT32_MAX) roots.push_back(r);
      // Views and in-place pairs share one range; a concat group's value spans all its slices (its outermost output).
      const std::uint64_t lo = p_.tensor_offset[t], hi = lo + std::min(bytes_[t], UINT64_MAX - lo);
      const std::uint64_t end = std::max(v.offset == UINT64_MAX ? 0 : v.offset + v.bytes, hi);
      v.offset = std::min(v.offset, lo);
      v.bytes = end - v.offset;
      v.first = std::min(v.first, life_[t].first);
      v.last = std::max(v.last, life_[t].last);
    }
    for (std::size_t i = 0; i < p_.scratch.size(); ++i) {  // a scratch region lives at its op's step alone
      if (!scratch_ok_[i]) continue;
      const auto id = static_cast<TensorId>(nt + i);
      const std::uint32_t s = step_[p_.scratch[i].op];
      values[id] = Value{p_.scratch[i].offset, p_.scratch[i].bytes, s, s};
      roots.push_back(id);
    }
    std::set<std::tuple<TensorId, TensorId, std::uint32_t>> handover;
    for (auto [s, t, k] : handovers_) handover.emplace(std::min(root(s), root(t)), std::max(root(s), root(t)), k);
    std::stable_sort(roots.begin(), roots.end(), [&](TensorId a, TensorId b) { return values[a].first < values[b].first; });
    std::set<std::pair<std::uint64_t, TensorId>> live;
    std::set<std::pair<std::uint32_t, TensorId>> by_last;
    auto meet = [&](TensorId a, TensorId b) {
      const Value &x = values[a], &y = values[b];
      if (x.offset >= y.offset + y.bytes || y.offset >= x.offset + x.bytes) return;
      const std::uint32_t from = std::max(x.first, y.first), to = std::min(x.last, y.last);
      if (from == to && handover.count({std::min(a, b), std::max(a, b), from})) return;
      problem("'" + tname(a) + "' [" + std::to_string(x.offset) + ", +" + std::to_string(x.bytes) + ") and '" + tname(b) + "' [" +
              std::to_string(y.offset) + ", +" + std::to_string(y.bytes) + ") overlap while both live at step " + std::to_string(from));
    };
    for (TensorId r : roots) {
      const Value& v = values[r];
      while (!by_last.empty() && by_last.begin()->first < v.first) {
        const TensorId dead = by_last.begin()->second;
        live.erase({values[dead].offset, dead});
        by_last.erase(by_last.begin());
      }
      auto it = live.lower_bound({v.offset, 0});
      if (it != live.begin()) meet(r, std::prev(it)->second);
      for (; it != live.end() && it->first < v.offset + v.bytes && r_.problems.size() < kMaxProblems; ++it) meet(r, it->second);
      live.emplace(v.offset, r);
      by_last.emplace(v.last, r);
    }
  }

  const Graph& g_;
  const Plan& p_;
  VerifyReport r_;
  std::vector<std::uint32_t> step_;
  std::vector<bool> needs_, outside_, scratch_ok_, sliced_;
  std::vector<std::uint64_t> bytes_;
  std::vector<analysis::Interval> life_;
  std::vector<TensorId> parent_;
  std::unordered_map<OpId, ConcatOp> concat_ops_;
  std::vector<std::tuple<TensorId, TensorId, std::uint32_t>> handovers_;
};

}  // namespace

VerifyReport verify_plan(const Graph& g, const Plan& p) { return Checker(g, p).run(); }

void require_valid(const Graph& g, const Plan& p) {
  const VerifyReport r = verify_plan(g, p);
  if (r.valid) return;
  std::string msg = "the plan for '" + g.name + "' failed verification:";
  for (std::size_t i = 0; i < r.problems.size() && i < 5; ++i) msg += "\n  " + r.problems[i];
  if (r.problems.size() > 5) msg += "\n  ... and " + std::to_string(r.problems.size() - 5) + " more";
  fail(ErrorKind::verification, msg);
}

}  // namespace memplan::planner
