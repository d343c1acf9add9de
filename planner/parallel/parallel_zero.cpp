// Data parallelism with ZeRO stages 0-3: parameter units, collective ops inserted into a rank's training graph.
#include <algorithm>
#include <limits>

#include "analysis/autodiff.hpp"
#include "analysis/ops.hpp"
#include "planner/parallel/parallel.hpp"
#include "planner/parallel/parallel_edit.hpp"

namespace memplan::planner {

using analysis::Dim;
using analysis::Op;
using analysis::Phase;
using analysis::Tensor;
using analysis::TensorRole;
using analysis::TrainingGraph;
using parallel_edit::add_like;
using parallel_edit::collective;
using parallel_edit::Insertions;
using parallel_edit::redirect;

namespace {

constexpr std::size_t kNever = std::numeric_limits<std::size_t>::max();

// "transformer.h.3" of "transformer.h.3.attn.c_attn.weight" or "/transformer/h.3/attn/MatMul": the name up to
// its first all-digit component; "" when it has none.
std::string block_key(const std::string& name) {
  std::string key, part;
  auto flush = [&](bool& done) {
    if (part.empty()) return;
    key += (key.empty() ? "" : ".") + part;
    done = std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    part.clear();
  };
  bool done = false;
  for (char c : name) {
    if (c == '.' || c == '/' || c == ':') {
      flush(done);
      if (done) return key;
    } else {
      part += c;
    }
  }
  flush(done);
  return done ? key : std::string();
}

std::int64_t shard_elements(const Tensor& t, int n) {
  const auto e = static_cast<std::int64_t>(t.element_count());
  return (e + n - 1) / n;
}

// A tensor like `of` holding 1/n of its elements, flat (padded up as FSDP's flat parameters are).
TensorId add_shard(analysis::Graph& g, TensorId of, const std::string& suffix, TensorRole role, int n) {
  Tensor t;
  t.name = g.tensors[of].name + suffix;
  for (int k = 1; g.find(t.name) != analysis::kNoTensor; ++k) t.name = g.tensors[of].name + suffix + "#" + std::to_string(k);
  t.dtype = g.tensors[of].dtype;
  t.dims = {Dim::of(shard_elements(g.tensors[of], n))};
  t.rank_known = true;
  t.role = role;
  return g.add_tensor(std::move(t));
}

void make_shard(Tensor& t, int n) { t.dims = {Dim::of(shard_elements(t, n))}; }

}  // namespace

std::vector<ParameterUnit> parameter_units(const TrainingGraph& tg) {
  const analysis::Graph& g = tg.graph;
  struct Entry {
    std::size_t first_use;
    std::size_t param;
    std::string key;
  };
  std::vector<Entry> entries;
  for (std::size_t k = 0; k < tg.param_grads.size(); ++k) {
    const TensorId w = tg.param_grads[k].first;
    std::size_t first = kNever;
    for (OpId o : g.tensors[w].consumers)
      if (g.ops[o].phase == Phase::forward) first = std::min<std::size_t>(first, o);
    std::string key = block_key(g.tensors[w].name);
    if (key.empty() && first != kNever) key = block_key(g.ops[first].name);
    entries.push_back({first, k, key});
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.first_use < b.first_use; });
  std::vector<ParameterUnit> units;
  std::string last = "\x01";
  for (const Entry& e : entries) {
    if (units.empty() || e.key != last)
      units.push_back({e.key.empty() ? "unit" + std::to_string(units.size()) : e.key, {}, !e.key.empty()});
    units.back().params.push_back(e.param);
    last = e.key;
  }
  return units;
}

CommunicationBytes& CommunicationBytes::operator+=(const CommunicationBytes& o) noexcept {
  all_reduce += o.all_reduce;
  reduce_scatter += o.reduce_scatter;
  all_gather += o.all_gather;
  send_recv += o.send_recv;
  return *this;
}

std::uint64_t ring_all_reduce_bytes(std::uint64_t bytes, int ranks) noexcept {
  return ranks <= 1 ? 0 : 2 * ring_shard_bytes(bytes, ranks);
}

std::uint64_t ring_shard_bytes(std::uint64_t bytes, int ranks) noexcept {
  if (ranks <= 1) return 0;
  const auto n = static_cast<std::uint64_t>(ranks);
  return bytes / n * (n - 1) + bytes % n * (n - 1) / n;
}

double communication_seconds(const CommunicationBytes& c, const analysis::DeviceProfile& p) {
  return p.interconnect_bytes_per_s > 0 ? static_cast<double>(c.total()) / p.interconnect_bytes_per_s : 0.0;
}

namespace {

// Optimizer state: 1/dp of every per-weight tensor (stage >= 1); the update op reads the shards.
void shard_optimizer_state(TrainingGraph& tg, int dp, int stage, ZeroSharding& z) {
  analysis::Graph& g = tg.graph;
  const auto sharded = [&](TensorId t) { return stage >= 1 && dp > 1 ? g.tensors[t].bytes() / g.tensors[t].element_count() * static_cast<std::uint64_t>(shard_elements(g.tensors[t], dp)) : g.tensors[t].bytes(); };
  for (TensorId s : tg.optimizer_state) {
    const bool per_weight = g.tensors[s].element_count() > 1;
    if (stage >= 1 && per_weight) {
      z.optimizer_state_bytes += sharded(s);
      for (OpId o : g.tensors[s].consumers)
        for (TensorId out : g.ops[o].outputs)
          if (out != analysis::kNoTensor && analysis::rewritten_source(g, out) == s) make_shard(g.tensors[out], dp);
      make_shard(g.tensors[s], dp);
    } else {
      z.optimizer_state_bytes += g.tensors[s].bytes();
    }
  }
}

// Gradient reduction: one collective per unit, after the unit's last gradient (stage 1: after backward); the
// optimizer then reads the reduced gradients (or their shards).
void reduce_gradients(TrainingGraph& tg, const std::vector<ParameterUnit>& units, int dp, int stage, Insertions& ins, ZeroSharding& z) {
  analysis::Graph& g = tg.graph;
  std::vector<std::size_t> made(tg.param_grads.size(), 0);
  std::size_t backward_end = 0;
  for (std::size_t k = 0; k < tg.param_grads.size(); ++k) {
    const OpId p = g.tensors[tg.param_grads[k].second].producer;
    made[k] = p == analysis::kNoOp ? 0 : p + 1;
    backward_end = std::max(backward_end, made[k]);
  }
  std::vector<std::pair<TensorId, TensorId>> grad_swap;  // (full gradient, what the optimizer reads)
  for (const ParameterUnit& u : units) {
    std::size_t at = 0;
    std::vector<TensorId> in, out;
    for (std::size_t k : u.params) {
      at = std::max(at, made[k]);
      const TensorId grad = tg.param_grads[k].second;
      in.push_back(grad);
      // A gradient lives to the end of the step; the unreduced one is an activation the collective consumes
      // (as add_unscale's scaled gradient): what the optimizer reads is the reduced one.
      if (analysis::rewritten_source(g, grad) == analysis::kNoTensor) g.tensors[grad].role = TensorRole::activation;
      const TensorId reduced = stage == 0 ? add_like(g, grad, "/allreduced", TensorRole::gradient)
                                          : add_shard(g, grad, "/shard", TensorRole::gradient, dp);
      out.push_back(reduced);
      grad_swap.emplace_back(grad, reduced);
      // ZeRO-1 holds the full gradients through the backward pass (reduced at its end); 2 and 3 keep the shards.
      z.gradient_bytes += stage <= 1 ? g.tensors[grad].bytes() : g.tensors[reduced].bytes();
    }
    if (stage == 1) at = backward_end;
    if (stage == 0) {
      // In place: one all-reduce per gradient of the bucket (the output overwrites its input).
      for (std::size_t i = 0; i < in.size(); ++i)
        ins.before[at].push_back(collective("dp/all_reduce/" + g.tensors[in[i]].name, analysis::memplan_ops::kAllReduce, Phase::backward,
                                            {in[i]}, {out[i]}, dp));
      for (TensorId t : in) z.communication.all_reduce += ring_all_reduce_bytes(g.tensors[t].bytes(), dp);
    } else {
      ins.before[at].push_back(collective("dp/reduce_scatter/" + u.name, analysis::memplan_ops::kReduceScatter, Phase::backward, in, out, dp));
      for (TensorId t : in) z.communication.reduce_scatter += ring_shard_bytes(g.tensors[t].bytes(), dp);
    }
  }
  for (const auto& [full, reduced] : grad_swap) {
    std::vector<OpId> readers;
    for (OpId o : g.tensors[full].consumers) readers.push_back(o);
    redirect(g, full, reduced, readers);
    for (auto& pg : tg.param_grads)
      if (pg.second == full) pg.second = reduced;
  }
}

// Stage 3 keeps only each weight's shard and gathers each unit before its forward and its backward ops (the next unit's
// gather when the previous one starts: prefetch).
void gather_units(TrainingGraph& tg, const std::vector<ParameterUnit>& units, int dp, Insertions& ins, ZeroSharding& z) {
  analysis::Graph& g = tg.graph;
  struct UnitUse {
    std::size_t forward = kNever, backward = kNever;
  };
  std::vector<UnitUse> use(units.size());
  std::vector<std::vector<OpId>> fwd_readers(tg.param_grads.size()), bwd_readers(tg.param_grads.size());
  for (std::size_t u = 0; u < units.size(); ++u)
    for (std::size_t k : units[u].params)
      for (OpId o : g.tensors[tg.param_grads[k].first].consumers) {
        if (g.ops[o].phase == Phase::forward) {
          fwd_readers[k].push_back(o);
          use[u].forward = std::min<std::size_t>(use[u].forward, o);
        } else if (g.ops[o].phase == Phase::backward) {
          bwd_readers[k].push_back(o);
          use[u].backward = std::min<std::size_t>(use[u].backward, o);
        }
      }
  // Forward: unit u is gathered when unit u - 1 starts (prefetch), the first unit before its first op.
  std::vector<std::size_t> fwd_order, bwd_order;
  for (std::size_t u = 0; u < units.size(); ++u) {
    if (use[u].forward != kNever) fwd_order.push_back(u);
    if (use[u].backward != kNever) bwd_order.push_back(u);
  }
  std::stable_sort(fwd_order.begin(), fwd_order.end(), [&](std::size_t a, std::size_t b) { return use[a].forward < use[b].forward; });
  std::stable_sort(bwd_order.begin(), bwd_order.end(), [&](std::size_t a, std::size_t b) { return use[a].backward < use[b].backward; });
  auto gather = [&](const std::vector<std::size_t>& order, bool forward) {
    for (std::size_t j = 0; j < order.size(); ++j) {
      const std::size_t u = order[j];
      const std::size_t at = j == 0 ? (forward ? use[u].forward : use[u].backward)
                                    : (forward ? use[order[j - 1]].forward : use[order[j - 1]].backward);
      std::vector<TensorId> in, out;
      for (std::size_t k : units[u].params) {
        const auto& readers = forward ? fwd_readers[k] : bwd_readers[k];
        if (readers.empty()) continue;
        const TensorId w = tg.param_grads[k].first;
        const TensorId full = add_like(g, w, forward ? "/gathered" : "/gathered_bwd", TensorRole::activation);
        redirect(g, w, full, readers);
        in.push_back(w);
        out.push_back(full);
        z.communication.all_gather += ring_shard_bytes(g.tensors[full].bytes(), dp);
      }
      ins.before[at].push_back(collective(std::string(forward ? "fsdp/all_gather/" : "fsdp/all_gather_bwd/") + units[u].name,
                                          analysis::memplan_ops::kAllGather, forward ? Phase::forward : Phase::backward, in, out, dp));
    }
  };
  gather(fwd_order, true);
  gather(bwd_order, false);
  for (std::size_t k = 0; k < tg.param_grads.size(); ++k) {
    const TensorId w = tg.param_grads[k].first;
    make_shard(g.tensors[w], dp);
    if (k < tg.updated_weights.size()) make_shard(g.tensors[tg.updated_weights[k]], dp);
  }
}

}  // namespace

ZeroSharding shard_data_parallel(TrainingGraph& tg, int dp, int stage) {
  analysis::Graph& g = tg.graph;
  ZeroSharding z;
  const std::vector<ParameterUnit> units = parameter_units(tg);
  z.units = units.size();
  for (const auto& [w, grad] : tg.param_grads) {
    z.unsharded_weight_bytes += g.tensors[w].bytes();
    z.unsharded_gradient_bytes += g.tensors[grad].bytes();
  }
  if (dp <= 1) {
    for (const auto& [w, grad] : tg.param_grads) z.gradient_bytes += g.tensors[grad].bytes();
    z.weight_bytes = z.unsharded_weight_bytes;
    for (TensorId s : tg.optimizer_state) z.optimizer_state_bytes += g.tensors[s].bytes();
    return z;
  }
  shard_optimizer_state(tg, dp, stage, z);
  Insertions ins(g.ops.size());
  reduce_gradients(tg, units, dp, stage, ins, z);
  // Weights: stages 1-2 update their shard and all-gather the full weights in place after the step (no
  // buffer); stage 3 keeps only the shard and gathers each unit before its forward and its backward ops.
  for (const auto& [w, grad] : tg.param_grads) {
    if (stage >= 1 && stage <= 2) z.communication.all_gather += ring_shard_bytes(g.tensors[w].bytes(), dp);
  }
  if (stage == 3) gather_units(tg, units, dp, ins, z);
  for (const auto& [w, grad] : tg.param_grads) z.weight_bytes += g.tensors[w].bytes();
  ins.apply(g);
  return z;
}

}  // namespace memplan::planner
